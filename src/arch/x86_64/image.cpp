// Stubs and images: the x86-64 code of the BPF-trampoline machinery.
#include "arch/image.hpp"

#include <asmjit/x86.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>

#include "abi/ctx.hpp"
#include "arch/arch.hpp"
#include "arch/x86_64/asm_util.hpp"

namespace utramp::arch {

namespace {

namespace ax = asmjit::x86;
using asmjit::Imm;
using asmjit::Label;
using abi::ArgType;
using abi::Part;
using abi::RetType;
using abi::Signature;
using x86::assemble;
using x86::fs_mem;

const ax::Gp kIntArgs[6] = {ax::rdi, ax::rsi, ax::rdx, ax::rcx, ax::r8, ax::r9};
constexpr int kSseArgs = 8;

// ---- Fields of a template -------------------------------------------------------------
//
// Stubs and the tracer's images of one shape (everything of their spec but the values
// below) differ only in a few fields: a function's address, its counter slots, the
// addresses its code jumps to, and every rel32 to a fixed target (it depends on where
// the code is). While code is emitted to become a template (emit_stub, the tracer's
// image), each emitter that writes such a field notes where, in what form and for
// which value; `instantiate` below then makes the code of another function of the
// shape by copying the bytes and writing the fields (docs/trampolines.md, "Templates").

// What a field holds.
enum class Param : uint8_t {
  target,      // a fixed address (Field::target): only the rel32 to it moves with the code
  func,        // the traced function's address
  original,    // what runs the body
  pass,        // the stub's pass-through
  exit_fn,     // the stub's exit
  site_slot,   // counters + 4 * the site's counter slot (a stub's own counter)
  image_slot,  // counters + 4 * the image's counter slot
};

struct Field {
  enum class Form : uint8_t {
    rel32_chosen,  // call_abs/jmp_abs's rel32: taken when the target is in reach
    abs64_chosen,  // their `mov r11, imm64` when it is not
    rel32,         // a jmp/call that always is rel32 (its target is always in reach)
    imm32,         // mov r32, imm32 (the value zero-extended)
    imm64,         // mov r64, imm64
    disp32,        // [r11 + disp32]
  };
  uint32_t at;     // offset of the field's bytes in the code
  Form form;
  Param param;
  uint64_t target = 0;  // Param::target
};

// The fields being noted on this thread (null: no template is being made).
thread_local std::vector<Field>* t_fields = nullptr;

// Notes a field that ends where the assembler is now.
void note(ax::Assembler& a, Field::Form form, Param param, uint64_t target = 0) {
  if (!t_fields) return;
  const uint32_t size = form == Field::Form::imm64 || form == Field::Form::abs64_chosen ? 8 : 4;
  t_fields->push_back({static_cast<uint32_t>(a.offset()) - size, form, param, target});
}

// Calls `target` from code at an unknown-yet-fixed base: rel32 when asmjit finds it in
// reach, else through r11 (scratch at every point we call from).
// r11 = this thread's block (tramp/threads.hpp), through its initial-exec pointer. Set
// wherever an image runs: the stub that led there registered the thread.
void load_block(ax::Assembler& a, const ThreadLayout& tls) { a.mov(ax::r11, fs_mem(tls.block, 8)); }

// A field of the block loaded into r11, `offset` bytes in.
ax::Mem block_mem(int64_t offset, uint32_t size) {
  return ax::ptr(ax::r11, static_cast<int32_t>(offset), size);
}

void call_abs(ax::Assembler& a, uint64_t target, uint64_t base, Param param = Param::target) {
  if (x86::rel32_reaches_block(base, x86::kBlockReach, target)) {
    a.call(Imm(target));
    note(a, Field::Form::rel32_chosen, param, target);
  } else {
    a.mov(ax::r11, Imm(target));
    note(a, Field::Form::abs64_chosen, param, target);
    a.call(ax::r11);
  }
}

void jmp_abs(ax::Assembler& a, uint64_t target, uint64_t base, Param param = Param::target) {
  if (x86::rel32_reaches_block(base, x86::kBlockReach, target)) {
    a.long_().jmp(Imm(target));
    note(a, Field::Form::rel32_chosen, param, target);
  } else {
    a.mov(ax::r11, Imm(target));
    note(a, Field::Form::abs64_chosen, param, target);
    a.jmp(ax::r11);
  }
}

// Where one argument eightbyte arrives.
struct Loc {
  enum class Kind : uint8_t { gpr, xmm, stack, stack_addr } kind;
  int reg = 0;          // gpr index (kIntArgs) or xmm number
  int32_t off = 0;      // stack: offset from the first stack argument
  uint16_t size = 8;    // bytes of the value in this eightbyte (zero-extended to 8)
};

struct Layout {
  std::vector<Loc> slots;   // one per ctx argument slot
  int used_gpr = 0, used_xmm = 0;
  int32_t stack_bytes = 0;  // named stack arguments
  bool hidden_ret = false;  // rdi carries the return buffer
};

// System V argument assignment (psABI §3.2.3).
Layout assign(const Signature& sig) {
  Layout l;
  l.hidden_ret = sig.ret.kind == RetType::Kind::memory;
  int gpr = l.hidden_ret ? 1 : 0, xmm = 0;
  int32_t stack = 0;
  for (const ArgType& t : sig.args) {
    if (t.kind == ArgType::Kind::memory) {
      const int32_t align = std::max<int32_t>(8, t.align);
      stack = (stack + align - 1) / align * align;
      l.slots.push_back({Loc::Kind::stack_addr, 0, stack, 8});
      stack += (t.size + 7) / 8 * 8;
      continue;
    }
    int need_g = 0, need_x = 0;
    for (int i = 0; i < t.eightbytes(); ++i) (t.parts[i] == Part::sse ? need_x : need_g)++;
    if (gpr + need_g <= 6 && xmm + need_x <= kSseArgs) {
      for (int i = 0; i < t.eightbytes(); ++i) {
        // The last eightbyte of a 9..15-byte struct holds size-8 bytes of it.
        const uint16_t sz = static_cast<uint16_t>(std::min(8, t.size - 8 * i));
        if (t.parts[i] == Part::sse)
          l.slots.push_back({Loc::Kind::xmm, xmm++, 0, sz});
        else
          l.slots.push_back({Loc::Kind::gpr, gpr++, 0, sz});
      }
    } else {
      // No register for some eightbyte: the whole argument goes on the stack.
      const int32_t align = t.size > 8 && t.align >= 16 ? 16 : 8;
      stack = (stack + align - 1) / align * align;
      for (int i = 0; i < t.eightbytes(); ++i)
        l.slots.push_back({Loc::Kind::stack, 0, stack + 8 * i, static_cast<uint16_t>(std::min(8, t.size - 8 * i))});
      stack += 8 * t.eightbytes();
    }
  }
  l.used_gpr = gpr;
  l.used_xmm = xmm;
  l.stack_bytes = stack;
  return l;
}

// Stack-argument bytes copied when calling the original: the named ones, and for a
// variadic or unknown signature a fixed window for what the signature cannot tell.
constexpr int32_t kVariadicWindow = 128;
constexpr int32_t kUnknownWindow = 64;

int32_t copy_window(const Signature& sig, const Layout& l) {
  if (!sig.known) return kUnknownWindow;
  if (sig.variadic) return l.stack_bytes + kVariadicWindow;
  return l.stack_bytes;
}

// Frame of an image, below rbp:
//
//   rbp+16 ...            stack arguments (we are entered by jmp: rbp+8 is the
//                         caller's return address)
//   rbp+8                 return address
//   rbp                   saved rbp
//   rbp-8                 saved rax (al: vector registers used by a variadic call)
//   rbp-16                saved hidden return pointer (rdi)
//   rbp-24                stats: start timestamp
//   rbp-32                scratch (a program's return value across stats_end)
//   rbp-32-16*8 ...       full xmm0-7 (variadic and unknown signatures only)
//   ... gpr save          rdi..r9 (variadic and unknown signatures, and any with an
//                         argument register carrying fewer than 8 bytes); keeping every
//                         register (preserve_all): a byte saying how the extended state
//                         was saved (Frame::path), then rdi..r9, rax, r10, r11 always, and
//                         no xmm area (the extended state is kept below)
//   ctx-40                the entry stack pointer, rbp+8 (utramp's extension; stored
//                         only when a link asks: ImageSpec::store_frame)
//   ctx-32                the caller's return address (utramp's extension; stored only
//                         when a link asks: ImageSpec::store_caller)
//   ctx-24, -16, -8       cookie, function address, slot count
//   ctx+0 ...             argument slots, then two return slots
//   ... rsp               preserve_all: the extended state's save area, at rsp aligned
//                         down to 64 (kept_area_bytes: XStateSave::size bytes or the
//                         moved state's layout, whichever is larger)
// Return-value slots after the arguments (ctx[n], ctx[n+1]: abi/ctx.hpp).
constexpr int kRetSlots = 2;
// Bytes of an x87 long double in its two return slots (the rest is zeroed).
constexpr int32_t kX87Bytes = 10;

struct Frame {
  // Above rbp (the image is entered by jmp, with the caller's frame as it was).
  static constexpr int32_t kReturnAddress = 8, kStackArgs = 16;
  int32_t rax = -8, hidden = -16, t0 = -24, scratch = -32;
  int32_t xmm = 0;        // rbp-relative start of xmm save area (0: none)
  int32_t gpr = 0;        // rbp-relative start of gpr save area (0: none)
  int32_t ctx = 0;        // rbp-relative address of ctx[0]
  int32_t size = 0;       // bytes below rbp, keeps rsp 16-aligned
  int nslots = 0;
  bool preserve = false;  // every register kept (ImageSpec::preserve_all)
  uint32_t xsave = 0;     // bytes of the extended state's save area (preserve only)
  int32_t path = 0;       // rbp-relative byte: how the extended state was saved (preserve
                          // only: 0 moves, 1 XSAVE; see save_state)
};

// The general registers code that keeps every register saves (preserve_all), in their
// frame slots' order: the argument registers first, so that the slots double as the
// argument registers' save area (Frame::gpr + 8 * kIntArgs index).
uint32_t kept_area_bytes(const XStateSave& x);  // below, with the ways of keeping state

const ax::Gp kKeptGprs[] = {ax::rdi, ax::rsi, ax::rdx, ax::rcx, ax::r8, ax::r9, ax::rax, ax::r10, ax::r11};
constexpr int kKeptRax = 6, kKeptRdx = 2, kKeptRcx = 3;

Frame frame_for(const Signature& sig, const Layout& l, const ImageSpec& sp) {
  Frame f;
  int32_t at = f.scratch;
  if (sp.preserve_all) {
    f.preserve = true;
    f.xsave = kept_area_bytes(sp.xstate);
    at -= 8;
    f.path = at;
    at -= 8 * static_cast<int32_t>(std::size(kKeptGprs));
    f.gpr = at;
    f.nslots = static_cast<int>(l.slots.size());
    at -= 8 * (abi::kCtxHeaderSlots + f.nslots + kRetSlots);
    f.ctx = at + 8 * abi::kCtxHeaderSlots;
    f.size = (-at + 15) / 16 * 16;
    return f;
  }
  const bool save_all = sig.variadic || !sig.known;
  // Registers of arguments narrower than 8 bytes are also kept as they came (below).
  const bool narrow = std::any_of(l.slots.begin(), l.slots.end(), [](const Loc& s) {
    return s.kind == Loc::Kind::gpr && s.size != 8;
  });
  if (save_all) {
    at -= 16 * kSseArgs;
    f.xmm = at;
  }
  if (save_all || narrow) {
    at -= 8 * 6;
    f.gpr = at;
  }
  f.nslots = static_cast<int>(l.slots.size());
  const int32_t ctx_bytes = 8 * (abi::kCtxHeaderSlots + f.nslots + kRetSlots);
  at -= ctx_bytes;
  f.ctx = at + 8 * abi::kCtxHeaderSlots;
  // The image aligns rsp itself (and rsp, -16): the size only keeps it a multiple of 16.
  f.size = (-at + 15) / 16 * 16;
  return f;
}

ax::Mem ctx_slot(const Frame& f, int i) { return ax::qword_ptr(ax::rbp, f.ctx + 8 * i); }
ax::Mem rbp_q(int32_t off) { return ax::qword_ptr(ax::rbp, off); }

// r11 = the low `size` bytes of r11, zero-extended, for the sizes without a mov form
// (3, 5, 6, 7: the eightbyte of a small struct).
void zext_r11_odd(ax::Assembler& a, int size) {
  a.shl(ax::r11, Imm(64 - 8 * size));
  a.shr(ax::r11, Imm(64 - 8 * size));
}

// Arguments into ctx[] (zero-extended), plus the full register file when the signature
// cannot say which registers carry arguments.
//
// A register carrying fewer than 8 bytes is also saved whole (gpr area) and restored
// from there, not from its zero-extended ctx slot: compilers widen a char or short
// argument to 32 bits in the caller, and clang's callees rely on it (a signed char -5
// must arrive as 0xfffffffb in edi, not 0xfb). For `long f(long, double, int)`:
//
//   mov  [ctx+0], rdi
//   movq [ctx+8], xmm0
//   mov  [gpr+8], rsi ; mov r11d, esi ; mov [ctx+16], r11
void save_args(ax::Assembler& a, const Layout& l, const Frame& f) {
  for (size_t i = 0; i < l.slots.size(); ++i) {
    const Loc& s = l.slots[i];
    switch (s.kind) {
      case Loc::Kind::gpr: {
        const ax::Gp r = kIntArgs[s.reg];
        if (s.size == 8) {
          a.mov(ctx_slot(f, int(i)), r);
        } else {
          if (!f.preserve) a.mov(rbp_q(f.gpr + 8 * s.reg), r);
          if (s.size == 4) a.mov(ax::r11d, r.r32());
          else if (s.size == 2) a.movzx(ax::r11d, r.r16());
          else if (s.size == 1) a.movzx(ax::r11d, r.r8());
          else {
            a.mov(ax::r11, r);
            zext_r11_odd(a, s.size);
          }
          a.mov(ctx_slot(f, int(i)), ax::r11);
        }
        break;
      }
      case Loc::Kind::xmm:
        if (s.size == 4) {
          a.movd(ax::r11d, ax::xmm(s.reg));
          a.mov(ctx_slot(f, int(i)), ax::r11);
        } else {
          a.movq(ctx_slot(f, int(i)), ax::xmm(s.reg));
        }
        break;
      case Loc::Kind::stack: {
        const ax::Mem src = rbp_q(Frame::kStackArgs + s.off);
        if (s.size == 8) a.mov(ax::r11, src);
        else if (s.size == 4) a.mov(ax::r11d, ax::dword_ptr(ax::rbp, Frame::kStackArgs + s.off));
        else if (s.size == 2) a.movzx(ax::r11d, ax::word_ptr(ax::rbp, Frame::kStackArgs + s.off));
        else if (s.size == 1) a.movzx(ax::r11d, ax::byte_ptr(ax::rbp, Frame::kStackArgs + s.off));
        else {
          a.mov(ax::r11, src);  // stack slots are 8 bytes: reading all of it is safe
          zext_r11_odd(a, s.size);
        }
        a.mov(ctx_slot(f, int(i)), ax::r11);
        break;
      }
      case Loc::Kind::stack_addr:
        a.lea(ax::r11, ax::ptr(ax::rbp, Frame::kStackArgs + s.off));
        a.mov(ctx_slot(f, int(i)), ax::r11);
        break;
    }
  }
  // (Keeping every register, all of them are saved already: save_all.)
  if (f.xmm) {
    for (int r = 0; r < 6; ++r) a.mov(rbp_q(f.gpr + 8 * r), kIntArgs[r]);
    for (int x = 0; x < kSseArgs; ++x) a.movdqu(ax::ptr(ax::rbp, f.xmm + 16 * x), ax::xmm(x));
    a.mov(rbp_q(f.rax), ax::rax);
  }
  if (l.hidden_ret && !f.preserve) a.mov(rbp_q(f.hidden), ax::rdi);
}

void restore_args(ax::Assembler& a, const Signature& sig, const Layout& l, const Frame& f) {
  if (sig.variadic || !sig.known) {
    for (int r = 0; r < 6; ++r) a.mov(kIntArgs[r], rbp_q(f.gpr + 8 * r));
    for (int x = 0; x < kSseArgs; ++x) a.movdqu(ax::xmm(x), ax::ptr(ax::rbp, f.xmm + 16 * x));
    a.mov(ax::rax, rbp_q(f.rax));
  } else {
    for (size_t i = 0; i < l.slots.size(); ++i) {
      const Loc& s = l.slots[i];
      if (s.kind == Loc::Kind::gpr)
        a.mov(kIntArgs[s.reg], s.size == 8 ? ctx_slot(f, int(i)) : rbp_q(f.gpr + 8 * s.reg));
      else if (s.kind == Loc::Kind::xmm) a.movq(ax::xmm(s.reg), ctx_slot(f, int(i)));
    }
  }
  if (l.hidden_ret) a.mov(ax::rdi, rbp_q(f.hidden));
}

// The return value into ctx[n], ctx[n+1].
void save_ret(ax::Assembler& a, const RetType& r, const Frame& f) {
  const int n = f.nslots;
  switch (r.kind) {
    case RetType::Kind::none:
      a.mov(ctx_slot(f, n), Imm(0));
      a.mov(ctx_slot(f, n + 1), Imm(0));
      return;
    case RetType::Kind::memory:
      a.mov(ctx_slot(f, n), ax::rax);
      a.mov(ctx_slot(f, n + 1), Imm(0));
      return;
    case RetType::Kind::x87:
      a.fstp(ax::tword_ptr(ax::rbp, f.ctx + 8 * n));
      static_assert(kX87Bytes + 2 + 4 == 8 * kRetSlots);
      a.mov(ax::word_ptr(ax::rbp, f.ctx + 8 * n + kX87Bytes), Imm(0));
      a.mov(ax::dword_ptr(ax::rbp, f.ctx + 8 * n + kX87Bytes + 2), Imm(0));
      return;
    case RetType::Kind::reg:
      break;
  }
  int gi = 0, xi = 0;
  const ax::Gp gprs[2] = {ax::rax, ax::rdx};
  const bool two = r.parts[1] != Part::none;
  for (int i = 0; i < (two ? 2 : 1); ++i) {
    const uint16_t sz = static_cast<uint16_t>(std::min(8, r.size - 8 * i));
    if (r.parts[i] == Part::sse) {
      if (sz == 4) {
        a.movd(ax::r11d, ax::xmm(xi++));
        a.mov(ctx_slot(f, n + i), ax::r11);
      } else {
        a.movq(ctx_slot(f, n + i), ax::xmm(xi++));
      }
    } else {
      const ax::Gp g = gprs[gi++];
      if (sz == 8) a.mov(ctx_slot(f, n + i), g);
      else {
        if (sz == 4) a.mov(ax::r11d, g.r32());
        else if (sz == 2) a.movzx(ax::r11d, g.r16());
        else if (sz == 1) a.movzx(ax::r11d, g.r8());
        else {
          a.mov(ax::r11, g);
          zext_r11_odd(a, sz);
        }
        a.mov(ctx_slot(f, n + i), ax::r11);
      }
    }
  }
  if (!two) a.mov(ctx_slot(f, n + 1), Imm(0));
}

void restore_ret(ax::Assembler& a, const RetType& r, const Frame& f) {
  const int n = f.nslots;
  switch (r.kind) {
    case RetType::Kind::none:
      return;
    case RetType::Kind::memory:
      a.mov(ax::rax, ctx_slot(f, n));
      return;
    case RetType::Kind::x87:
      a.fld(ax::tword_ptr(ax::rbp, f.ctx + 8 * n));
      return;
    case RetType::Kind::reg:
      break;
  }
  int gi = 0, xi = 0;
  const ax::Gp gprs[2] = {ax::rax, ax::rdx};
  const bool two = r.parts[1] != Part::none;
  for (int i = 0; i < (two ? 2 : 1); ++i) {
    if (r.parts[i] == Part::sse) a.movq(ax::xmm(xi++), ctx_slot(f, n + i));
    else a.mov(gprs[gi++], ctx_slot(f, n + i));
  }
}

// ---- keeping every register (ImageSpec::preserve_all, arch/image.hpp) ----------------
//
// The general registers go into the frame with moves. The extended state is kept one of
// two ways, chosen per save by what the caller has in use (XINUSE, XGETBV with ecx = 1):
//
// Moves (the common case). When no component but x87, SSE, the AVX-512 opmask and
// Hi16_ZMM (zmm16-31) is in use, the state a caller can hold a value in is: xmm0-15,
// zmm16-31, k0-7, MXCSR, and the x87 control and status words. They are saved with
// moves (save_moved), and put back (restore_moved) with, before the xmm loads, a
// `vzeroupper`: the upper halves of ymm0-15 and zmm0-15 (components AVX and ZMM_Hi256)
// were in their initial state, zero (SDM vol. 1, 13.6: a component not in use is in its
// initial configuration), so zero is exactly what they held, whatever the programs
// left there; legacy SSE loads leave them zero. That `vzeroupper` also keeps a program
// that dirties them (compiled C calling AVX code) from handing the traced program
// dirty upper state, which would slow its SSE code on Intel CPUs. zmm16-31 and k0-7 are
// saved whole, in use or not: glibc's EVEX string functions leave them in use in nearly
// every process, and moving zeros back is as exact as anything. Not kept: the x87 data
// registers and tags (st0-7, mm0-7) and its last-instruction pointers. The ABI has the
// x87 stack empty at every call and return and gcc counts the x87 registers clobbered
// by every call (final.cc: collect_fn_hard_reg_usage), so no caller holds a value
// there; the control word is kept (fldcw) and so is the status word, whose exception
// flags a program reads with fetestexcept: only when it changed (a program ran x87
// code), the environment is stored, its status word replaced and loaded back.
//
// XSAVEC, XSAVE or FXSAVE (XStateSave) otherwise: the caller has upper halves of
// ymm/zmm0-15 in use (AVX code that did not vzeroupper before the call) or a component
// these moves do not know, or the CPU cannot say (no XINUSE). The area is 64-byte
// aligned; XSAVE and XRSTOR take the components in edx:eax, so rax and rdx (and rcx, for
// XGETBV) are saved before and reloaded after. XRSTOR faults on a header (bytes
// 512..575) whose reserved bytes are not zero, and neither XSAVE (writes bytes 0..7) nor
// XSAVEC (0..15) writes them: they are zeroed first, the area being fresh stack.
//
// XGETBV and the moves cost a fraction of an XSAVEC/XRSTOR pair (docs/benchmarks.md,
// "Functions without a compiler site": 15 ns and about 25 ns against 270-420 ns there).

// The moved state's layout in the save area, from its (64-aligned) start:
//
//   0       xmm0-15, 16 bytes each
//   256     zmm16-31, 64 bytes each      (XStateSave::avx512 only)
//   1280    k0-7, 8 bytes each           (XStateSave::avx512 only)
//   M       MXCSR (4 bytes), x87 control word (2), x87 status word (2);  M = 1344 or 256
//   M+8     the x87 environment (28 bytes), written only to put the status word back
struct MovedState {
  int32_t zmm = 0, k = 0, mxcsr = 0, fcw = 0, fsw = 0, env = 0, end = 0;
};
constexpr int32_t kX87EnvStatus = 4;  // the status word's offset in an x87 environment

MovedState moved_layout(const XStateSave& x) {
  MovedState m;
  int32_t at = 16 * 16;
  if (x.avx512) {
    m.zmm = at;
    at += 64 * 16;
    m.k = at;
    at += 8 * 8;
  }
  m.mxcsr = at;
  m.fcw = at + 4;
  m.fsw = at + 6;
  m.env = at + 8;
  m.end = m.env + 28;
  return m;
}

// Components whose being in use sends a save to XSAVE: everything the moves do not keep.
uint64_t xsave_components(const XStateSave& x) {
  return x.mask & ~(kXcompX87 | kXcompSse | kXcompOpmask | kXcompHi16Zmm);
}
// Whether saves may use moves, and whether they must decide at run time (XGETBV).
bool moves_possible(const XStateSave& x) {
  return x.mode == XStateSave::Mode::fxsave || xsave_components(x) == 0 || x.xinuse;
}
bool decides(const XStateSave& x) { return moves_possible(x) && xsave_components(x) != 0; }

// Bytes of the save area: the XSAVE area or the moved state, whichever is larger.
uint32_t kept_area_bytes(const XStateSave& x) {
  const uint32_t moved = static_cast<uint32_t>(moved_layout(x).end);
  return (std::max(x.size, moved) + 63) / 64 * 64;
}

// rsp lowered by `bytes`, then aligned down to `align`. The first write below the old
// rsp may be at the new one (the save area is written from its bottom), and a thread's
// stack has a guard page of one page below it: a drop that may reach a page or more
// touches every page on the way down first, so that it faults on the guard page
// instead of stepping over it into whatever is mapped below. Decided here, at build
// time: the usual area (2.5 KiB with AVX-512) needs no probe.
//
//   sub rsp, 4096 ; or qword [rsp], 0       (while bytes + align - 1 >= 4096)
//   sub rsp, rest ; and rsp, -align
constexpr int32_t kStackPage = 4096;

void lower_rsp(ax::Assembler& a, int32_t bytes, int32_t align) {
  for (; bytes + align - 1 >= kStackPage; bytes -= kStackPage) {
    a.sub(ax::rsp, Imm(kStackPage));
    a.or_(ax::qword_ptr(ax::rsp), Imm(0));
  }
  if (bytes > 0) a.sub(ax::rsp, Imm(bytes));
  else if (bytes < 0) a.add(ax::rsp, Imm(-bytes));  // the last probe went past: aligned below
  a.and_(ax::rsp, Imm(-align));
}

// Bytes of lower_rsp's probes for a save area (one lower_rsp) at most: 12 a page.
size_t probe_bytes_bound(const XStateSave& x) { return (kept_area_bytes(x) / kStackPage + 1) * 16; }

// Bytes of one save_state or restore_state at most (both ways and the choice: about
// 480 with AVX-512). An image emits four at most: around the programs and around the
// body, or two call_keeping_all.
constexpr size_t kKeptStateBound = 640;

void xsave_to(ax::Assembler& a, const XStateSave& x, const ax::Gp& base) {
  if (x.mode == XStateSave::Mode::fxsave) {
    a.fxsave64(ax::ptr(base));
    return;
  }
  for (int32_t off = 512 + 8; off < 512 + 64; off += 8) a.mov(ax::qword_ptr(base, off), Imm(0));
  a.mov(ax::eax, Imm(static_cast<uint32_t>(x.mask)));
  a.mov(ax::edx, Imm(static_cast<uint32_t>(x.mask >> 32)));
  if (x.mode == XStateSave::Mode::xsavec) a.xsavec64(ax::ptr(base));
  else a.xsave64(ax::ptr(base));
}

void xrstor_from(ax::Assembler& a, const XStateSave& x, const ax::Gp& base) {
  if (x.mode == XStateSave::Mode::fxsave) {
    a.fxrstor64(ax::ptr(base));
    return;
  }
  a.mov(ax::eax, Imm(static_cast<uint32_t>(x.mask)));
  a.mov(ax::edx, Imm(static_cast<uint32_t>(x.mask >> 32)));
  a.xrstor64(ax::ptr(base));
}

//   movaps [base], xmm0 ; ... ; movaps [base+240], xmm15
//   vmovdqa64 [base+256], zmm16 ; ... ; kmovq [base+1280], k0 ; ...   (AVX-512)
//   stmxcsr [base+M] ; fnstcw [base+M+4] ; fnstsw [base+M+6]
void save_moved(ax::Assembler& a, const XStateSave& x, const ax::Gp& base) {
  const MovedState m = moved_layout(x);
  for (uint32_t i = 0; i < 16; ++i) a.movaps(ax::xmmword_ptr(base, int32_t(16 * i)), ax::xmm(i));
  if (x.avx512) {
    for (uint32_t i = 0; i < 16; ++i)
      a.vmovdqa64(ax::zmmword_ptr(base, m.zmm + int32_t(64 * i)), ax::zmm(16 + i));
    for (uint32_t i = 0; i < 8; ++i) {
      if (x.kreg64) a.kmovq(ax::qword_ptr(base, m.k + int32_t(8 * i)), ax::k(i));
      else a.kmovw(ax::word_ptr(base, m.k + int32_t(8 * i)), ax::k(i));
    }
  }
  a.stmxcsr(ax::dword_ptr(base, m.mxcsr));
  a.fnstcw(ax::word_ptr(base, m.fcw));
  a.fnstsw(ax::word_ptr(base, m.fsw));
}

//   vzeroupper                                                        (AVX)
//   movaps xmm0, [base] ; ... ; vmovdqa64 zmm16, [base+256] ; ... ; kmovq k0, [base+1280] ; ...
//   ldmxcsr [base+M] ; fldcw [base+M+4]
//   fnstsw ax ; cmp ax, [base+M+6] ; je kept
//   fnstenv [base+M+8] ; mov ax, [base+M+6] ; mov [base+M+8+4], ax ; fldenv [base+M+8]
//   kept:
void restore_moved(ax::Assembler& a, const XStateSave& x, const ax::Gp& base) {
  const MovedState m = moved_layout(x);
  if (x.avx) a.vzeroupper();
  for (uint32_t i = 0; i < 16; ++i) a.movaps(ax::xmm(i), ax::xmmword_ptr(base, int32_t(16 * i)));
  if (x.avx512) {
    for (uint32_t i = 0; i < 16; ++i)
      a.vmovdqa64(ax::zmm(16 + i), ax::zmmword_ptr(base, m.zmm + int32_t(64 * i)));
    for (uint32_t i = 0; i < 8; ++i) {
      if (x.kreg64) a.kmovq(ax::k(i), ax::qword_ptr(base, m.k + int32_t(8 * i)));
      else a.kmovw(ax::k(i), ax::word_ptr(base, m.k + int32_t(8 * i)));
    }
  }
  a.ldmxcsr(ax::dword_ptr(base, m.mxcsr));
  a.fldcw(ax::word_ptr(base, m.fcw));
  Label kept = a.newLabel();
  a.fnstsw(ax::ax);
  a.cmp(ax::ax, ax::word_ptr(base, m.fsw));
  a.je(kept);
  a.fnstenv(ax::ptr(base, m.env));
  a.mov(ax::ax, ax::word_ptr(base, m.fsw));
  a.mov(ax::word_ptr(base, m.env + kX87EnvStatus), ax::ax);
  a.fldenv(ax::ptr(base, m.env));
  a.bind(kept);
}

// The extended state into the area at `base`; `path` (a byte) says which way it went
// for restore_state, when the choice is made at run time. Clobbers rax, rcx, rdx.
//
//   mov ecx, 1 ; xgetbv                     ; edx:eax = the components in use
//   test eax, XSAVE components ; jnz xsave  ; (and edx, when any is above bit 31)
//   mov byte [path], 0
//   <save_moved> ; jmp done
//   xsave: mov byte [path], 1 ; <xsave_to>
//   done:
void save_state(ax::Assembler& a, const XStateSave& x, const ax::Gp& base, const ax::Mem& path) {
  if (!moves_possible(x)) {
    xsave_to(a, x, base);
    return;
  }
  if (!decides(x)) {
    save_moved(a, x, base);
    return;
  }
  Label slow = a.newLabel(), done = a.newLabel();
  const uint64_t xs = xsave_components(x);
  a.mov(ax::ecx, Imm(1));
  a.xgetbv();
  if (static_cast<uint32_t>(xs)) {
    a.test(ax::eax, Imm(static_cast<uint32_t>(xs)));
    a.jnz(slow);
  }
  if (xs >> 32) {
    a.test(ax::edx, Imm(static_cast<uint32_t>(xs >> 32)));
    a.jnz(slow);
  }
  a.mov(path, Imm(0));
  save_moved(a, x, base);
  a.jmp(done);
  a.bind(slow);
  a.mov(path, Imm(1));
  xsave_to(a, x, base);
  a.bind(done);
}

// What save_state saved, back. Clobbers rax, rdx.
//
//   cmp byte [path], 0 ; jne xrstor
//   <restore_moved> ; jmp done
//   xrstor: <xrstor_from>
//   done:
void restore_state(ax::Assembler& a, const XStateSave& x, const ax::Gp& base, const ax::Mem& path) {
  if (!moves_possible(x)) {
    xrstor_from(a, x, base);
    return;
  }
  if (!decides(x)) {
    restore_moved(a, x, base);
    return;
  }
  Label slow = a.newLabel(), done = a.newLabel();
  a.cmp(path, Imm(0));
  a.jne(slow);
  restore_moved(a, x, base);
  a.jmp(done);
  a.bind(slow);
  xrstor_from(a, x, base);
  a.bind(done);
}

// Whether save_state may change rax, rcx and rdx (XGETBV, XSAVE's component mask);
// saving with moves only changes none.
bool save_state_clobbers(const XStateSave& x) { return !moves_possible(x) || decides(x); }

// Everything into the image's frame (general registers into Frame::gpr, the extended
// state at rsp, 64-aligned, the way it went into Frame::path); every register holds
// what it held before when it ends (the reloads only when save_state may change them):
//
//   mov [gpr+0], rdi ; mov [gpr+8], rsi ; ... ; mov [gpr+64], r11
//   <save_state [rsp], byte [path]>
//   mov rax, [gpr+48] ; mov rdx, [gpr+16] ; mov rcx, [gpr+24]
void save_gprs(ax::Assembler& a, const Frame& f) {
  for (size_t i = 0; i < std::size(kKeptGprs); ++i) a.mov(rbp_q(f.gpr + 8 * int32_t(i)), kKeptGprs[i]);
}

void save_all(ax::Assembler& a, const ImageSpec& sp, const Frame& f) {
  save_gprs(a, f);
  save_state(a, sp.xstate, ax::rsp, ax::byte_ptr(ax::rbp, f.path));
  if (!save_state_clobbers(sp.xstate)) return;
  a.mov(ax::rax, rbp_q(f.gpr + 8 * kKeptRax));
  a.mov(ax::rdx, rbp_q(f.gpr + 8 * kKeptRdx));
  a.mov(ax::rcx, rbp_q(f.gpr + 8 * kKeptRcx));
}

//   <restore_state [rsp], byte [path]>
//   mov rdi, [gpr+0] ; ... ; mov r11, [gpr+64]
void restore_all(ax::Assembler& a, const ImageSpec& sp, const Frame& f) {
  restore_state(a, sp.xstate, ax::rsp, ax::byte_ptr(ax::rbp, f.path));
  for (size_t i = 0; i < std::size(kKeptGprs); ++i) a.mov(kKeptGprs[i], rbp_q(f.gpr + 8 * int32_t(i)));
}

// A call of C code (rdi and rsi its arguments) that changes no register, emitted where
// rsp is 16-aligned and nothing else is saved: the thread's first entry in a stub, a
// tracer hook's general code. rbx (kept by the callee) holds the stack pointer across,
// and [rbx+80] the way the extended state went:
//
//   lea  rsp, [rsp-96]
//   mov  [rsp], rax ; ... ; mov [rsp+64], r11 ; mov [rsp+72], rbx
//   mov  rbx, rsp ; sub rsp, size ; and rsp, -64
//   <save_state [rsp], byte [rbx+80]>
//   call fn
//   <restore_state [rsp], byte [rbx+80]>
//   mov  rsp, rbx
//   mov  rax, [rsp] ; ... ; mov rbx, [rsp+72]
//   lea  rsp, [rsp+96]
void call_keeping_all(ax::Assembler& a, const XStateSave& x, uint64_t fn, uint64_t base) {
  static const ax::Gp kSaved[] = {ax::rax, ax::rcx, ax::rdx, ax::rsi, ax::rdi,
                                  ax::r8,  ax::r9,  ax::r10, ax::r11, ax::rbx};
  const int32_t path = 8 * static_cast<int32_t>(std::size(kSaved));
  const int32_t bytes = (path + 8 + 15) / 16 * 16;  // rsp stays 16-aligned
  a.lea(ax::rsp, ax::ptr(ax::rsp, -bytes));
  for (size_t i = 0; i < std::size(kSaved); ++i) a.mov(ax::qword_ptr(ax::rsp, 8 * int32_t(i)), kSaved[i]);
  a.mov(ax::rbx, ax::rsp);
  lower_rsp(a, static_cast<int32_t>(kept_area_bytes(x)), 64);
  save_state(a, x, ax::rsp, ax::byte_ptr(ax::rbx, path));
  call_abs(a, fn, base);
  restore_state(a, x, ax::rsp, ax::byte_ptr(ax::rbx, path));
  a.mov(ax::rsp, ax::rbx);
  for (size_t i = 0; i < std::size(kSaved); ++i) a.mov(kSaved[i], ax::qword_ptr(ax::rsp, 8 * int32_t(i)));
  a.lea(ax::rsp, ax::ptr(ax::rsp, bytes));
}

struct ProgMiss {
  Label held, after, take;
  const ImageProg* prog;
  Label call;  // the program's call (its first instruction: ImageCode::prog_calls)
};

// One program run, guarded against re-entry on this thread:
//
//   mov  r11, fs:[block]                ; this thread's block (r11 is free here)
//   cmp  qword [r11 + active + 8*guard], 0 ; jne held
//   take: mov qword [r11 + active + 8*guard], rsp
//   mov  qword [ctx-24], cookie
//   lea  rdi, [ctx] ; call prog
//   mov  r11, fs:[block]
//   mov  qword [r11 + active + 8*guard], 0
//
// `after` is where execution continues; for fmod_ret the caller tests rax there (a
// missed program counts as returning 0). Out of line, `held` asks guard_left whether
// the run holding the guard was left by a signal handler's longjmp (then `take`), else
// the program misses.
void run_prog(ax::Assembler& a, const ImageSpec& sp, const Frame& f, const ImageProg& p,
              uint64_t base, std::vector<ProgMiss>& misses) {
  Label miss = a.newLabel(), after = a.newLabel(), take = a.newLabel();
  const ax::Mem guard = block_mem(sp.tls.active + 8 * int64_t(p.guard), 8);
  load_block(a, sp.tls);
  a.cmp(guard, Imm(0));
  a.jne(miss);
  a.bind(take);
  a.mov(guard, ax::rsp);
  if (static_cast<int64_t>(p.cookie) == static_cast<int32_t>(p.cookie)) {
    a.mov(ctx_slot(f, abi::kCtxCookie), Imm(static_cast<int32_t>(p.cookie)));
  } else {
    a.mov(ax::r11, Imm(p.cookie));
    a.mov(ctx_slot(f, abi::kCtxCookie), ax::r11);
  }
  if (p.stats) {
    call_abs(a, sp.stats_begin, base);
    a.mov(rbp_q(f.t0), ax::rax);
  }
  a.lea(ax::rdi, ax::ptr(ax::rbp, f.ctx));
  Label call = a.newLabel();
  a.bind(call);
  call_abs(a, p.fn, base);
  if (p.stats) {
    a.mov(rbp_q(f.scratch), ax::rax);
    a.mov(ax::rdi, Imm(p.stats));
    a.mov(ax::rsi, rbp_q(f.t0));
    call_abs(a, sp.stats_end, base);
    a.mov(ax::rax, rbp_q(f.scratch));
  }
  load_block(a, sp.tls);
  a.mov(guard, Imm(0));
  a.bind(after);
  misses.push_back({miss, after, take, &p, call});
}

// A tracer's hooks (TracerHooks) around the call. They keep every register but rax,
// and are entered with rdi = function, rsi = the image's frame (rbp); a non-zero return
// sends the event to the general code, out of line, through a thunk that keeps every
// register. rsp is 16-aligned where these are emitted, and stays so at the calls.
struct HookSlow {
  Label slow, back;
  uint64_t fn;
};

// r = the traced function's address.
void mov_func(ax::Assembler& a, const ax::Gp& r, const ImageSpec& sp) {
  if (sp.func <= UINT32_MAX) {
    a.mov(r.r32(), Imm(sp.func));
    note(a, Field::Form::imm32, Param::func);
  } else {
    a.mov(r, Imm(sp.func));
    note(a, Field::Form::imm64, Param::func);
  }
}

// A hook's call, its general code out of line (hook_slow_paths):
//
//   mov  edi, func ; mov rsi, rbp
//   call hook                 ; entry or exit: keeps every register but rax
//   test eax, eax ; jnz slow
//   back: ...
//   slow: call general ; jmp back      ; general: the thunk that keeps them all
void hook_call(ax::Assembler& a, const ImageSpec& sp, uint64_t base, uint64_t fn,
               uint64_t general, std::vector<HookSlow>& slow) {
  mov_func(a, ax::rdi, sp);
  a.mov(ax::rsi, ax::rbp);
  call_abs(a, fn, base);
  HookSlow h{a.newLabel(), a.newLabel(), general};
  a.test(ax::eax, ax::eax);
  a.jnz(h.slow);
  a.bind(h.back);
  slow.push_back(h);
}

// A hook's call keeping rax, rdi and rsi: on entry they carry the call (al: vector
// registers of a variadic call); after it, an image that keeps every register keeps them,
// and r11 too (the call goes through it when the hook is out of rel32 reach).
void hook_keeping_three(ax::Assembler& a, const ImageSpec& sp, uint64_t base, uint64_t fn,
                        uint64_t general, std::vector<HookSlow>& slow) {
  const ax::Gp fourth = sp.preserve_all ? ax::r11 : ax::rsi;  // an even count: rsp aligned
  a.push(ax::rax);
  a.push(ax::rdi);
  a.push(ax::rsi);
  a.push(fourth);
  hook_call(a, sp, base, fn, general, slow);
  a.pop(fourth);
  a.pop(ax::rsi);
  a.pop(ax::rdi);
  a.pop(ax::rax);
}

void hook_entry(ax::Assembler& a, const ImageSpec& sp, uint64_t base, std::vector<HookSlow>& slow) {
  hook_keeping_three(a, sp, base, sp.tracer.entry, sp.tracer.entry_general, slow);
}

// After the call only rax of the three is live (rdi and rsi are not return registers),
// unless the image keeps every register.
void hook_exit(ax::Assembler& a, const ImageSpec& sp, uint64_t base, std::vector<HookSlow>& slow) {
  if (sp.preserve_all) {
    hook_keeping_three(a, sp, base, sp.tracer.exit, sp.tracer.exit_general, slow);
    return;
  }
  a.push(ax::rax);
  a.push(ax::rax);
  hook_call(a, sp, base, sp.tracer.exit, sp.tracer.exit_general, slow);
  a.pop(ax::rax);
  a.pop(ax::rax);
}

// rax = the time stamp counter, as arch::cycles() reads it (rdx is clobbered).
void read_tsc(ax::Assembler& a) {
  a.rdtsc();
  a.shl(ax::rdx, Imm(32));
  a.or_(ax::rax, ax::rdx);
}

// The hooks' common case, inline (TracerInline; the reference is ftrace/graph_fast.cpp
// and trace::Producer::put_fast/complete_leaf): any check that fails jumps to `bail`,
// always before the first store, and the hooks then do the work. Registers: rax, rcx,
// rdx, rdi, rsi, r11 (the caller saves what is live). Store order matters to a signal
// handler that leaves this code by longjmp: a frame is filled in before the depth
// store pushes it, and popped only after its exit is published, so that the general
// code can repair what was left half done (ftrace/graph.cpp: repair_abandoned).
//
// The entry (rsi: the state, r11: its control page; fields as named in TracerInline):
//
//   mov  rsi, fs:[tls_state] ; test rsi, rsi ; jz bail
//   cmp  byte [rsi+path], path_fast ; jne bail
//   cmp  qword fs:[tls_in_tracer], 0 ; jne bail
//   mov  fs:[tls_in_tracer], rsp                  ; held from here: failures go to `out`
//   mov  edi, [rsi+depth] ; cmp edi, depth_limit ; jae out
//   test edi, edi ; jz no_stale
//   imul r11d, edi, frame_size
//   cmp  [rsi+r11+stack-frame_size+f_sp], rbp ; jbe out    ; a frame left by longjmp
//   no_stale: mov r11, [rsi+producer+p_ctl]
//   cmp  dword [r11+c_busy], 0 ; jne out ; mov dword [r11+c_busy], 1
//   cmp  qword [r11+c_pending], 0 ; jne release
//   mov  rcx, [r11+c_head] ; mov edx, [r11+c_staged] ; add rcx, rdx
//   mov  rdx, rcx ; sub rdx, [rsi+..p_tail_seen] ; cmp rdx, [rsi+..p_mask] ; jbe go
//   release: mov dword [r11+c_busy], 0 ; jmp out
//   go:  mov [r11+c_head], rcx                    ; publishes a staged entry
//   rdtsc ; shl rdx, 32 ; or rax, rdx
//   and  rcx, [rsi+..p_mask] ; shl rcx, event_shift ; add rcx, [rsi+..p_ring]
//   mov  [rcx+e_time], rax ; mov [rcx+e_addr], func ; mov qword [rcx+e_data], 0
//   mov  [rcx+e_word3], depth | type_entry << type_shift
//   mov  dword [r11+c_staged], 1 ; mov dword [r11+c_busy], 0
//   imul edx, edi, frame_size ; add rdx, rsi      ; the frame: sp, func, time, flags
//   mov  [rdx+stack+f_sp], rbp ; ... ; mov byte [rdx+stack+f_flags], written
//   inc  edi ; mov [rsi+depth], edi               ; pushed once filled in
//   mov  qword fs:[tls_in_tracer], 0 ; jmp done
void inline_entry(ax::Assembler& a, const ImageSpec& sp, Label bail, Label out, Label done) {
  const TracerInline& L = sp.tracer.fast;
  const int32_t P = L.producer;
  Label no_stale = a.newLabel();
  a.mov(ax::rsi, fs_mem(L.tls_state, 8));  // the thread's state
  a.test(ax::rsi, ax::rsi);
  a.jz(bail);
  a.cmp(ax::byte_ptr(ax::rsi, L.path), Imm(L.path_fast));
  a.jne(bail);
  // Inside the tracer (a signal handler's call interrupting it, or tracer code a
  // handler left by longjmp): the hooks decide. Else held until the state is updated,
  // with the stack pointer as the holder's mark (graph_state.hpp); every later failure
  // leaves by `out`, which releases it.
  a.cmp(fs_mem(L.tls_in_tracer, 8), Imm(0));
  a.jne(bail);
  a.mov(fs_mem(L.tls_in_tracer, 8), ax::rsp);
  a.mov(ax::edi, ax::dword_ptr(ax::rsi, L.depth));  // d
  a.cmp(ax::edi, Imm(L.depth_limit));  // (calls over the stack's size only when it is full)
  a.jae(out);
  // A frame above on the shadow stack but deeper on the machine stack: a longjmp.
  a.test(ax::edi, ax::edi);
  a.jz(no_stale);
  // A call's frame is strictly below its caller's: one at this address or deeper on
  // the machine stack was left by a longjmp.
  a.imul(ax::r11d, ax::edi, Imm(L.frame_size));
  a.cmp(ax::qword_ptr(ax::rsi, ax::r11, 0, L.stack - L.frame_size + L.f_sp), ax::rbp);
  a.jbe(out);
  a.bind(no_stale);
  a.mov(ax::r11, ax::qword_ptr(ax::rsi, P + L.p_ctl));  // the control page (path fast: set)
  // busy is taken before the ring's state is read: a signal handler running between the
  // check and the store writes its events first, and its head is the one read below.
  Label release = a.newLabel(), go = a.newLabel();
  a.cmp(ax::dword_ptr(ax::r11, L.c_busy), Imm(0));
  a.jne(out);
  a.mov(ax::dword_ptr(ax::r11, L.c_busy), Imm(1));
  a.cmp(ax::qword_ptr(ax::r11, L.c_pending), Imm(0));
  a.jne(release);
  a.mov(ax::rcx, ax::qword_ptr(ax::r11, L.c_head));
  a.mov(ax::edx, ax::dword_ptr(ax::r11, L.c_staged));
  a.add(ax::rcx, ax::rdx);  // h: the slot after a staged entry
  a.mov(ax::rdx, ax::rcx);
  a.sub(ax::rdx, ax::qword_ptr(ax::rsi, P + L.p_tail_seen));
  a.cmp(ax::rdx, ax::qword_ptr(ax::rsi, P + L.p_mask));
  a.jbe(go);  // else it may be full: the hook re-reads the tail
  a.bind(release);
  a.mov(ax::dword_ptr(ax::r11, L.c_busy), Imm(0));
  a.jmp(out);
  // Committed from here on.
  a.bind(go);
  a.mov(ax::qword_ptr(ax::r11, L.c_head), ax::rcx);  // publishes a staged entry
  read_tsc(a);  // the time
  a.and_(ax::rcx, ax::qword_ptr(ax::rsi, P + L.p_mask));
  a.shl(ax::rcx, Imm(L.event_shift));
  a.add(ax::rcx, ax::qword_ptr(ax::rsi, P + L.p_ring));
  a.mov(ax::qword_ptr(ax::rcx, L.e_time), ax::rax);
  mov_func(a, ax::rdx, sp);
  a.mov(ax::qword_ptr(ax::rcx, L.e_addr), ax::rdx);
  a.mov(ax::qword_ptr(ax::rcx, L.e_data), Imm(0));
  a.mov(ax::edx, ax::edi);
  a.or_(ax::edx, Imm(uint32_t{L.type_entry} << L.type_shift));
  a.mov(ax::qword_ptr(ax::rcx, L.e_word3), ax::rdx);  // depth, type
  a.mov(ax::dword_ptr(ax::r11, L.c_staged), Imm(1));
  a.mov(ax::dword_ptr(ax::r11, L.c_busy), Imm(0));
  // The shadow-stack frame.
  a.imul(ax::edx, ax::edi, Imm(L.frame_size));
  a.add(ax::rdx, ax::rsi);
  a.mov(ax::qword_ptr(ax::rdx, L.stack + L.f_sp), ax::rbp);
  mov_func(a, ax::rcx, sp);
  a.mov(ax::qword_ptr(ax::rdx, L.stack + L.f_func), ax::rcx);
  a.mov(ax::qword_ptr(ax::rdx, L.stack + L.f_time), ax::rax);
  a.mov(ax::byte_ptr(ax::rdx, L.stack + L.f_flags), Imm(L.written));
  a.inc(ax::edi);
  a.mov(ax::dword_ptr(ax::rsi, L.depth), ax::edi);
  a.mov(fs_mem(L.tls_in_tracer, 8), Imm(0));
  a.jmp(done);
}

// After the call: rcx, rdi, rsi, r8 and r11 are dead (not return registers); rax and
// rdx are saved by the caller. The exit, after the same checks as the entry's (and
// overflow == 0, depth != 0, the top frame is this call's and written), with busy held:
//
//   cmp  dword [r11+c_staged], 0 ; je plain
//   mov  rdx, [r11+c_head] ; and rdx, [..p_mask] ; shl rdx, event_shift ; add rdx, [..p_ring]
//   cmp  [rdx+e_time], frame.time ; jne plain ; cmp [rdx+e_addr], frame.func ; jne plain
//   rdtsc ...
//   mov  [rdx+e_data], rax ; mov byte [rdx+e_type], type_leaf   ; the entry becomes a leaf
//   inc  qword [r11+c_head] ; mov dword [r11+c_staged], 0 ; mov dword [r11+c_busy], 0
//   dec  edi ; mov [rsi+depth], edi ; mov qword fs:[tls_in_tracer], 0 ; jmp done
//   plain: an exit event at head + staged (the staged entry published first), written as
//   the entry's is, with depth d-1 and type_exit; head moves past it.
void inline_exit(ax::Assembler& a, const ImageSpec& sp, Label bail, Label out, Label done) {
  const TracerInline& L = sp.tracer.fast;
  const int32_t P = L.producer;
  const int32_t F = L.stack - L.frame_size;  // frame d-1 from rcx = state + d * size
  Label plain = a.newLabel();
  a.mov(ax::rsi, fs_mem(L.tls_state, 8));
  a.test(ax::rsi, ax::rsi);
  a.jz(bail);
  a.cmp(ax::byte_ptr(ax::rsi, L.path), Imm(L.path_fast));
  a.jne(bail);
  a.cmp(fs_mem(L.tls_in_tracer, 8), Imm(0));  // as in inline_entry
  a.jne(bail);
  a.mov(fs_mem(L.tls_in_tracer, 8), ax::rsp);
  a.cmp(ax::qword_ptr(ax::rsi, L.overflow), Imm(0));
  a.jne(out);
  a.mov(ax::edi, ax::dword_ptr(ax::rsi, L.depth));
  a.test(ax::edi, ax::edi);
  a.jz(out);
  a.imul(ax::ecx, ax::edi, Imm(L.frame_size));
  a.add(ax::rcx, ax::rsi);
  a.cmp(ax::qword_ptr(ax::rcx, F + L.f_sp), ax::rbp);
  a.jne(out);
  a.cmp(ax::byte_ptr(ax::rcx, F + L.f_flags), Imm(L.written));
  a.jne(out);
  a.mov(ax::r11, ax::qword_ptr(ax::rsi, P + L.p_ctl));
  // busy first, then the ring's state (see inline_entry).
  Label release = a.newLabel();
  a.cmp(ax::dword_ptr(ax::r11, L.c_busy), Imm(0));
  a.jne(out);
  a.mov(ax::dword_ptr(ax::r11, L.c_busy), Imm(1));
  a.cmp(ax::qword_ptr(ax::r11, L.c_pending), Imm(0));
  a.jne(release);
  a.cmp(ax::dword_ptr(ax::r11, L.c_staged), Imm(0));
  a.je(plain);
  // This call's entry staged in slot `head`: it becomes a leaf.
  a.mov(ax::rdx, ax::qword_ptr(ax::r11, L.c_head));
  a.and_(ax::rdx, ax::qword_ptr(ax::rsi, P + L.p_mask));
  a.shl(ax::rdx, Imm(L.event_shift));
  a.add(ax::rdx, ax::qword_ptr(ax::rsi, P + L.p_ring));
  a.mov(ax::rax, ax::qword_ptr(ax::rcx, F + L.f_time));
  a.cmp(ax::qword_ptr(ax::rdx, L.e_time), ax::rax);
  a.jne(plain);
  a.mov(ax::rax, ax::qword_ptr(ax::rcx, F + L.f_func));
  a.cmp(ax::qword_ptr(ax::rdx, L.e_addr), ax::rax);
  a.jne(plain);
  a.mov(ax::r8, ax::rdx);
  read_tsc(a);
  a.mov(ax::qword_ptr(ax::r8, L.e_data), ax::rax);  // data: the exit's time
  a.mov(ax::byte_ptr(ax::r8, L.e_type), Imm(L.type_leaf));
  a.mov(ax::rax, ax::qword_ptr(ax::r11, L.c_head));
  a.inc(ax::rax);
  a.mov(ax::qword_ptr(ax::r11, L.c_head), ax::rax);
  a.mov(ax::dword_ptr(ax::r11, L.c_staged), Imm(0));
  a.mov(ax::dword_ptr(ax::r11, L.c_busy), Imm(0));
  // The frame is popped only once its exit is published (see the note above inline_entry).
  a.dec(ax::edi);
  a.mov(ax::dword_ptr(ax::rsi, L.depth), ax::edi);
  a.mov(fs_mem(L.tls_in_tracer, 8), Imm(0));
  a.jmp(done);
  // An exit event of its own (publishing a staged entry of another call first).
  a.bind(plain);
  a.mov(ax::r8, ax::qword_ptr(ax::r11, L.c_head));
  a.mov(ax::edx, ax::dword_ptr(ax::r11, L.c_staged));
  a.add(ax::r8, ax::rdx);
  a.mov(ax::rdx, ax::r8);
  a.sub(ax::rdx, ax::qword_ptr(ax::rsi, P + L.p_tail_seen));
  a.cmp(ax::rdx, ax::qword_ptr(ax::rsi, P + L.p_mask));
  a.ja(release);
  a.mov(ax::qword_ptr(ax::r11, L.c_head), ax::r8);
  read_tsc(a);
  a.mov(ax::rdx, ax::r8);
  a.and_(ax::rdx, ax::qword_ptr(ax::rsi, P + L.p_mask));
  a.shl(ax::rdx, Imm(L.event_shift));
  a.add(ax::rdx, ax::qword_ptr(ax::rsi, P + L.p_ring));
  a.mov(ax::qword_ptr(ax::rdx, L.e_time), ax::rax);
  a.mov(ax::rax, ax::qword_ptr(ax::rcx, F + L.f_func));
  a.mov(ax::qword_ptr(ax::rdx, L.e_addr), ax::rax);
  a.mov(ax::qword_ptr(ax::rdx, L.e_data), Imm(0));
  a.lea(ax::eax, ax::ptr(ax::rdi, -1));  // the exit's depth: d - 1
  a.or_(ax::eax, Imm(uint32_t{L.type_exit} << L.type_shift));
  a.mov(ax::qword_ptr(ax::rdx, L.e_word3), ax::rax);
  a.mov(ax::dword_ptr(ax::r11, L.c_staged), Imm(0));
  a.inc(ax::r8);
  a.mov(ax::qword_ptr(ax::r11, L.c_head), ax::r8);
  a.mov(ax::dword_ptr(ax::r11, L.c_busy), Imm(0));
  a.dec(ax::edi);
  a.mov(ax::dword_ptr(ax::rsi, L.depth), ax::edi);
  a.mov(fs_mem(L.tls_in_tracer, 8), Imm(0));
  a.jmp(done);
  a.bind(release);
  a.mov(ax::dword_ptr(ax::r11, L.c_busy), Imm(0));
  a.jmp(out);
}

// The inline common case around a hook call: registers the inline code uses are saved
// (an even count keeps rsp 16-aligned), and it leaves by `done` (recorded), `out` (a
// check failed while it held t_in_tracer, released here) or `bail` (the hook decides).
// An image that keeps every register saves all the inline code and the hook call use.
void hook_inline(ax::Assembler& a, const ImageSpec& sp, uint64_t base,
                 std::vector<HookSlow>& slow, bool entry) {
  static const ax::Gp kEntrySaved[] = {ax::rax, ax::rdi, ax::rsi, ax::rdx, ax::rcx, ax::rcx};
  static const ax::Gp kExitSaved[] = {ax::rax, ax::rdx};  // only return registers are live
  static const ax::Gp kEntryKept[] = {ax::rax, ax::rdi, ax::rsi, ax::rdx, ax::rcx, ax::r11};
  static const ax::Gp kExitKept[] = {ax::rax, ax::rdx, ax::rcx, ax::rdi,
                                     ax::rsi, ax::r8,  ax::r11, ax::r11};
  std::span<const ax::Gp> saved = entry ? std::span<const ax::Gp>(kEntrySaved)
                                        : std::span<const ax::Gp>(kExitSaved);
  if (sp.preserve_all)
    saved = entry ? std::span<const ax::Gp>(kEntryKept) : std::span<const ax::Gp>(kExitKept);
  Label bail = a.newLabel(), out = a.newLabel(), done = a.newLabel();
  for (const ax::Gp& r : saved) a.push(r);
  if (entry) inline_entry(a, sp, bail, out, done);
  else inline_exit(a, sp, bail, out, done);
  a.bind(out);
  a.mov(fs_mem(sp.tracer.fast.tls_in_tracer, 8), Imm(0));
  a.bind(bail);
  if (entry) hook_call(a, sp, base, sp.tracer.entry, sp.tracer.entry_general, slow);
  else hook_call(a, sp, base, sp.tracer.exit, sp.tracer.exit_general, slow);
  a.bind(done);
  for (size_t i = saved.size(); i-- > 0;) a.pop(saved[i]);
}

// `keep`: the general code's thunk keeps the registers the ABI uses for arguments and
// results only; an image that keeps every register and has saved nothing else around
// the hooks (the tracer's image) keeps the rest here.
void hook_slow_paths(ax::Assembler& a, uint64_t base, const std::vector<HookSlow>& slow,
                     const XStateSave* keep) {
  for (const HookSlow& h : slow) {
    a.bind(h.slow);
    if (keep) call_keeping_all(a, *keep, h.fn, base);
    else call_abs(a, h.fn, base);
    a.long_().jmp(h.back);
  }
}

// The stack arguments the original is called with (below rsp, which is 16-aligned),
// copied from the caller's (rbp+16 on), 8 bytes at a time through r11:
//
//   sub  rsp, window (rounded up to 16)
//   mov  r11, [rbp+16] ; mov [rsp], r11 ; mov r11, [rbp+24] ; mov [rsp+8], r11 ...
//   call original
//   add  rsp, window
//
// An image that keeps every register has them all as the function must see them here,
// r11 included: it copies with pushes instead (from the last eightbyte down, after a
// pad of 8 when the window holds an odd number), and calls by rel32 (the stub's
// relocated prologue, always in reach):
//
//   lea  rsp, [rsp-8] ; push qword [rbp+16+window-8] ; ... ; push qword [rbp+16]
//   call original
//   lea  rsp, [rsp+window rounded up to 16]
void call_original(ax::Assembler& a, const ImageSpec& sp, const Signature& sig, const Layout& l,
                   uint64_t base) {
  const int32_t window = copy_window(sig, l);
  const int32_t wpad = (window + 15) / 16 * 16;
  if (sp.preserve_all) {
    if (wpad != window) a.lea(ax::rsp, ax::ptr(ax::rsp, window - wpad));
    for (int32_t k = window - 8; k >= 0; k -= 8) a.push(rbp_q(Frame::kStackArgs + k));
    a.call(Imm(sp.original));
    note(a, Field::Form::rel32, Param::original);
    if (wpad) a.lea(ax::rsp, ax::ptr(ax::rsp, wpad));
    return;
  }
  if (wpad) {
    a.sub(ax::rsp, Imm(wpad));
    for (int32_t k = 0; k < window; k += 8) {
      a.mov(ax::r11, rbp_q(Frame::kStackArgs + k));
      a.mov(ax::qword_ptr(ax::rsp, k), ax::r11);
    }
  }
  call_abs(a, sp.original, base, Param::original);
  if (wpad) a.add(ax::rsp, Imm(wpad));
}

// The image's frame and, for images that call the original, its own counter taken
// before the site's is released (the stub's protocol, arch/image.hpp).
// Keeping every register, r11 is kept below the stack pointer meanwhile (as the stub
// does, arch/image.hpp).
void image_enter(ax::Assembler& a, const ImageSpec& sp) {
  a.push(ax::rbp);
  a.mov(ax::rbp, ax::rsp);
  if (sp.calls_original) {
    if (sp.preserve_all) a.mov(ax::qword_ptr(ax::rsp, -8), ax::r11);
    load_block(a, sp.tls);
    a.inc(block_mem(sp.tls.counters + 4 * int64_t(sp.image_slot), 4));
    note(a, Field::Form::disp32, Param::image_slot);
    a.dec(block_mem(sp.tls.counters + 4 * int64_t(sp.site_slot), 4));
    note(a, Field::Form::disp32, Param::site_slot);
    if (sp.preserve_all) a.mov(ax::r11, ax::qword_ptr(ax::rsp, -8));
  }
}

// The image's exit, from `leave` on; where each starts and how long it is goes to the
// unwind information (ImageCode::exits, exit_len):
//
//   leave ; mov r11, fs:[block] ; lea r11, [r11 + counters + 4*I] ; jmp exit
//                                     calls_original: the stub's exit releases counter I
//   leave ; jmp pass                  fentry only: the stub's pass-through runs the body
//   leave ; push r11 ; mov r11, fs:[block] ; lea r11, [...] ; jmp exit
//                                     calls_original, keeping every register: the
//                                     stub's exit pops r11 back before its ret
struct Exits {
  std::vector<Label> leave, end, pushed;
};

void image_leave(ax::Assembler& a, const ImageSpec& sp, Exits& ex) {
  Label lv = a.newLabel(), end = a.newLabel();
  a.bind(lv);
  a.leave();
  if (sp.calls_original) {
    if (sp.preserve_all) {
      Label pushed = a.newLabel();
      a.push(ax::r11);
      a.bind(pushed);
      ex.pushed.push_back(pushed);
    }
    load_block(a, sp.tls);
    a.lea(ax::r11, block_mem(sp.tls.counters + 4 * int64_t(sp.image_slot), 4));
    note(a, Field::Form::disp32, Param::image_slot);
    a.long_().jmp(Imm(sp.exit_fn));
    note(a, Field::Form::rel32, Param::exit_fn);
  } else {
    a.long_().jmp(Imm(sp.pass));  // rel32: images lie within reach of their stub
    note(a, Field::Form::rel32, Param::pass);
  }
  a.bind(end);
  ex.leave.push_back(lv);
  ex.end.push_back(end);
}

void record_exits(const asmjit::CodeHolder& c, const Exits& ex, ImageCode& out) {
  for (size_t i = 0; i < ex.leave.size(); ++i) {
    const auto at = static_cast<uint32_t>(c.labelOffset(ex.leave[i]));
    out.exits.push_back(at);
    out.exit_len = static_cast<uint32_t>(c.labelOffset(ex.end[i])) - at;  // the same for each
    if (i < ex.pushed.size()) out.exit_push = static_cast<uint32_t>(c.labelOffset(ex.pushed[i])) - at;
  }
}


// ---- Templates: code of one shape, copied and its fields written ----------------------
//
// A tracer attaching to every function of a program made a stub and an image per
// function with asmjit, about 10 µs each: most of `record`'s start-up for a program of
// a thousand functions. Functions of one shape get code that differs only in the fields
// noted above, so the first one's code, emitted by asmjit as before, becomes the
// shape's template, and the others' is a copy with their values written in. asmjit
// stays the one definition of the code: a template is used only once the code it made
// for a second function was byte for byte asmjit's for that function (anything an
// emitter writes that no field says would differ there: the shape is then always
// emitted), and a function whose values take another form than the template's (a
// counter slot small enough for a disp8, an address out of a rel32's reach) is emitted.

// The values of the fields for one function.
struct Params {
  uint64_t func = 0, original = 0, pass = 0, exit_fn = 0;
  int64_t site_disp = 0, image_disp = 0;  // counters + 4 * slot
};

uint32_t field_size(Field::Form f) {
  return f == Field::Form::imm64 || f == Field::Form::abs64_chosen ? 8 : 4;
}

uint64_t field_value(const Field& f, const Params& p) {
  switch (f.param) {
    case Param::target: return f.target;
    case Param::func: return p.func;
    case Param::original: return p.original;
    case Param::pass: return p.pass;
    case Param::exit_fn: return p.exit_fn;
    case Param::site_slot: return static_cast<uint64_t>(p.site_disp);
    case Param::image_slot: return static_cast<uint64_t>(p.image_disp);
  }
  return 0;
}

// Writes field F of code at BASE with its value in P at DST (field_size bytes); false
// when asmjit would encode that value in another form than the field's.
bool write_field(const Field& f, const Params& p, uint64_t base, uint8_t* dst) {
  const uint64_t v = field_value(f, p);
  const bool reaches = x86::rel32_reaches_block(base, x86::kBlockReach, v);
  switch (f.form) {
    case Field::Form::rel32_chosen:
      if (!reaches) return false;
      [[fallthrough]];
    case Field::Form::rel32: {
      const auto rel = static_cast<int64_t>(v - (base + f.at + 4));
      if (rel != static_cast<int32_t>(rel)) return false;
      const auto r = static_cast<int32_t>(rel);
      std::memcpy(dst, &r, 4);
      return true;
    }
    case Field::Form::abs64_chosen:
      if (reaches || v <= UINT32_MAX) return false;
      std::memcpy(dst, &v, 8);
      return true;
    case Field::Form::imm32: {
      if (v > UINT32_MAX) return false;
      const auto w = static_cast<uint32_t>(v);
      std::memcpy(dst, &w, 4);
      return true;
    }
    case Field::Form::imm64:
      if (v <= UINT32_MAX || static_cast<int64_t>(v) == static_cast<int32_t>(v)) return false;
      std::memcpy(dst, &v, 8);
      return true;
    case Field::Form::disp32: {
      const auto d = static_cast<int64_t>(v);
      if (d == static_cast<int8_t>(d) || d != static_cast<int32_t>(d)) return false;
      const auto w = static_cast<int32_t>(d);
      std::memcpy(dst, &w, 4);
      return true;
    }
  }
  return false;
}

// CODE with every field written for P at BASE; nothing when a value takes another form.
std::optional<std::vector<uint8_t>> fill(std::vector<uint8_t> code, const std::vector<Field>& fields,
                                         const Params& p, uint64_t base) {
  for (const Field& f : fields)
    if (f.at + field_size(f.form) > code.size() || !write_field(f, p, base, code.data() + f.at))
      return std::nullopt;
  return code;
}

bool same_layout(const StubCode& a, const StubCode& b) {
  return a.hop == b.hop && a.pass == b.pass && a.original == b.original && a.exit == b.exit;
}
bool same_layout(const ImageCode& a, const ImageCode& b) {
  return a.exits == b.exits && a.exit_len == b.exit_len && a.exit_push == b.exit_push &&
         a.prog_calls == b.prog_calls;
}

// Templates of one kind of code (Code: StubCode or ImageCode), by shape. Never freed.
template <class Shape, class Code>
class Templates {
 public:
  // The code of a function of SHAPE with values P at BASE: from the shape's template
  // once it is proven, else emitted by `emit(fields)` (which notes the fields when
  // given a list), from which the template is made or proven.
  template <class Emit>
  Result<Code> make(const Shape& shape, const Params& p, uint64_t base, Emit&& emit) {
    // (The test hook that fails an emitted instruction needs the code emitted.)
    if (x86::testing::t_fail_emit_at != 0 || x86::testing::g_no_templates.load(std::memory_order_relaxed)) return emit(nullptr);
    const std::vector<std::shared_ptr<const Entry>> variants = find(shape);
    for (const auto& e : variants) {
      if (e->refused) return emit(nullptr);
      if (!e->proven) continue;
      Code out = e->code;
      if (auto code = fill(std::move(out.code), e->fields, p, base)) {
        out.code = std::move(*code);
        x86::testing::g_from_template.fetch_add(1, std::memory_order_relaxed);
        return out;
      }
    }
    std::vector<Field> fields;
    auto fresh = emit(&fields);
    if (!fresh) return fresh;
    // Proving a variant whose fields take this function's forms: its code for this
    // function against asmjit's.
    for (const auto& e : variants) {
      if (e->proven) continue;
      auto made = fill(e->code.code, e->fields, p, base);
      if (!made) continue;
      auto next = std::make_shared<Entry>(*e);
      (*made == fresh->code && same_layout(e->code, *fresh) ? next->proven : next->refused) = true;
      replace(e, std::move(next));
      return fresh;
    }
    // A new variant, from code whose fields hold their values in the form this function
    // needs (the first counter slots fit in a disp8: not those).
    auto held = fill(fresh->code, fields, p, base);
    if (held && *held == fresh->code) add(std::make_shared<Entry>(Entry{shape, *fresh, std::move(fields)}));
    return fresh;
  }

 private:
  // One variant of a shape: its fields in one set of forms (functions below 4 GiB or
  // above, code in reach of the hooks or not).
  struct Entry {
    Shape shape;
    Code code;  // as asmjit made it for the variant's first function, with its layout
    std::vector<Field> fields;
    bool proven = false, refused = false;
  };
  static constexpr size_t kMaxEntries = 256, kMaxVariants = 4;
  std::vector<std::shared_ptr<const Entry>> find(const Shape& shape) {
    std::vector<std::shared_ptr<const Entry>> out;
    std::lock_guard lock(mu_);
    for (const auto& e : entries_)
      if (e->shape == shape) out.push_back(e);
    return out;
  }
  void add(std::shared_ptr<const Entry> e) {
    std::lock_guard lock(mu_);
    size_t variants = 0;
    for (const auto& x : entries_) {
      if (!(x->shape == e->shape)) continue;
      if (++variants >= kMaxVariants || same_forms(x->fields, e->fields)) return;
    }
    if (entries_.size() < kMaxEntries) entries_.push_back(std::move(e));
  }
  static bool same_forms(const std::vector<Field>& a, const std::vector<Field>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                      [](const Field& x, const Field& y) { return x.at == y.at && x.form == y.form; });
  }
  void replace(const std::shared_ptr<const Entry>& old, std::shared_ptr<const Entry> e) {
    std::lock_guard lock(mu_);
    for (auto& x : entries_)
      if (x == old) x = std::move(e);
  }
  std::mutex mu_;
  std::vector<std::shared_ptr<const Entry>> entries_;
};

// Fields are noted while it lives.
class NoteFields {
 public:
  explicit NoteFields(std::vector<Field>* into) : before_(t_fields) { t_fields = into; }
  ~NoteFields() { t_fields = before_; }
  NoteFields(const NoteFields&) = delete;
  NoteFields& operator=(const NoteFields&) = delete;

 private:
  std::vector<Field>* before_;
};

// Everything of a stub's spec its code depends on but the fields (compiler sites: no
// prologue moved, no frame undone).
struct StubShape {
  ThreadLayout tls;
  uint64_t register_fn;
  bool preserve_all;
  XStateSave xstate;
  bool operator==(const StubShape&) const = default;
};

Result<StubCode> emit_stub_code(const StubSpec& spec, uint64_t base);

}  // namespace

Result<StubCode> emit_stub(const StubSpec& spec, uint64_t base) {
  if (!spec.prologue.empty() || spec.undo_frame) return emit_stub_code(spec, base);
  static auto* templates = new Templates<StubShape, StubCode>();
  Params p;
  p.original = spec.original;
  p.site_disp = spec.tls.counters + 4 * int64_t{spec.counter_slot};
  return templates->make(StubShape{spec.tls, spec.register_fn, spec.preserve_all, spec.xstate}, p, base,
                         [&](std::vector<Field>* fields) {
                           NoteFields noting(fields);
                           return emit_stub_code(spec, base);
                         });
}

namespace {

Result<StubCode> emit_stub_code(const StubSpec& spec, uint64_t base) {
  // The relocated prologue's length does not depend on where it goes (branches are
  // always widened to rel32): measure it, assemble with a placeholder of that length,
  // then relocate for the placeholder's final address and splice it in.
  size_t prologue_len = 0;
  const uint64_t from = spec.prologue_from ? spec.prologue_from : spec.site;
  const uint64_t resume = spec.resume ? spec.resume : from + spec.prologue.size();
  if (!spec.prologue.empty()) {
    auto trial = relocate(spec.prologue, from, base);
    if (!trial) return std::move(trial).error();
    prologue_len = trial->code.size();
  }
  StubCode out;
  auto code = assemble(
      base, fmt::format("the stub of the site at {:#x}", spec.site),
      [&](ax::Assembler& a) {
        Label stub = a.newLabel(), slow = a.newLabel(), hop = a.newLabel(), pass = a.newLabel(),
              ool = a.newLabel(), exit = a.newLabel(), body = a.newLabel();
        const ax::Mem counter = block_mem(spec.tls.counters + 4 * int64_t(spec.counter_slot), 4);
        // Keeping every register, r11 waits below the stack pointer (arch/image.hpp).
        const ax::Mem kept_r11 = ax::qword_ptr(ax::rsp, -8);
        if (spec.undo_frame) {
          for (const FrameUndo::Push& p : spec.frame.pushes)
            a.mov(ax::gpq(p.reg), ax::qword_ptr(ax::rbp, p.offset));
          a.leave();
        }
        a.bind(stub);
        if (spec.preserve_all) a.mov(kept_r11, ax::r11);
        load_block(a, spec.tls);
        a.test(ax::r11, ax::r11);
        a.long_().jz(slow);
        a.inc(counter);
        note(a, Field::Form::disp32, Param::site_slot);
        if (spec.preserve_all) a.mov(ax::r11, kept_r11);
        a.bind(hop);
        a.long_().jmp(pass);
        a.bind(pass);
        if (spec.preserve_all) a.mov(kept_r11, ax::r11);
        load_block(a, spec.tls);
        a.dec(counter);
        note(a, Field::Form::disp32, Param::site_slot);
        if (spec.preserve_all) a.mov(ax::r11, kept_r11);
        a.bind(body);
        if (spec.prologue.empty()) {
          jmp_abs(a, spec.original, base, Param::original);
        } else {
          a.bind(ool);
          std::vector<uint8_t> placeholder(prologue_len, kTrapByte);
          a.embed(placeholder.data(), placeholder.size());
          // Keeping every register, back by rel32 only (the stub is within the site's
          // reach), never through r11.
          if (spec.preserve_all) a.long_().jmp(Imm(resume));
          else jmp_abs(a, resume, base);
        }
        a.bind(slow);
        if (spec.preserve_all) a.mov(ax::r11, kept_r11);
        // Entered by jmp from the function's entry, where the stack is usually 8 mod 16
        // but not always: gcc calls a local function that needs no alignment with
        // whatever it has (its IPA stack alignment). Realign for the call.
        a.push(ax::rbp);
        a.mov(ax::rbp, ax::rsp);
        a.and_(ax::rsp, Imm(-16));
        if (spec.preserve_all) {
          call_keeping_all(a, spec.xstate, spec.register_fn, base);
        } else {
          for (const ax::Gp& r : kIntArgs) a.push(r);
          a.push(ax::rax);
          a.push(ax::r10);
          a.sub(ax::rsp, Imm(16 * kSseArgs));
          for (int x = 0; x < kSseArgs; ++x) a.movdqu(ax::ptr(ax::rsp, 16 * x), ax::xmm(x));
          call_abs(a, spec.register_fn, base);
          for (int x = 0; x < kSseArgs; ++x) a.movdqu(ax::xmm(x), ax::ptr(ax::rsp, 16 * x));
          a.add(ax::rsp, Imm(16 * kSseArgs));
          a.pop(ax::r10);
          a.pop(ax::rax);
          for (int r = 5; r >= 0; --r) a.pop(kIntArgs[r]);
        }
        a.leave();
        // Registered: in again. Not (no memory for its block): the body runs untraced
        // this time, and the thread tries again at its next entry.
        if (spec.preserve_all) a.mov(kept_r11, ax::r11);
        load_block(a, spec.tls);
        a.test(ax::r11, ax::r11);
        if (spec.preserve_all) a.mov(ax::r11, kept_r11);
        a.long_().jnz(stub);
        a.long_().jmp(body);
        // exit: images that hold their own counter leave through here, its address in r11 (and,
        // keeping every register, the caller's r11 pushed above the return address).
        a.bind(exit);
        a.dec(ax::dword_ptr(ax::r11));
        if (spec.preserve_all) a.pop(ax::r11);
        a.ret();
        out.exit = exit.id();
        out.hop = hop.id();   // label ids for now; offsets below
        out.pass = pass.id();
        out.original = spec.prologue.empty() ? 0 : ool.id();
      },
      [&](asmjit::CodeHolder& c) {
        out.hop = static_cast<uint32_t>(c.labelOffset(out.hop));
        out.exit = static_cast<uint32_t>(c.labelOffset(out.exit));
        out.pass = static_cast<uint32_t>(c.labelOffset(out.pass));
        if (!spec.prologue.empty()) out.original = static_cast<uint32_t>(c.labelOffset(out.original));
      });
  if (!code) return std::move(code).error();
  out.code = std::move(*code);
  if (!spec.prologue.empty()) {
    auto rel = relocate(spec.prologue, from, base + out.original);
    if (!rel) return std::move(rel).error();
    if (rel->code.size() != prologue_len)
      return make_error(Errc::unsupported, "relocated prologue changed length between passes");
    std::copy(rel->code.begin(), rel->code.end(), out.code.begin() + out.original);
  }
  return out;
}

}  // namespace

size_t image_size_bound(const ImageSpec& spec) {
  const size_t progs = spec.fentry.size() + spec.fmod_ret.size() + spec.fexit.size();
  const size_t args = spec.sig ? spec.sig->args.size() * 2 + 8 : 16;
  return 512 + progs * 192 + args * 24 + 64 * 8 /* stack window copy */ + 512 +
         (spec.tracer.entry ? 256 : 0) + (spec.tracer.inline_path ? 768 : 0) +
         (spec.preserve_all ? 512 + 4 * kKeptStateBound + 3 * probe_bytes_bound(spec.xstate) : 0);
}

// Image layout (calls_original; fentry-only images omit the marked parts and end with
// `leave; jmp pass`, where the stub's pass-through releases the site counter and runs
// the body with the caller's return address still on the stack):
//
//   push rbp ; mov rbp, rsp
//   mov r11, fs:[block]                 | this thread's block
//   inc dword [r11 + counters + 4*I]    | this image's own counter, taken before
//   dec dword [r11 + counters + 4*S]    | the site counter is released
//   sub rsp, frame
//   <save argument registers into ctx[]>
//   mov qword [ctx-8], n ; mov [ctx-16], func
//   <fentry programs>
//   <fmod_ret programs: a non-zero return skips to fexit with it as the result>
//   <restore arguments; copy stack arguments; call original>   |
//   <return registers into ctx[n..]>                           |
//   <fexit programs>                                           |
//   <restore return registers>                                 |
//   leave ; mov r11, fs:[block]         | exit: dec dword [r11]; ret
//   lea r11, [r11 + counters + 4*I]     |
//   jmp exit                            |
namespace {

// An image with a tracer and no program: no ctx, the hooks around the call.
//
//   push rbp ; mov rbp, rsp
//   mov r11, fs:[block]                                             | calls_original
//   inc dword [r11 + counters + 4*I] ; dec dword [r11 + counters + 4*S]
//   and rsp, -16
//   <entry hook>
//   <copy stack arguments; call original>                           | calls_original
//   <exit hook>                                                     |
//   leave ; mov r11, fs:[block] ; lea r11, [r11 + counters + 4*I] ; jmp exit
//                                        (entry-only: leave ; jmp pass)
//
// Keeping every register, the inline path and the hooks save every general register
// they use, the general code's call saves everything (call_keeping_all), the stack
// arguments are copied with pushes and the exit keeps r11: the common case costs a few
// more pushes and pops, and no extended-state save.
Result<ImageCode> emit_tracer_image_code(const ImageSpec& sp, uint64_t base) {
  const Signature& sig = *sp.sig;
  const Layout l = assign(sig);
  ImageCode out;
  Exits exits;
  auto code = assemble(base, fmt::format("the tracer's image of {:#x}", sp.func), [&](ax::Assembler& a) {
    std::vector<HookSlow> slow;
    image_enter(a, sp);
    a.and_(ax::rsp, Imm(-16));
    if (sp.tracer.inline_path) hook_inline(a, sp, base, slow, true);
    else hook_entry(a, sp, base, slow);
    if (sp.calls_original) {
      call_original(a, sp, sig, l, base);
      if (sp.tracer.exit && sp.tracer.inline_path) hook_inline(a, sp, base, slow, false);
      else if (sp.tracer.exit) hook_exit(a, sp, base, slow);
    }
    image_leave(a, sp, exits);
    hook_slow_paths(a, base, slow, sp.preserve_all ? &sp.xstate : nullptr);
  }, [&](asmjit::CodeHolder& c) { record_exits(c, exits, out); });
  if (!code) return std::move(code).error();
  out.code = std::move(*code);
  return out;
}

// Everything of a tracer's image spec its code depends on but the fields: of the
// signature, only how many bytes of stack arguments it copies for the call
// (call_original); keep in step with emit_tracer_image_code.
struct TracerImageShape {
  int32_t window;
  ThreadLayout tls;
  TracerHooks tracer;
  bool calls_original;
  bool preserve_all;
  XStateSave xstate;
  bool operator==(const TracerImageShape&) const = default;
};

Result<ImageCode> emit_tracer_image(const ImageSpec& sp, uint64_t base) {
  static auto* templates = new Templates<TracerImageShape, ImageCode>();
  Params p;
  p.func = sp.func;
  p.original = sp.original;
  p.pass = sp.pass;
  p.exit_fn = sp.exit_fn;
  p.site_disp = sp.tls.counters + 4 * int64_t{sp.site_slot};
  p.image_disp = sp.tls.counters + 4 * int64_t{sp.image_slot};
  const TracerImageShape shape{copy_window(*sp.sig, assign(*sp.sig)), sp.tls, sp.tracer,
                               sp.calls_original, sp.preserve_all, sp.xstate};
  return templates->make(shape, p, base, [&](std::vector<Field>* fields) {
    NoteFields noting(fields);
    return emit_tracer_image_code(sp, base);
  });
}

}  // namespace

Result<ImageCode> emit_image(const ImageSpec& sp, uint64_t base) {
  if (sp.tracer.entry && sp.fentry.empty() && sp.fmod_ret.empty() && sp.fexit.empty())
    return emit_tracer_image(sp, base);
  const Signature& sig = *sp.sig;
  const Layout l = assign(sig);
  const Frame f = frame_for(sig, l, sp);
  ImageCode out;
  Exits exits;
  std::vector<ProgMiss> misses;  // in run order
  auto code = assemble(base, fmt::format("the image of {:#x}", sp.func), [&](ax::Assembler& a) {
    std::vector<HookSlow> hook_slow;
    Label fexit = a.newLabel(), skipped = a.newLabel();
    image_enter(a, sp);
    // The stack is 8 mod 16 at a function's entry only when its caller kept the ABI's
    // alignment: gcc does not for local callees it knows need none. Programs and the
    // original are called with it aligned whatever it was (to 64 for the extended
    // state's save area when every register is kept).
    lower_rsp(a, f.size + static_cast<int32_t>(f.xsave), f.preserve ? 64 : 16);
    if (f.preserve) save_all(a, sp, f);
    if (sp.tracer.entry) hook_entry(a, sp, base, hook_slow);
    save_args(a, l, f);
    a.mov(ctx_slot(f, abi::kCtxArgCount), Imm(f.nslots));
    if (static_cast<int64_t>(sp.func) == static_cast<int32_t>(sp.func)) {
      a.mov(ctx_slot(f, abi::kCtxFuncIp), Imm(static_cast<int32_t>(sp.func)));
    } else {
      a.mov(ax::r11, Imm(sp.func));
      a.mov(ctx_slot(f, abi::kCtxFuncIp), ax::r11);
    }
    if (sp.store_caller) {
      a.mov(ax::r11, rbp_q(Frame::kReturnAddress));  // the caller's (entered by jmp)
      a.mov(ctx_slot(f, abi::kCtxCaller), ax::r11);
    }
    // The function's registers at its entry, for the stack helpers: entered by jmp, rsp
    // was rbp+8 (its caller's return address there) and rbp the word at rbp.
    if (sp.store_frame) {
      a.lea(ax::r11, rbp_q(Frame::kReturnAddress));
      a.mov(ctx_slot(f, abi::kCtxEntrySp), ax::r11);
      a.mov(ax::dword_ptr(ax::rbp, f.ctx + 8 * abi::kCtxArgCount + 4), Imm(abi::kCtxEntrySpValid >> 32));
    }
    for (const ImageProg& p : sp.fentry) run_prog(a, sp, f, p, base, misses);
    // Keeping every register, the body's skipped by fmod_ret leaves them as they came
    // but for the result (a function returning nothing keeps rax as well).
    const bool skip_sets_rax = f.preserve && sig.ret.kind != RetType::Kind::none;
    if (!sp.calls_original) {
      if (f.preserve) restore_all(a, sp, f);
      else restore_args(a, sig, l, f);
      image_leave(a, sp, exits);
    } else {
      // ctx[n] is the return slot from here (abi/ctx.hpp: kCtxRetValid, which fentry
      // programs see clear, and only fmod_ret and fexit programs read: an image with a
      // tracer's exit hook and fentry programs alone has no use for it); the first
      // fmod_ret program finds 0 in it.
      if (!sp.fmod_ret.empty() || !sp.fexit.empty())
        a.mov(ax::dword_ptr(ax::rbp, f.ctx + 8 * abi::kCtxArgCount + 4),
              Imm((abi::kCtxRetValid | (sp.store_frame ? abi::kCtxEntrySpValid : 0)) >> 32));
      if (!sp.fmod_ret.empty()) a.mov(ctx_slot(f, f.nslots), Imm(0));
      for (const ImageProg& p : sp.fmod_ret) {
        run_prog(a, sp, f, p, base, misses);
        // A missed fmod_ret program continues at `after` with rax = 0 (see below).
        a.mov(ctx_slot(f, f.nslots), ax::rax);
        a.mov(ctx_slot(f, f.nslots + 1), Imm(0));
        a.test(ax::rax, ax::rax);
        a.jnz(skip_sets_rax ? skipped : fexit);
      }
      if (f.preserve) restore_all(a, sp, f);
      else restore_args(a, sig, l, f);
      call_original(a, sp, sig, l, base);
      if (f.preserve && sp.fexit.empty() && !sp.tracer.exit) {
        // fmod_ret programs only: nothing runs after the body, whose registers are what
        // the caller must see. A skip leaves with the entry's (its result in rax's slot).
        image_leave(a, sp, exits);
        a.bind(fexit);
        restore_all(a, sp, f);
        image_leave(a, sp, exits);
      } else if (f.preserve) {
        // The body's registers, then its result into ctx (save_ret uses r11, saved by
        // then, and pops a long double off the x87 stack), then the extended state: with
        // the x87 stack empty, as at any call. Saved with st0 in use, the moves would
        // note the status word of a full stack, and restore_moved would put it back
        // (TOP included) after the pop, every tag empty: the caller would read a NaN.
        // Nothing after the body reads rax, rcx or rdx until restore_all: no reloads.
        save_gprs(a, f);
        save_ret(a, sig.ret, f);
        save_state(a, sp.xstate, ax::rsp, ax::byte_ptr(ax::rbp, f.path));
        a.bind(fexit);
        for (const ImageProg& p : sp.fexit) run_prog(a, sp, f, p, base, misses);
        if (sp.tracer.exit) hook_exit(a, sp, base, hook_slow);
        restore_all(a, sp, f);  // the registers as the body (or the entry) left them
        // ... and the long double save_ret popped (fmod_ret, whose skip comes here with
        // the entry's state, is refused on functions returning one).
        if (sig.ret.kind == RetType::Kind::x87) restore_ret(a, sig.ret, f);
        image_leave(a, sp, exits);
      } else {
        save_ret(a, sig.ret, f);
        a.bind(fexit);
        for (const ImageProg& p : sp.fexit) run_prog(a, sp, f, p, base, misses);
        restore_ret(a, sig.ret, f);
        if (sp.tracer.exit) hook_exit(a, sp, base, hook_slow);
        image_leave(a, sp, exits);
      }
    }
    if (skip_sets_rax && !sp.fmod_ret.empty()) {
      a.bind(skipped);  // out of line: the fmod_ret result is what rax is restored to
      a.mov(rbp_q(f.gpr + 8 * kKeptRax), ax::rax);
      a.long_().jmp(fexit);
    }
    // Out of line: a held guard, taken over when its holder was left, else a miss.
    // rax = 0 for fmod_ret's test. (rsp is 16-aligned here, as at the program's call.)
    for (const ProgMiss& m : misses) {
      a.bind(m.held);
      load_block(a, sp.tls);
      a.mov(ax::rdi, block_mem(sp.tls.active + 8 * int64_t(m.prog->guard), 8));
      a.mov(ax::rsi, ax::rbp);
      call_abs(a, sp.guard_left, base);
      Label lost = a.newLabel();
      a.test(ax::rax, ax::rax);
      a.jz(lost);
      load_block(a, sp.tls);  // for `take` (guard_left changed r11)
      a.long_().jmp(m.take);
      a.bind(lost);
      a.mov(ax::r11, Imm(m.prog->misses));
      a.lock().inc(ax::qword_ptr(ax::r11));
      a.xor_(ax::eax, ax::eax);
      a.long_().jmp(m.after);
    }
    hook_slow_paths(a, base, hook_slow, nullptr);  // what they change, restore_all undoes
  }, [&](asmjit::CodeHolder& c) {
    record_exits(c, exits, out);
    for (const ProgMiss& m : misses) out.prog_calls.push_back(static_cast<uint32_t>(c.labelOffset(m.call)));
  });
  if (!code) return std::move(code).error();
  out.code = std::move(*code);
  return out;
}

}  // namespace utramp::arch
