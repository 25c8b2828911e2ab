#include "probe/analysis.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <link.h>
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "arch/arch.hpp"
#include "arch/probe.hpp"
#include "common/hex.hpp"
#include "os/dwarf.hpp"
#include "patch/patcher.hpp"
#include "sites/table.hpp"

extern "C" {
struct utramp_dwarf_eh_bases {
  void* tbase;
  void* dbase;
  void* func;
};
// libgcc's lookup of the FDE covering a pc (the unwinder's own, exported by libgcc_s).
const void* _Unwind_Find_FDE(void* pc, utramp_dwarf_eh_bases* bases);
}

#ifndef SA_RESTORER
#define SA_RESTORER 0x04000000  // the kernel's flag; glibc sets it and does not export it
#endif

namespace utramp::probe {

namespace {

// ---- .eh_frame reading, just enough to tell whether a function has an LSDA ----------------

struct Cursor {
  const uint8_t* p;
  uint64_t uleb() {
    uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
      const uint8_t b = *p++;
      if (shift < 64) v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
  }
  int64_t sleb() {
    int64_t v = 0;
    unsigned shift = 0;
    uint8_t b;
    do {
      b = *p++;
      if (shift < 64) v |= int64_t(b & 0x7f) << shift;
      shift += 7;
    } while (b & 0x80);
    if (shift < 64 && (b & 0x40)) v |= -(int64_t{1} << shift);
    return v;
  }
  // The raw value of a DW_EH_PE-encoded pointer (not applied): enough to test for zero.
  bool encoded(uint8_t enc, uint64_t* out) {
    if (enc == 0xff) {
      *out = 0;
      return true;
    }
    uint64_t v = 0;
    switch (enc & 0x0f) {
      case 0x00: case 0x04: case 0x0c: std::memcpy(&v, p, 8); p += 8; break;
      case 0x02: case 0x0a: { uint16_t x; std::memcpy(&x, p, 2); v = x; p += 2; break; }
      case 0x03: case 0x0b: { uint32_t x; std::memcpy(&x, p, 4); v = x; p += 4; break; }
      case 0x01: v = uleb(); break;
      case 0x09: v = static_cast<uint64_t>(sleb()); break;
      default: return false;
    }
    *out = v;
    return true;
  }
};

// 1: the FDE covering `pc` names an LSDA (the function has landing pads or exception
// specifications); 0: it does not, or there is no FDE; -1: unreadable.
int has_lsda(uint64_t pc) {
  utramp_dwarf_eh_bases bases{};
  const auto* fde = static_cast<const uint8_t*>(_Unwind_Find_FDE(reinterpret_cast<void*>(pc), &bases));
  if (!fde) return 0;
  Cursor c{fde};
  uint32_t len32;
  std::memcpy(&len32, c.p, 4);
  c.p += 4;
  if (len32 == 0xffffffffu) c.p += 8;
  const uint8_t* cie_field = c.p;
  uint32_t cie_delta;
  std::memcpy(&cie_delta, c.p, 4);
  c.p += 4;
  Cursor cie{cie_field - cie_delta};
  std::memcpy(&len32, cie.p, 4);
  cie.p += 4;
  if (len32 == 0xffffffffu) cie.p += 8;
  cie.p += 4;  // CIE id
  const uint8_t version = *cie.p++;
  const char* aug = reinterpret_cast<const char*>(cie.p);
  cie.p += std::strlen(aug) + 1;
  if (aug[0] != 'z') return std::strchr(aug, 'L') ? -1 : 0;
  (void)cie.uleb();  // code alignment
  (void)cie.sleb();  // data alignment
  if (version == 1) ++cie.p;
  else (void)cie.uleb();  // return address register
  (void)cie.uleb();  // augmentation data length
  uint8_t lsda_enc = 0xff, fde_enc = 0;
  for (const char* a = aug + 1; *a; ++a) {
    if (*a == 'L') lsda_enc = *cie.p++;
    else if (*a == 'R') fde_enc = *cie.p++;
    else if (*a == 'P') {
      const uint8_t penc = *cie.p++;
      uint64_t ignored;
      if (!cie.encoded(penc, &ignored)) return -1;
    } else if (*a == 'S' || *a == 'B') {
    } else {
      return -1;
    }
  }
  if (lsda_enc == 0xff) return 0;
  uint64_t ignored;
  if (!c.encoded(fde_enc, &ignored)) return -1;                  // pc_begin
  if (!c.encoded(fde_enc & 0x0f, &ignored)) return -1;           // pc_range
  (void)c.uleb();                                                // augmentation length
  uint64_t lsda = 0;
  if (!c.encoded(lsda_enc, &lsda)) return -1;
  return lsda != 0 ? 1 : 0;
}

int own_marker;

struct OwnSearch {
  uint64_t marker;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
};

}  // namespace

Result<void> Analysis::refresh_maps(bool force) {
  const uint64_t gen = os::unmap_generation();
  if (force || gen != maps_gen_ || maps_.empty()) {
    auto m = os::read_maps();
    if (!m) return std::move(m).error();
    maps_ = std::move(*m);
    maps_gen_ = gen;
  }
  if (own_ranges_.empty()) {
    // The runtime's own object: every segment of the object holding this code.
    OwnSearch s{reinterpret_cast<uint64_t>(&own_marker), {}};
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) {
          auto* s = static_cast<OwnSearch*>(data);
          std::vector<std::pair<uint64_t, uint64_t>> r;
          bool mine = false;
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            const ElfW(Phdr)& ph = info->dlpi_phdr[i];
            if (ph.p_type != PT_LOAD) continue;
            const uint64_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
            r.push_back({lo, hi});
            if (s->marker >= lo && s->marker < hi) mine = true;
          }
          if (mine) s->ranges = std::move(r);
          return mine ? 1 : 0;
        },
        &s);
    own_ranges_ = std::move(s.ranges);
  }
  if (!restorer_) {
    // The signal return trampoline the kernel sends our SIGTRAP handler back through.
    (void)patch::install_trap_handler();
    struct sigaction cur;
    if (sigaction(SIGTRAP, nullptr, &cur) == 0 && (cur.sa_flags & SA_RESTORER))
      restorer_ = reinterpret_cast<uint64_t>(cur.sa_restorer);
  }
  return {};
}

Result<void> Analysis::check_address(uint64_t addr) {
  const os::Mapping* m = os::find_mapping(maps_, addr);
  if (!m || !m->x) {
    UTRAMP_TRY(refresh_maps(true));  // mapped since the last read?
    m = os::find_mapping(maps_, addr);
  }
  if (!m) return make_error(Errc::not_found, fmt::format("{:#x} is not mapped", addr));
  if (!m->x)
    return make_error(Errc::not_executable,
                      fmt::format("{:#x} is not executable (mapping {:#x}-{:#x} {}{}{} {})", addr,
                                  m->start, m->end, m->r ? 'r' : '-', m->w ? 'w' : '-',
                                  m->x ? 'x' : '-', m->path));
  for (auto [lo, hi] : own_ranges_)
    if (addr >= lo && addr < hi)
      return make_error(Errc::invalid_argument,
                        fmt::format("{:#x} is blacklisted: utramp's own code ({}); a probe there "
                                    "would recurse",
                                    addr, m->path));
  if (restorer_ && addr >= restorer_ && addr < restorer_ + 16)
    return make_error(Errc::invalid_argument,
                      fmt::format("{:#x} is blacklisted: the signal return trampoline "
                                  "(__restore_rt); every probe hit returns through it",
                                  addr));
  static constexpr std::string_view kSanitizers[] = {"libasan", "libubsan", "libtsan", "liblsan",
                                                     "libhwasan"};
  for (std::string_view s : kSanitizers)
    if (m->path.find(s) != std::string::npos)
      return make_error(Errc::invalid_argument,
                        fmt::format("{:#x} is blacklisted: sanitizer runtime ({}), called by "
                                    "instrumented code on the hit path",
                                    addr, m->path));
  if (m->path == "[vdso]" || m->path == "[vsyscall]")
    return make_error(Errc::invalid_argument,
                      fmt::format("{:#x} is in the {}, which cannot be patched", addr, m->path));
  return {};
}

Result<void> Analysis::rebuild_index() {
  auto all = sites::SiteTable::instance().all();
  funcs_.clear();
  index_.clear();
  for (const sites::Site* s : all) {
    if (s->info.size == 0) continue;
    funcs_.push_back({s->info.func, s->info.size, s->info.name, s->object(), s->bias});
  }
  std::sort(funcs_.begin(), funcs_.end(), [](const Function& a, const Function& b) {
    return a.start != b.start ? a.start < b.start : a.size > b.size;
  });
  for (size_t i = 0; i < funcs_.size(); ++i)
    if (index_.empty() || funcs_[index_.back().fn].start != funcs_[i].start)
      index_.push_back({funcs_[i].start, funcs_[i].end(), i});
  indexed_gen_ = os::unmap_generation();
  return {};
}

Result<Function> Analysis::function_at(uint64_t addr) {
  auto& table = sites::SiteTable::instance();
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt == 1) {
      auto n = table.discover();  // an object loaded since
      if (!n) return std::move(n).error();
    }
    // Rebuilt after an unload (an object's functions are gone) and on a miss (an object
    // loaded since).
    if (indexed_gen_ != os::unmap_generation() || attempt == 1) {
      code_.clear();
      targets_.clear();
      UTRAMP_TRY(rebuild_index());
    }
    auto it = std::upper_bound(index_.begin(), index_.end(), addr,
                               [](uint64_t a, const Index& x) { return a < x.start; });
    // Symbols may nest (an alias with a smaller size): look back a little.
    for (int back = 0; back < 4 && it != index_.begin(); ++back) {
      --it;
      if (addr >= it->start && addr < it->end) return funcs_[it->fn];
    }
  }
  // No symbol covers it (a stripped file's static functions, the .cold parts gcc splits
  // off: where USDT probes guarded by a semaphore usually sit). The file's call frame
  // information still covers the code, in rows that start on instruction boundaries:
  // the row holding addr is decoded from its start as a function would be, and marked
  // partial (no multi-instruction jump over it: the rest of the function is unknown).
  const os::Mapping* m = os::find_mapping(maps_, addr);
  if (m && !m->path.empty()) {
    // The site table names an object as the loader does (/lib/... for /usr/lib/... on a
    // merged-/usr system), /proc/self/maps by its real path: either name matches.
    std::string loader_name;
    Dl_info di{};
    link_map* lm = nullptr;
    if (dladdr1(reinterpret_cast<void*>(addr), &di, reinterpret_cast<void**>(&lm), RTLD_DL_LINKMAP) && lm &&
        lm->l_name)
      loader_name = lm->l_name;
    const auto same = std::find_if(funcs_.begin(), funcs_.end(), [&](const Function& f) {
      return f.object == m->path || (!loader_name.empty() && f.object == loader_name);
    });
    if (same != funcs_.end()) {
      const uint64_t bias = same->bias;
      if (auto row = os::cfi_row_range(m->path, addr - bias)) {
        Function f;
        f.start = row->first + bias;
        f.size = row->second - row->first;
        f.name = fmt::format("{}+{:#x}", m->path.substr(m->path.rfind('/') + 1), row->first);
        f.object = m->path;
        f.bias = bias;
        f.partial = true;
        return f;
      }
    }
  }
  return make_error(Errc::not_found,
                    fmt::format("{:#x} is not inside any known function{}", addr,
                                m && !m->path.empty() ? fmt::format(" (in {})", m->path) : ""));
}

Result<void> Analysis::check_function(const Function& f, uint64_t addr) {
  const sites::Site* s = sites::SiteTable::instance().find(f.start);
  if (s && s->blacklisted && !s->probes_allowed)
    return make_error(Errc::invalid_argument,
                      fmt::format("{} is blacklisted: {} ({}); a probe there would recurse",
                                  label(addr), s->blacklist_reason, f.name));
  return {};
}

std::vector<uint8_t> Analysis::read_view(uint64_t addr, size_t len) {
  std::vector<uint8_t> v(reinterpret_cast<const uint8_t*>(addr),
                         reinterpret_cast<const uint8_t*>(addr) + len);
  originals_(addr, v);
  return v;
}

const Analysis::FuncCode& Analysis::func_code(const Function& f) {
  // Kept while the bytes are the same: someone else may have changed them since (a
  // debugger's int3, a trampoline's site), or changed them back.
  std::vector<uint8_t> bytes = read_view(f.start, f.size);
  auto it = code_.find(f.start);
  if (it != code_.end()) {
    if (it->second.bytes == bytes) return it->second;
    code_.erase(it);
  }
  FuncCode fc;
  uint64_t off = 0;
  while (off < f.size) {
    auto insn = arch::decode(bytes.data() + off, f.size - off, f.start + off);
    if (!insn) {
      fc.stop_reason = fmt::format("bytes {} at +{:#x} do not decode",
                                   hex_bytes(std::span(bytes).subspan(off, std::min<size_t>(8, f.size - off))),
                                   off);
      break;
    }
    if (off + insn->length > f.size) {
      fc.stop_reason = fmt::format("the instruction at +{:#x} runs past the symbol's end", off);
      break;
    }
    fc.boundaries.push_back(static_cast<uint32_t>(off));
    if (insn->flow == arch::Flow::indirect_jump && !fc.has_indirect_jump) {
      fc.has_indirect_jump = true;
      fc.indirect_jump = fmt::format("'{}' at +{:#x}", insn->text(), off);
    }
    off += insn->length;
  }
  fc.decoded_to = static_cast<uint32_t>(off);
  fc.bytes = std::move(bytes);
  return code_.emplace(f.start, std::move(fc)).first->second;
}

Result<uint32_t> Analysis::boundary(const Function& f, uint64_t addr) {
  const FuncCode& fc = func_code(f);
  const uint32_t off = static_cast<uint32_t>(addr - f.start);
  auto it = std::lower_bound(fc.boundaries.begin(), fc.boundaries.end(), off);
  if (it != fc.boundaries.end() && *it == off) {
    const uint32_t next = it + 1 != fc.boundaries.end() ? *(it + 1) : fc.decoded_to;
    return next - off;
  }
  if (off >= fc.decoded_to)
    return make_error(Errc::not_instruction_boundary,
                      fmt::format("{} ({:#x}): cannot prove an instruction boundary: decoding {} "
                                  "from its start stops before it: {}",
                                  label(addr), addr, f.name, fc.stop_reason));
  const uint32_t start = *(it - 1);
  const std::vector<uint8_t> bytes = read_view(f.start + start, std::min<uint64_t>(arch::kMaxInsnLen, f.size - start));
  auto insn = arch::decode(bytes.data(), bytes.size(), f.start + start);
  return make_error(Errc::not_instruction_boundary,
                    fmt::format("{} ({:#x}) is inside the instruction '{}' at {}+{:#x} (bytes {})",
                                label(addr), addr, insn ? insn->text() : "?", f.name, start,
                                insn ? hex_bytes(insn->raw()) : "?"));
}

std::vector<uint8_t> Analysis::code(const Function& f, uint64_t addr) {
  return read_view(addr, f.end() - addr);
}

const os::ElfFile* Analysis::elf(const std::string& path) {
  auto it = elves_.find(path);
  if (it == elves_.end()) {
    auto e = os::ElfFile::open(path);
    it = elves_.emplace(path, e ? std::move(*e) : nullptr).first;
  }
  return it->second.get();
}

Result<void> Analysis::check_unchanged(const Function& f, uint64_t addr, size_t len) {
  const os::ElfFile* e = elf(f.object);
  if (!e) return {};  // no file to compare with (deleted, or not ELF): nothing to prove
  const auto file = e->bytes_at(addr - f.bias, len);
  if (file.size() != len) return {};
  const std::vector<uint8_t> now = read_view(addr, len);
  if (std::equal(now.begin(), now.end(), file.begin())) return {};
  return make_error(Errc::bytes_mismatch,
                    fmt::format("{} ({:#x}): bytes in memory {}, in {} {}: someone else changed "
                                "this code; nothing was probed",
                                label(addr), addr, hex_bytes(now), f.object, hex_bytes(file)));
}

const std::vector<uint64_t>& Analysis::branch_targets(const Function& f) {
  const std::string key = fmt::format("{}@{:#x}", f.object, f.bias);
  auto it = targets_.find(key);
  if (it != targets_.end()) return it->second;
  std::vector<uint64_t> t;
  for (const sites::Site* s : sites::SiteTable::instance().all()) {
    if (s->object() != f.object || s->bias != f.bias || s->info.size == 0) continue;
    const Function g{s->info.func, s->info.size, s->info.name, s->object(), s->bias};
    const FuncCode& fc = func_code(g);
    if (fc.boundaries.empty()) continue;
    const std::vector<uint8_t> bytes = read_view(g.start, fc.decoded_to);
    for (uint32_t off : fc.boundaries) {
      auto insn = arch::decode(bytes.data() + off, fc.decoded_to - off, g.start + off);
      if (insn && insn->relative_branch) t.push_back(insn->target);
    }
  }
  std::sort(t.begin(), t.end());
  t.erase(std::unique(t.begin(), t.end()), t.end());
  return targets_.emplace(key, std::move(t)).first->second;
}

Result<void> Analysis::check_multi_window(const Function& f, uint64_t addr, uint32_t len) {
  if (f.partial)
    return make_error(Errc::unsupported,
                      fmt::format("no symbol covers {}: only its call frame information row is known, not whether "
                                  "a branch of the function targets the bytes",
                                  f.name));
  FuncCode& fc = const_cast<FuncCode&>(func_code(f));
  if (fc.decoded_to != f.size)
    return make_error(Errc::unsupported,
                      fmt::format("{} does not decode whole ({}): cannot prove no branch targets "
                                  "the bytes",
                                  f.name, fc.stop_reason));
  if (fc.has_indirect_jump)
    return make_error(Errc::unsupported,
                      fmt::format("{} has an indirect jump ({}) that could target the bytes", f.name,
                                  fc.indirect_jump));
  const auto& t = branch_targets(f);
  auto it = std::upper_bound(t.begin(), t.end(), addr);
  if (it != t.end() && *it < addr + len)
    return make_error(Errc::unsupported,
                      fmt::format("a branch targets {}, inside the {} bytes the jump would replace",
                                  label(*it), len));
  if (fc.lsda < 0) fc.lsda = has_lsda(f.start);
  if (fc.lsda != 0)
    return make_error(Errc::unsupported,
                      fmt::format("{} has C++ exception landing pads (an LSDA): the unwinder "
                                  "could resume inside the bytes",
                                  f.name));
  return {};
}

bool Analysis::gprs_only(uint64_t fn, std::span<const uint64_t> calls) {
  if (calls.empty())
    if (auto it = gprs_only_.find(fn); it != gprs_only_.end()) return it->second;
  constexpr size_t kBudget = 20000;
  struct Work {
    uint64_t pc;
    bool own;  // reached from fn without a call: the handler's own code
  };
  std::vector<Work> work{{fn, true}};
  std::unordered_set<uint64_t> seen;
  bool ok = true, refreshed = false;
  while (ok && !work.empty()) {
    uint64_t pc = work.back().pc;
    const bool own = work.back().own;
    work.pop_back();
    while (ok) {
      if (!seen.insert(pc).second) break;
      if (seen.size() > kBudget) {
        ok = false;
        break;
      }
      const os::Mapping* m = os::find_mapping(maps_, pc);
      if ((!m || !m->x) && !refreshed) {  // code mapped since the view was read (a JIT's)
        refreshed = true;
        if (refresh_maps(true)) m = os::find_mapping(maps_, pc);
      }
      if (!m || !m->x) {
        ok = false;
        break;
      }
      const std::vector<uint8_t> bytes = read_view(pc, std::min<uint64_t>(arch::kMaxInsnLen, m->end - pc));
      if (arch::insn_touches_extended_state(bytes, pc)) {
        ok = false;
        break;
      }
      auto insn = arch::decode(bytes.data(), bytes.size(), pc);
      if (!insn) {
        ok = false;
        break;
      }
      const uint64_t next = pc + insn->length;
      switch (insn->flow) {
        case arch::Flow::ret:
        case arch::Flow::trap:
          pc = 0;
          break;
        case arch::Flow::jump:
          pc = insn->target;
          continue;
        case arch::Flow::cond_jump:
          work.push_back({insn->target, own});
          pc = next;
          continue;
        case arch::Flow::call:
          // What arch::call_saving_xstate calls runs with the extended state saved
          // around it: not followed.
          if (insn->target != reinterpret_cast<uint64_t>(&arch::call_saving_xstate))
            work.push_back({insn->target, false});
          pc = next;
          continue;
        case arch::Flow::indirect_jump:
        case arch::Flow::indirect_call: {
          // Through a pointer in memory named RIP-relatively (a PLT's GOT slot): follow
          // what it holds now. The handler's own call through a register: where the
          // caller says such calls go. Anything else could go anywhere.
          if (!insn->rip_relative && insn->flow == arch::Flow::indirect_call && own && !calls.empty()) {
            for (uint64_t to : calls) work.push_back({to, false});
            pc = next;
            continue;
          }
          uint64_t to = 0;
          const os::Mapping* g = insn->rip_relative ? os::find_mapping(maps_, insn->target) : nullptr;
          if (!g || !g->r || insn->target + 8 > g->end) {
            ok = false;
            break;
          }
          std::memcpy(&to, reinterpret_cast<const void*>(insn->target), 8);
          work.push_back({to, false});
          if (insn->flow == arch::Flow::indirect_jump) pc = 0;
          else pc = next;
          if (pc) continue;
          break;
        }
        default:
          pc = next;
          continue;
      }
      break;
    }
  }
  if (calls.empty()) gprs_only_[fn] = ok;
  return ok;
}

bool Analysis::executable(uint64_t addr, uint64_t len) {
  // A view older than the last unmapping (dlclose) may still list the code.
  if (!refresh_maps()) return false;
  if (os::range_executable(maps_, addr, len)) return true;
  if (!refresh_maps(true)) return false;
  return os::range_executable(maps_, addr, len);
}

std::string Analysis::label(uint64_t addr) {
  auto it = std::upper_bound(index_.begin(), index_.end(), addr,
                             [](uint64_t a, const Index& x) { return a < x.start; });
  for (int back = 0; back < 4 && it != index_.begin(); ++back) {
    --it;
    if (addr >= it->start && addr < it->end)
      return fmt::format("{}+{:#x}", funcs_[it->fn].name, addr - it->start);
  }
  return fmt::format("{:#x}", addr);
}

}  // namespace utramp::probe
