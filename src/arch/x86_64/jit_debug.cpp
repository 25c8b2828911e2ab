// Unwind info and GDB symbol files for generated images.
//
// The unwind program (one CIE + one FDE per image, pointers DW_EH_PE_absptr so the
// buffer can live on the heap, far from the image), for an image with exits at e1 < e2:
//
//   CIE  "zR" (or "zPR": personality, absptr)   code_align 1, data_align -8, ra = r16
//        DW_CFA_def_cfa rsp+8; DW_CFA_offset r16 at CFA-8;
//        DW_CFA_same_value rbp                                     ; image+0
//   FDE  pc_begin = start, pc_range = size
//        DW_CFA_advance_loc 1; DW_CFA_def_cfa_offset 16;
//        DW_CFA_offset rbp at CFA-16                               ; after push rbp
//        DW_CFA_advance_loc 3; DW_CFA_def_cfa_register rbp         ; after mov rbp,rsp
//        advance to e1+1; DW_CFA_remember_state;
//        DW_CFA_def_cfa rsp+8; DW_CFA_restore rbp                  ; after leave (at ret)
//        (exits with a push: advance past it; DW_CFA_def_cfa_offset 16)
//        advance to e1+2; DW_CFA_restore_state                     ; body goes on
//        advance to e2+1; DW_CFA_remember_state; def_cfa rsp+8; restore rbp
//        (e2+2 == size: nothing follows, no restore_state)
//   terminator (length 0)
//
// libgcc (__register_frame) takes a whole .eh_frame section: it walks CIE/FDE records
// until a zero length. It keeps a pointer to the buffer, so the buffer lives as long as
// the registration.
#include "arch/jit_debug.hpp"

#include <elf.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "common/hex.hpp"

// ---------------------------------------------------------------------------------
// GDB's JIT interface, as the GDB manual ("JIT Compilation Interface") specifies it.
// gdb puts a breakpoint on __jit_debug_register_code and, when it hits, reads
// __jit_debug_descriptor: action_flag says what happened to relevant_entry. The list is
// only changed under g_gdb_mutex, and the function is called after every change.
// Both symbols are exported (libutramp has default visibility); -Bsymbolic binds our
// own references to them, so another JIT library keeps its own descriptor (gdb reads
// every objfile's). One trap: for a data symbol of a shared library gdb reads the main
// program's symbol of the same name when there is one (it assumes a copy relocation).
// A main program that defines __jit_debug_descriptor itself, or references ours and so
// copy-relocates it, hides our images from gdb; the tests look it up with dlsym.
extern "C" {

enum utramp_jit_actions : uint32_t { JIT_NOACTION = 0, JIT_REGISTER_FN, JIT_UNREGISTER_FN };

struct jit_code_entry {
  jit_code_entry* next_entry;
  jit_code_entry* prev_entry;
  const char* symfile_addr;
  uint64_t symfile_size;
};

struct jit_descriptor {
  uint32_t version;
  uint32_t action_flag;  // utramp_jit_actions
  jit_code_entry* relevant_entry;
  jit_code_entry* first_entry;
};

__attribute__((visibility("default"), used)) jit_descriptor __jit_debug_descriptor = {
    1, JIT_NOACTION, nullptr, nullptr};

// gdb's breakpoint target: must exist as a real call, never inlined or folded away.
__attribute__((visibility("default"), used, noinline)) void __jit_debug_register_code() {
  asm volatile("" ::: "memory");
}

}  // extern "C"

// libgcc_s (unwind-dw2-fde.c): register/deregister a whole .eh_frame section. Declared
// by no installed header.
extern "C" void __register_frame(void* begin);
extern "C" void __deregister_frame(void* begin);

namespace utramp::arch {

// The records of a batch of images (one register_images call: an attach of many
// functions) live in one blob: a CIE, each image's FDE (registered with libgcc one by
// one, so that each is deregistered when its image is freed), then one ELF for gdb with
// a section and a symbol per image. An image freed before the others is taken out of the
// ELF in place (its section no longer allocated, its symbol undefined) and gdb is told
// to read the batch again; the blob is freed with the batch's last image. Per image
// records of their own took eight allocations and about 1 KB each, and a gdb
// registration each: 1 MB and 1,000 stops of an attached gdb for a tracer's 1,000
// images at start-up.
struct DebugBatch;
struct DebugHandle {
  DebugBatch* batch = nullptr;
  uint64_t start = 0;    // the image's, for the range registry
  uint32_t fde = 0;      // offset of its FDE in the blob
  uint32_t section = 0;  // its section in the ELF (its symbol has the same index)
};

struct DebugBatch {
  std::vector<uint8_t> blob;  // registered with libgcc: lives as long as any FDE of it
  uint64_t shdrs = 0;         // offset of the ELF's section headers in the blob
  uint64_t syms = 0;          // of its symbol table
  std::vector<DebugHandle> images;
  size_t live = 0;  // images not unregistered (under g_gdb_mutex)
  jit_code_entry entry{};
};

namespace {

// DWARF call frame instructions (DWARF 4, §6.4.2) and pointer encodings (LSB, .eh_frame).
enum : uint8_t {
  DW_CFA_nop = 0x00,
  DW_CFA_advance_loc1 = 0x02,
  DW_CFA_advance_loc2 = 0x03,
  DW_CFA_advance_loc4 = 0x04,
  DW_CFA_same_value = 0x08,
  DW_CFA_remember_state = 0x0a,
  DW_CFA_restore_state = 0x0b,
  DW_CFA_def_cfa = 0x0c,
  DW_CFA_def_cfa_register = 0x0d,
  DW_CFA_def_cfa_offset = 0x0e,
  DW_CFA_advance_loc = 0x40,  // | delta (< 64)
  DW_CFA_offset = 0x80,       // | register, then ULEB128 factored offset
  DW_CFA_restore = 0xc0,      // | register
};
constexpr uint8_t DW_EH_PE_absptr = 0x00;

// DWARF register numbers of the x86-64 psABI.
constexpr uint8_t kDwRbp = 6;
constexpr uint8_t kDwRsp = 7;
constexpr uint8_t kDwRa = 16;
constexpr int kDataAlign = -8;

// The instructions the layout is made of.
constexpr uint8_t kPushRbp = 0x55;
constexpr std::array<uint8_t, 3> kMovRbpRsp = {0x48, 0x89, 0xe5};     // mov rbp, rsp (MR)
constexpr std::array<uint8_t, 3> kMovRbpRspAlt = {0x48, 0x8b, 0xec};  // mov rbp, rsp (RM)
constexpr uint8_t kLeave = 0xc9;
constexpr uint8_t kRet = 0xc3;
constexpr uint32_t kPrologueLen = 1 + kMovRbpRsp.size();
constexpr uint32_t kExitLen = 2;  // leave; ret

class Bytes {
 public:
  // `expected`: about the size it will have, reserved at once (grown by doubling from
  // empty, the four buffers of one image's records took 14 more allocations: 14,000 for
  // a tracer's 1,000 images).
  explicit Bytes(size_t expected = 0) { b_.reserve(expected); }
  void u8(uint8_t v) { b_.push_back(v); }
  void u32(uint32_t v) { raw(&v, sizeof v); }
  void u64(uint64_t v) { raw(&v, sizeof v); }
  void uleb(uint64_t v) {
    do {
      uint8_t byte = v & 0x7f;
      v >>= 7;
      if (v) byte |= 0x80;
      b_.push_back(byte);
    } while (v);
  }
  void sleb(int64_t v) {
    for (;;) {
      const uint8_t byte = v & 0x7f;
      v >>= 7;  // arithmetic shift
      const bool done = (v == 0 && !(byte & 0x40)) || (v == -1 && (byte & 0x40));
      b_.push_back(done ? byte : (byte | 0x80));
      if (done) return;
    }
  }
  void str(std::string_view s) {
    b_.insert(b_.end(), s.begin(), s.end());
    b_.push_back(0);
  }
  void raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b_.insert(b_.end(), c, c + n);
  }
  void pad_to(size_t align, uint8_t fill) {
    while (b_.size() % align) b_.push_back(fill);
  }
  void patch_u32(size_t at, uint32_t v) { std::memcpy(b_.data() + at, &v, sizeof v); }
  void patch(size_t at, const void* p, size_t n) { std::memcpy(b_.data() + at, p, n); }
  size_t size() const { return b_.size(); }
  std::vector<uint8_t> take() { return std::move(b_); }

 private:
  std::vector<uint8_t> b_;
};

void advance(Bytes& b, uint32_t delta) {
  if (delta == 0) return;
  if (delta < 64) {
    b.u8(DW_CFA_advance_loc | static_cast<uint8_t>(delta));
  } else if (delta <= 0xff) {
    b.u8(DW_CFA_advance_loc1);
    b.u8(static_cast<uint8_t>(delta));
  } else if (delta <= 0xffff) {
    b.u8(DW_CFA_advance_loc2);
    const uint16_t d = static_cast<uint16_t>(delta);
    b.raw(&d, sizeof d);
  } else {
    b.u8(DW_CFA_advance_loc4);
    b.u32(delta);
  }
}

// Sorted exits, checked against the layout (not the bytes).
Result<std::vector<uint32_t>> checked_exits(const ImageFrame& f) {
  if (f.start == 0 || f.size < kPrologueLen || f.size > UINT32_MAX)
    return make_error(Errc::invalid_argument,
                      fmt::format("image {:#x} size {}: not a framed image", f.start, f.size));
  std::vector<uint32_t> exits = f.exit_offsets;
  std::sort(exits.begin(), exits.end());
  uint64_t next_free = kPrologueLen;
  for (uint32_t e : exits) {
    if (f.exit_len < 2 || (f.exit_push && (f.exit_push < 2 || f.exit_push >= f.exit_len)) ||
        e < next_free || uint64_t{e} + f.exit_len > f.size)
      return make_error(Errc::invalid_argument,
                        fmt::format("image {:#x} size {}: exit at +{} overlaps the prologue, "
                                    "another exit or the end",
                                    f.start, f.size, e));
    next_free = uint64_t{e} + f.exit_len;
  }
  return exits;
}

// The layout is a promise the generator makes; a wrong FDE would corrupt unwinding
// silently, so the bytes are checked before anything is published.
Result<void> check_bytes(const ImageFrame& f, std::span<const uint32_t> exits) {
  const auto* code = reinterpret_cast<const uint8_t*>(f.start);
  const std::span<const uint8_t> prologue(code, kPrologueLen);
  const std::span<const uint8_t> mov = prologue.subspan(1);
  const bool mov_ok = std::equal(mov.begin(), mov.end(), kMovRbpRsp.begin()) ||
                      std::equal(mov.begin(), mov.end(), kMovRbpRspAlt.begin());
  if (prologue[0] != kPushRbp || !mov_ok)
    return make_error(Errc::bytes_mismatch,
                      fmt::format("image {:#x}: prologue is {}, expected {:02x} {} "
                                  "(push rbp; mov rbp, rsp)",
                                  f.start, hex_bytes(prologue), kPushRbp, hex_bytes(kMovRbpRsp)));
  for (uint32_t e : exits) {
    const std::span<const uint8_t> ex(code + e, kExitLen);
    if (ex[0] != kLeave || (f.exit_len == kExitLen && ex[1] != kRet))
      return make_error(Errc::bytes_mismatch,
                        fmt::format("image {:#x}: exit at +{} is {}, expected {:02x} {:02x} "
                                    "(leave; ret)",
                                    f.start, e, hex_bytes(ex), kLeave, kRet));
  }
  return {};
}

// The CIE every image's FDE points back to, appended to `b`; returns its offset.
constexpr size_t kCieSizeGuess = 40;
size_t cie_for(Bytes& b, void* personality) {
  // CIE. Records are padded with DW_CFA_nop to 8 bytes so that the FDE's absptr
  // pc_begin/pc_range are naturally aligned (libgcc reads them as _Unwind_Ptr[2]).
  const size_t cie = b.size();
  b.u32(0);  // length, patched
  b.u32(0);  // CIE id
  b.u8(1);   // version
  b.str(personality ? "zPR" : "zR");
  b.uleb(1);           // code alignment factor
  b.sleb(kDataAlign);  // data alignment factor
  b.u8(kDwRa);         // return address register (version 1: one byte)
  if (personality) {
    b.uleb(1 + 8 + 1);
    b.u8(DW_EH_PE_absptr);
    b.u64(reinterpret_cast<uint64_t>(personality));
  } else {
    b.uleb(1);
  }
  b.u8(DW_EH_PE_absptr);  // 'R': FDE pointer encoding
  // At image+0 the call has just pushed the return address and rbp is the caller's:
  // the rule DW_CFA_restore brings rbp back to after each leave.
  b.u8(DW_CFA_def_cfa);
  b.uleb(kDwRsp);
  b.uleb(8);
  b.u8(DW_CFA_offset | kDwRa);
  b.uleb(8 / -kDataAlign);
  b.u8(DW_CFA_same_value);
  b.uleb(kDwRbp);
  b.pad_to(8, DW_CFA_nop);
  b.patch_u32(cie, static_cast<uint32_t>(b.size() - cie - 4));
  return cie;
}

// An image's FDE after the CIE at `cie` (earlier in `b`: the CIE pointer is the distance
// back to it), then a terminator, padded so that the next FDE is 8-aligned too. libgcc
// is given the FDE's address: it walks records from there to the terminator and finds
// the CIE through the pointer.
constexpr size_t fde_size_guess(size_t exits) { return 48 + 8 * exits; }
void fde_for(Bytes& b, size_t cie, const ImageFrame& f, std::span<const uint32_t> exits) {
  const size_t fde = b.size();
  b.u32(0);                                          // length, patched
  b.u32(static_cast<uint32_t>(b.size() - cie));      // CIE pointer: back to the CIE
  b.u64(f.start);                                    // pc_begin
  b.u64(f.size);                                     // pc_range
  b.uleb(0);                                         // augmentation data length
  uint32_t loc = 0;
  auto advance_to = [&](uint32_t off) {
    advance(b, off - loc);
    loc = off;
  };
  advance_to(1);  // after push rbp
  b.u8(DW_CFA_def_cfa_offset);
  b.uleb(16);
  b.u8(DW_CFA_offset | kDwRbp);
  b.uleb(16 / -kDataAlign);
  advance_to(kPrologueLen);  // after mov rbp, rsp
  b.u8(DW_CFA_def_cfa_register);
  b.uleb(kDwRbp);
  for (uint32_t e : exits) {
    advance_to(e + 1);  // after leave: at the ret
    b.u8(DW_CFA_remember_state);
    b.u8(DW_CFA_def_cfa);
    b.uleb(kDwRsp);
    b.uleb(8);
    b.u8(DW_CFA_restore | kDwRbp);
    if (f.exit_push) {
      advance_to(e + f.exit_push);  // after the push: one more slot below the CFA
      b.u8(DW_CFA_def_cfa_offset);
      b.uleb(16);
    }
    if (uint64_t{e} + f.exit_len < f.size) {
      advance_to(e + f.exit_len);  // the body goes on after this exit
      b.u8(DW_CFA_restore_state);
    }
  }
  b.pad_to(8, DW_CFA_nop);
  b.patch_u32(fde, static_cast<uint32_t>(b.size() - fde - 4));
  b.u32(0);  // terminator
  b.u32(0);  // (padding: the next FDE 8-aligned)
}

// A minimal relocatable ELF gdb loads as a symbol file (the layout LLVM's JIT
// registration uses: section addresses are absolute load addresses), appended to `out`
// at an 8-aligned offset (its offsets relative to its own start), for images 1..n:
//
//   [0] null  [i] .text NOBITS ALLOC|EXECINSTR at image i's start, its size
//   [n+1] .symtab: null, then image i's name FUNC GLOBAL in section i, value 0
//         (section-relative), its size
//   [n+2] .strtab: the symbols' names and the sections' (e_shstrndx is .strtab too)
//
// Notes in `batch` where the section headers and symbols are (drop_from_symfile);
// returns the ELF's offset in `out`.
constexpr size_t symfile_size_guess(size_t images, size_t names) {
  return sizeof(Elf64_Ehdr) + 40 + names + (images + 1) * sizeof(Elf64_Sym) +
         (images + 3) * sizeof(Elf64_Shdr);
}
// A section index must stay below SHN_LORESERVE (no extended numbering here).
constexpr size_t kMaxBatch = 4096;
size_t symfile_for(Bytes& out, DebugBatch& batch, std::span<const ImageFrame* const> frames,
                   std::span<const std::string_view> names) {
  const size_t n = frames.size();
  const auto strtab = static_cast<uint16_t>(n + 2), sections = static_cast<uint16_t>(n + 3);
  out.pad_to(8, 0);
  const size_t base = out.size();
  out.raw(std::array<uint8_t, sizeof(Elf64_Ehdr)>{}.data(), sizeof(Elf64_Ehdr));
  const uint64_t symtab_off = out.size() - base;
  const Elf64_Sym null_sym{};
  for (size_t i = 0; i <= n; ++i) out.raw(&null_sym, sizeof null_sym);  // filled below
  const uint64_t strtab_off = out.size() - base;
  out.u8(0);
  auto add_str = [&](std::string_view str) {
    const auto at = static_cast<uint32_t>(out.size() - base - strtab_off);
    out.str(str);
    return at;
  };
  const uint32_t text_name = add_str(".text"), symtab_name = add_str(".symtab"),
                 strtab_name = add_str(".strtab");
  std::vector<uint32_t> sym_names(n);
  // NUL inside a name would cut it short; keep what precedes it.
  for (size_t i = 0; i < n; ++i) sym_names[i] = add_str(names[i].substr(0, names[i].find('\0')));
  const uint64_t strtab_size = out.size() - base - strtab_off;
  out.pad_to(8, 0);
  const uint64_t shoff = out.size() - base;

  for (size_t i = 0; i < n; ++i) {
    Elf64_Sym sym{};
    sym.st_name = sym_names[i];
    sym.st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC);
    sym.st_other = STV_DEFAULT;
    sym.st_shndx = static_cast<uint16_t>(i + 1);
    sym.st_value = 0;
    sym.st_size = frames[i]->size;
    out.patch(base + symtab_off + (i + 1) * sizeof sym, &sym, sizeof sym);
  }
  Elf64_Shdr sh{};
  out.raw(&sh, sizeof sh);  // [0]
  for (size_t i = 0; i < n; ++i) {
    sh = {};
    sh.sh_name = text_name;
    sh.sh_type = SHT_NOBITS;
    sh.sh_flags = SHF_ALLOC | SHF_EXECINSTR;
    sh.sh_addr = frames[i]->start;
    sh.sh_offset = shoff;
    sh.sh_size = frames[i]->size;
    sh.sh_addralign = 16;
    out.raw(&sh, sizeof sh);
  }
  sh = {};
  sh.sh_name = symtab_name;
  sh.sh_type = SHT_SYMTAB;
  sh.sh_offset = symtab_off;
  sh.sh_size = (n + 1) * sizeof(Elf64_Sym);
  sh.sh_link = strtab;
  sh.sh_info = 1;  // index of the first non-local symbol
  sh.sh_addralign = 8;
  sh.sh_entsize = sizeof(Elf64_Sym);
  out.raw(&sh, sizeof sh);
  sh = {};
  sh.sh_name = strtab_name;
  sh.sh_type = SHT_STRTAB;
  sh.sh_offset = strtab_off;
  sh.sh_size = strtab_size;
  sh.sh_addralign = 1;
  out.raw(&sh, sizeof sh);

  Elf64_Ehdr eh = {};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_ident[EI_OSABI] = ELFOSABI_NONE;
  eh.e_type = ET_REL;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_shoff = shoff;
  eh.e_ehsize = sizeof(Elf64_Ehdr);
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = sections;
  eh.e_shstrndx = strtab;
  out.patch(base, &eh, sizeof eh);
  batch.shdrs = base + shoff;
  batch.syms = base + symtab_off;
  return base;
}

// Takes image `h` out of its batch's ELF: its section no longer allocated (gdb maps no
// address to it), its symbol undefined (gdb makes no symbol of it).
void drop_from_symfile(DebugBatch& b, const DebugHandle& h) {
  Elf64_Shdr sh;
  uint8_t* at = b.blob.data() + b.shdrs + h.section * sizeof sh;
  std::memcpy(&sh, at, sizeof sh);
  sh.sh_flags = 0;
  sh.sh_addr = 0;
  sh.sh_size = 0;
  std::memcpy(at, &sh, sizeof sh);
  Elf64_Sym sym;
  at = b.blob.data() + b.syms + h.section * sizeof sym;
  std::memcpy(&sym, at, sizeof sym);
  sym.st_info = ELF64_ST_INFO(STB_GLOBAL, STT_NOTYPE);
  sym.st_shndx = SHN_UNDEF;
  sym.st_size = 0;
  std::memcpy(at, &sym, sizeof sym);
}

// --- GDB registration ---------------------------------------------------------------

std::mutex g_gdb_mutex;  // guards __jit_debug_descriptor, its list and DebugBatch::live

void gdb_register_locked(jit_code_entry* e) {
  e->prev_entry = nullptr;
  e->next_entry = __jit_debug_descriptor.first_entry;
  if (e->next_entry) e->next_entry->prev_entry = e;
  __jit_debug_descriptor.first_entry = e;
  __jit_debug_descriptor.relevant_entry = e;
  __jit_debug_descriptor.action_flag = JIT_REGISTER_FN;
  __jit_debug_register_code();
}

void gdb_unregister_locked(jit_code_entry* e) {
  if (e->prev_entry)
    e->prev_entry->next_entry = e->next_entry;
  else
    __jit_debug_descriptor.first_entry = e->next_entry;
  if (e->next_entry) e->next_entry->prev_entry = e->prev_entry;
  __jit_debug_descriptor.relevant_entry = e;
  __jit_debug_descriptor.action_flag = JIT_UNREGISTER_FN;
  __jit_debug_register_code();
}

// --- Ranges with registered unwind info ---------------------------------------------
//
// libgcc >= 13 keys registered frames by their start address in a b-tree: a second
// registration of the same start is dropped and the first deregistration then removes
// the wrong object. Images never overlap, so an overlap is a caller bug, refused here.

std::mutex g_ranges_mu;
// Never destroyed: the reclaimer may unregister while static destructors run at exit.
std::map<uint64_t, uint64_t>& ranges() {  // start -> end
  static auto* m = new std::map<uint64_t, uint64_t>();
  return *m;
}

Result<void> claim_range(const ImageFrame& f) {
  std::lock_guard lock(g_ranges_mu);
  const uint64_t end = f.start + f.size;
  auto next = ranges().lower_bound(f.start);
  if (next != ranges().end() && next->first < end)
    return make_error(Errc::busy, fmt::format("image {:#x}-{:#x} overlaps registered {:#x}-{:#x}",
                                              f.start, end, next->first, next->second));
  if (next != ranges().begin() && std::prev(next)->second > f.start)
    return make_error(Errc::busy, fmt::format("image {:#x}-{:#x} overlaps registered {:#x}-{:#x}",
                                              f.start, end, std::prev(next)->first,
                                              std::prev(next)->second));
  ranges().emplace_hint(next, f.start, end);
  return {};
}

void release_range(uint64_t start) {
  std::lock_guard lock(g_ranges_mu);
  ranges().erase(start);
}

}  // namespace

Result<std::vector<uint8_t>> build_eh_frame(const ImageFrame& frame, void* personality) {
  auto exits = checked_exits(frame);
  if (!exits) return std::move(exits).error();
  Bytes b(kCieSizeGuess + fde_size_guess(exits->size()));
  const size_t cie = cie_for(b, personality);
  fde_for(b, cie, frame, *exits);
  std::vector<uint8_t> out = b.take();
  out.resize(out.size() - 4);  // the padding after the terminator: a section ends there
  return out;
}

std::vector<Result<DebugHandle*>> register_images(std::span<const ImageFrame* const> frames,
                                                  std::span<const std::string_view> names,
                                                  void* personality) {
  std::vector<Result<DebugHandle*>> out;
  out.reserve(frames.size());
  // Checked one by one: a refused image is left out of the batch with its reason.
  std::vector<size_t> ok;
  std::vector<std::vector<uint32_t>> exits(frames.size());
  ok.reserve(frames.size());
  auto check = [](const ImageFrame& f, std::vector<uint32_t>& exits) -> Result<void> {
    auto e = checked_exits(f);
    if (!e) return std::move(e).error();
    UTRAMP_TRY(check_bytes(f, *e));
    UTRAMP_TRY(claim_range(f));
    exits = std::move(*e);
    return {};
  };
  for (size_t i = 0; i < frames.size(); ++i) {
    if (auto r = check(*frames[i], exits[i]); !r) {
      out.emplace_back(std::move(r).error());
      continue;
    }
    out.emplace_back(static_cast<DebugHandle*>(nullptr));
    ok.push_back(i);
  }
  for (size_t from = 0; from < ok.size(); from += kMaxBatch) {
    const size_t n = std::min(kMaxBatch, ok.size() - from);
    std::vector<const ImageFrame*> fr(n);
    std::vector<std::string_view> nm(n);
    size_t guess = kCieSizeGuess + 8, name_bytes = 0;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = ok[from + k];
      fr[k] = frames[i];
      nm[k] = names[i];
      guess += fde_size_guess(exits[i].size());
      name_bytes += names[i].size() + 1;
    }
    auto* batch = new DebugBatch();
    Bytes b(guess + symfile_size_guess(n, name_bytes));
    const size_t cie = cie_for(b, personality);
    batch->images.resize(n);
    for (size_t k = 0; k < n; ++k) {
      DebugHandle& h = batch->images[k];
      h.batch = batch;
      h.start = fr[k]->start;
      h.fde = static_cast<uint32_t>(b.size());
      h.section = static_cast<uint32_t>(k + 1);
      fde_for(b, cie, *fr[k], exits[ok[from + k]]);
    }
    const size_t symfile = symfile_for(b, *batch, fr, nm);
    batch->blob = b.take();
    batch->entry.symfile_addr = reinterpret_cast<const char*>(batch->blob.data() + symfile);
    batch->entry.symfile_size = batch->blob.size() - symfile;
    batch->live = n;
    // Nothing below fails: unwinder first, then the observers.
    for (DebugHandle& h : batch->images) __register_frame(batch->blob.data() + h.fde);
    {
      std::lock_guard lock(g_gdb_mutex);
      gdb_register_locked(&batch->entry);
    }
    for (size_t k = 0; k < n; ++k) out[ok[from + k]] = &batch->images[k];
  }
  return out;
}

Result<DebugHandle*> register_image(const ImageFrame& frame, std::string_view name,
                                    void* personality) {
  const ImageFrame* f = &frame;
  return std::move(register_images({&f, 1}, {&name, 1}, personality).front());
}

void unregister_image(DebugHandle* h) {
  if (!h) return;
  DebugBatch* b = h->batch;
  __deregister_frame(b->blob.data() + h->fde);
  release_range(h->start);
  bool last = false;
  {
    std::lock_guard lock(g_gdb_mutex);
    gdb_unregister_locked(&b->entry);
    last = --b->live == 0;
    if (!last) {
      drop_from_symfile(*b, *h);
      gdb_register_locked(&b->entry);
    }
  }
  if (last) delete b;
}

}  // namespace utramp::arch
