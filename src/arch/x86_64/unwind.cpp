// The user-stack unwinder (arch/unwind.hpp): x86-64's DWARF registers and frames.
#include "arch/unwind.hpp"

#include "arch/call_slot.hpp"
#include "arch/probe.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstring>


namespace utramp::arch {

namespace {

#define UTRAMP_TLS __attribute__((tls_model("initial-exec")))

// DWARF register numbers of x86-64 (the psABI's table).
constexpr uint32_t kRegBp = 6, kRegSp = 7, kRegRa = 16;
constexpr uint64_t kPage = 4096;
constexpr uint64_t kMaxGap = 64 * kPage;  // a frame this far above the proven range: proven page by page

// The stack range this thread has proven readable: [lo, hi), whole pages. Pages of a
// stack stay mapped while the thread runs on it, so the proof holds for later unwinds
// that start inside the range; one that starts outside it (another stack: a coroutine's,
// a signal stack) starts a new range. Updated so that a signal handler unwinding on
// this thread in the middle sees an empty or a proven range, never a half-made one.
thread_local uint64_t t_ok_lo UTRAMP_TLS = 0;
thread_local uint64_t t_ok_hi UTRAMP_TLS = 0;

void fence() { std::atomic_signal_fence(std::memory_order_seq_cst); }

template <class Read>
bool stack_word(uint64_t addr, uint64_t* out, Read read) noexcept {
  if (addr & 7) return false;
  if (addr < t_ok_lo || addr + 8 > t_ok_hi) {
    const uint64_t page = addr & ~(kPage - 1);
    uint64_t probe;
    if (t_ok_hi && page >= t_ok_hi && page - t_ok_hi < kMaxGap) {
      // Above the range, on the same stack as far as it reads: each page up to it
      // proven in turn (a page is readable or not as a whole), the range grown with it.
      for (uint64_t p = t_ok_hi; p <= page; p += kPage) {
        if (!read(&probe, p, sizeof probe)) return false;
        t_ok_hi = p + kPage;
        fence();
      }
    } else if (page + kPage == t_ok_lo) {
      if (!read(&probe, page, sizeof probe)) return false;
      t_ok_lo = page;
    } else {
      if (!read(&probe, page, sizeof probe)) return false;
      t_ok_hi = 0;
      fence();
      t_ok_lo = page;
      fence();
      t_ok_hi = page + kPage;
    }
    fence();
  }
  *out = *reinterpret_cast<const volatile uint64_t*>(addr);
  return true;
}

// Reads an object's unwind tables, bounded by its mapping ([lo, hi): dl_find_object's).
struct Reader {
  const uint8_t* p;
  uint64_t lo, hi;
  bool ok = true;

  bool has(size_t n) {
    const uint64_t a = reinterpret_cast<uint64_t>(p);
    if (!ok || a < lo || a + n > hi || a + n < a) ok = false;
    return ok;
  }
  template <class T>
  T get() {
    T v{};
    if (has(sizeof v)) std::memcpy(&v, p, sizeof v), p += sizeof v;
    return v;
  }
  uint64_t uleb() {
    uint64_t v = 0;
    for (unsigned shift = 0; has(1); shift += 7) {
      const uint8_t b = *p++;
      if (shift < 64) v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    return 0;
  }
  int64_t sleb() {
    int64_t v = 0;
    unsigned shift = 0;
    for (; has(1); ) {
      const uint8_t b = *p++;
      if (shift < 64) v |= int64_t(b & 0x7f) << shift;
      shift += 7;
      if (!(b & 0x80)) {
        if (shift < 64 && (b & 0x40)) v |= -(int64_t(1) << shift);
        return v;
      }
    }
    return 0;
  }
  // A DW_EH_PE-encoded pointer; `datarel` is the base of DW_EH_PE_datarel (the header).
  uint64_t ptr(uint8_t enc, uint64_t datarel = 0) {
    if (enc == 0xff) return 0;  // omit
    const uint64_t at = reinterpret_cast<uint64_t>(p);
    uint64_t v = 0;
    switch (enc & 0x0f) {
      case 0x00: v = get<uint64_t>(); break;
      case 0x01: v = uleb(); break;
      case 0x02: v = get<uint16_t>(); break;
      case 0x03: v = get<uint32_t>(); break;
      case 0x04: v = get<uint64_t>(); break;
      case 0x09: v = static_cast<uint64_t>(sleb()); break;
      case 0x0a: v = static_cast<uint64_t>(int64_t(get<int16_t>())); break;
      case 0x0b: v = static_cast<uint64_t>(int64_t(get<int32_t>())); break;
      case 0x0c: v = get<uint64_t>(); break;
      default: ok = false; return 0;
    }
    switch (enc & 0x70) {
      case 0x00: break;
      case 0x10: v += at; break;       // pcrel
      case 0x30: v += datarel; break;  // datarel
      default: ok = false; return 0;
    }
    if (enc & 0x80) {  // indirect: the pointer is in the object's data
      Reader r{reinterpret_cast<const uint8_t*>(v), lo, hi};
      v = r.get<uint64_t>();
      ok = ok && r.ok;
    }
    return v;
  }
};

// How to find a register of the caller: unchanged, at CFA + off, or unknown.
struct Rule {
  enum Kind : uint8_t { same, offset, undefined, unsupported } kind = same;
  int64_t off = 0;
};
struct Row {
  uint32_t cfa_reg = kRegSp;
  int64_t cfa_off = 8;
  bool cfa_ok = true;
  Rule bp, ra;
};

struct Cie {
  uint64_t code_align = 1;
  int64_t data_align = -8;
  uint32_t ra_reg = kRegRa;
  uint8_t fde_enc = 0;
  bool aug_z = false, signal_frame = false;
  const uint8_t* insns = nullptr;
  const uint8_t* end = nullptr;
};

// An FDE or CIE record at p: its contents [body, end); false if it makes no sense.
bool record(Reader& r, const uint8_t** body, const uint8_t** end, uint64_t* id_at) {
  uint64_t len = r.get<uint32_t>();
  if (len == 0xffffffff) len = r.get<uint64_t>();
  if (!r.ok || len == 0 || !r.has(len)) return false;
  *id_at = reinterpret_cast<uint64_t>(r.p);
  *body = r.p;
  *end = r.p + len;
  return true;
}

bool parse_cie(const uint8_t* at, uint64_t lo, uint64_t hi, Cie* c) {
  Reader r{at, lo, hi};
  const uint8_t *body, *end;
  uint64_t id_at;
  if (!record(r, &body, &end, &id_at) || r.get<uint32_t>() != 0) return false;
  const uint8_t version = r.get<uint8_t>();
  if (version != 1 && version != 3) return false;
  char aug[8];
  size_t n = 0;
  for (;;) {
    const char ch = static_cast<char>(r.get<uint8_t>());
    if (!r.ok || n == sizeof aug) return false;
    aug[n++] = ch;
    if (!ch) break;
  }
  if (aug[0] == 'e' && aug[1] == 'h') r.get<uint64_t>();
  c->code_align = r.uleb();
  c->data_align = r.sleb();
  c->ra_reg = version == 1 ? r.get<uint8_t>() : static_cast<uint32_t>(r.uleb());
  const uint8_t* aug_end = nullptr;
  for (size_t i = 0; aug[i] && r.ok; ++i) {
    switch (aug[i]) {
      case 'z': {
        c->aug_z = true;
        const uint64_t len = r.uleb();
        aug_end = r.p + len;
        break;
      }
      case 'R': c->fde_enc = r.get<uint8_t>(); break;
      case 'L': r.get<uint8_t>(); break;
      case 'P': r.ptr(r.get<uint8_t>()); break;
      case 'S': c->signal_frame = true; break;
      case 'e': case 'h': break;
      default:
        if (!aug_end) return false;  // an augmentation without 'z' we cannot skip
        r.p = aug_end;
        aug[i + 1] = 0;
        break;
    }
  }
  if (aug_end) r.p = aug_end;
  c->insns = r.p;
  c->end = end;
  return r.ok && c->insns <= c->end;
}

// Runs the instructions [p, end) until the row that covers `pc` (loc: the row's start).
bool run_cfa(Reader r, const uint8_t* end, const Cie& c, uint64_t loc, uint64_t pc, Row& row, const Row& init) {
  Row saved[4];
  int nsaved = 0;
  auto set = [&](uint64_t reg, Rule rule) {
    if (reg == kRegBp) row.bp = rule;
    else if (reg == c.ra_reg) row.ra = rule;
  };
  auto restore = [&](uint64_t reg) {
    if (reg == kRegBp) row.bp = init.bp;
    else if (reg == c.ra_reg) row.ra = init.ra;
  };
  auto advance = [&](uint64_t delta) { loc += delta * c.code_align; return loc <= pc; };
  while (r.ok && r.p < end) {
    const uint8_t op = r.get<uint8_t>();
    const uint8_t hi2 = op & 0xc0, low = op & 0x3f;
    if (hi2 == 0x40) {
      if (!advance(low)) return true;
      continue;
    }
    if (hi2 == 0x80) {
      set(low, {Rule::offset, static_cast<int64_t>(r.uleb()) * c.data_align});
      continue;
    }
    if (hi2 == 0xc0) {
      restore(low);
      continue;
    }
    switch (op) {
      case 0x00: break;                                          // nop
      case 0x01: {                                               // set_loc
        const uint64_t to = r.ptr(c.fde_enc);
        if (to > pc) return true;
        loc = to;
        break;
      }
      case 0x02: if (!advance(r.get<uint8_t>())) return true; break;
      case 0x03: if (!advance(r.get<uint16_t>())) return true; break;
      case 0x04: if (!advance(r.get<uint32_t>())) return true; break;
      case 0x05: { const uint64_t reg = r.uleb(); set(reg, {Rule::offset, static_cast<int64_t>(r.uleb()) * c.data_align}); break; }
      case 0x06: restore(r.uleb()); break;
      case 0x07: set(r.uleb(), {Rule::undefined, 0}); break;
      case 0x08: set(r.uleb(), {Rule::same, 0}); break;
      case 0x09: { const uint64_t reg = r.uleb(); r.uleb(); set(reg, {Rule::unsupported, 0}); break; }
      case 0x0a:
        if (nsaved == 4) return false;
        saved[nsaved++] = row;
        break;
      case 0x0b: {
        if (nsaved == 0) return false;
        row = saved[--nsaved];  // the whole row, the CFA rule included (as GCC's unwinder)
        break;
      }
      case 0x0c: row.cfa_reg = static_cast<uint32_t>(r.uleb()); row.cfa_off = static_cast<int64_t>(r.uleb()); row.cfa_ok = true; break;
      case 0x0d: row.cfa_reg = static_cast<uint32_t>(r.uleb()); break;
      case 0x0e: row.cfa_off = static_cast<int64_t>(r.uleb()); break;
      case 0x0f: r.p += r.uleb(); row.cfa_ok = false; break;     // def_cfa_expression
      case 0x10: { const uint64_t reg = r.uleb(); r.p += r.uleb(); set(reg, {Rule::unsupported, 0}); break; }
      case 0x11: { const uint64_t reg = r.uleb(); set(reg, {Rule::offset, r.sleb() * c.data_align}); break; }
      case 0x12: row.cfa_reg = static_cast<uint32_t>(r.uleb()); row.cfa_off = r.sleb() * c.data_align; row.cfa_ok = true; break;
      case 0x13: row.cfa_off = r.sleb() * c.data_align; break;
      case 0x14: { const uint64_t reg = r.uleb(); r.uleb(); set(reg, {Rule::unsupported, 0}); break; }
      case 0x15: { const uint64_t reg = r.uleb(); r.sleb(); set(reg, {Rule::unsupported, 0}); break; }
      case 0x16: { const uint64_t reg = r.uleb(); r.p += r.uleb(); set(reg, {Rule::unsupported, 0}); break; }
      case 0x2e: r.uleb(); break;                                // GNU_args_size
      case 0x2f: { const uint64_t reg = r.uleb(); set(reg, {Rule::offset, -static_cast<int64_t>(r.uleb()) * c.data_align}); break; }
      default: return false;
    }
  }
  return r.ok;
}

enum class Found { row, none, bad };

uint64_t find_object(uint64_t pc, uint64_t out) {
  return static_cast<uint64_t>(_dl_find_object(reinterpret_cast<void*>(pc), reinterpret_cast<dl_find_object*>(out)));
}

// The CFI row that covers `pc`, from the unwind tables of the object that holds it.
Found find_row(uint64_t pc, Row* row) {
  dl_find_object fo;
  // Called with the extended state saved (the C library's _dl_find_object jumps to the
  // loader's through a pointer, which a probe handler's proof cannot follow): once per
  // pc, the rows are cached.
  if (call_saving_xstate(&find_object, pc, reinterpret_cast<uint64_t>(&fo)) != 0 || !fo.dlfo_eh_frame)
    return Found::none;
  const uint64_t lo = reinterpret_cast<uint64_t>(fo.dlfo_map_start), hi = reinterpret_cast<uint64_t>(fo.dlfo_map_end);
  const auto* hdr = static_cast<const uint8_t*>(fo.dlfo_eh_frame);
  const uint64_t base = reinterpret_cast<uint64_t>(hdr);
  Reader r{hdr, lo, hi};
  const uint8_t version = r.get<uint8_t>(), frame_enc = r.get<uint8_t>(), count_enc = r.get<uint8_t>(),
                table_enc = r.get<uint8_t>();
  if (version != 1) return Found::none;
  r.ptr(frame_enc, base);
  const uint64_t count = r.ptr(count_enc, base);
  if (!r.ok || table_enc != 0x3b || count == 0 || !r.has(count * 8)) return Found::none;  // datarel|sdata4 only
  const auto* table = reinterpret_cast<const int32_t*>(r.p);
  // The last entry whose start is <= pc.
  uint64_t a = 0, b = count;
  while (b - a > 1) {
    const uint64_t mid = a + (b - a) / 2;
    if (base + static_cast<uint64_t>(int64_t(table[2 * mid])) <= pc) a = mid;
    else b = mid;
  }
  if (base + static_cast<uint64_t>(int64_t(table[2 * a])) > pc) return Found::none;
  const auto* fde = reinterpret_cast<const uint8_t*>(base + static_cast<uint64_t>(int64_t(table[2 * a + 1])));
  Reader f{fde, lo, hi};
  const uint8_t *body, *end;
  uint64_t id_at;
  if (!record(f, &body, &end, &id_at)) return Found::bad;
  const uint32_t cie_off = f.get<uint32_t>();
  if (!f.ok || cie_off == 0) return Found::bad;
  Cie c;
  if (!parse_cie(reinterpret_cast<const uint8_t*>(id_at - cie_off), lo, hi, &c)) return Found::bad;
  if (c.signal_frame) return Found::bad;
  const uint64_t start = f.ptr(c.fde_enc);
  const uint64_t range = f.ptr(c.fde_enc & 0x0f);
  if (!f.ok || pc < start || pc - start >= range) return Found::none;
  if (c.aug_z) f.p += f.uleb();
  Row init;
  init.ra = {Rule::offset, -8};
  if (!run_cfa(Reader{c.insns, lo, hi}, c.end, c, start, ~uint64_t{0}, init, init)) return Found::bad;
  *row = init;
  if (!run_cfa(Reader{f.p, lo, hi}, end, c, start, pc, *row, init)) return Found::bad;
  if (!row->cfa_ok || (row->cfa_reg != kRegSp && row->cfa_reg != kRegBp) || row->bp.kind == Rule::unsupported ||
      row->ra.kind == Rule::unsupported)
    return Found::bad;
  return Found::row;
}

// A cache of rows by pc, shared by every thread: finding a row costs a search and a run
// of the FDE's instructions (about a thousand instructions), a hit a few. Each entry is
// a sequence word and two words: a reader takes an entry only when its sequence is even
// and the same after it read the words; a writer claims the entry by making the
// sequence odd (a compare-and-swap: one that finds it odd, or loses, does not cache),
// so a handler interrupting a writer on its own thread misses and never waits.
// Cached: a row (packed below) or "no row" (the frame-pointer walk); loaded objects do
// not change their tables, and an address whose object was unloaded and replaced keeps
// an entry only until another pc takes its slot (the entry's pc is the key: a new
// object's code at that pc with another row would be misread: the cost of caching,
// as every unwinder that caches by address has it).
struct CacheEntry {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint64_t> pc{0};
  std::atomic<uint64_t> row{0};
};
constexpr size_t kCacheSize = 4096;
CacheEntry g_cache[kCacheSize];

size_t cache_slot(uint64_t pc) { return (pc * 0x9e3779b97f4a7c15ull) >> 52; }

// Packed: bit 0 valid, bit 1 "no row", bit 2 CFA from rbp, bits 3-4 and 5-6 the kinds of
// rbp's and the return address's rules, bits 8-39 the CFA offset, bits 40-51 and 52-63
// the rules' offsets / 8 (signed 12 bits).
constexpr uint64_t kValid = 1, kNoRow = 2, kCfaBp = 4;
bool pack(const Row& r, uint64_t* out) {
  auto off12 = [](int64_t o, uint64_t* f) {
    if (o % 8 || o / 8 < -2048 || o / 8 > 2047) return false;
    *f = static_cast<uint64_t>(o / 8) & 0xfff;
    return true;
  };
  uint64_t bo = 0, ro = 0;
  if (r.cfa_off < INT32_MIN || r.cfa_off > INT32_MAX || !off12(r.bp.off, &bo) || !off12(r.ra.off, &ro)) return false;
  *out = kValid | (r.cfa_reg == kRegBp ? kCfaBp : 0) | (uint64_t(r.bp.kind) << 3) | (uint64_t(r.ra.kind) << 5) |
         (uint64_t(static_cast<uint32_t>(r.cfa_off)) << 8) | (bo << 40) | (ro << 52);
  return true;
}
Row unpack(uint64_t w) {
  auto off12 = [](uint64_t f) { return static_cast<int64_t>(static_cast<int16_t>(static_cast<uint16_t>(f << 4)) >> 4) * 8; };
  Row r;
  r.cfa_reg = (w & kCfaBp) ? kRegBp : kRegSp;
  r.cfa_off = static_cast<int32_t>(static_cast<uint32_t>(w >> 8));
  r.bp = {static_cast<Rule::Kind>((w >> 3) & 3), off12((w >> 40) & 0xfff)};
  r.ra = {static_cast<Rule::Kind>((w >> 5) & 3), off12((w >> 52) & 0xfff)};
  return r;
}

bool cache_get(uint64_t pc, uint64_t* w) {
  CacheEntry& e = g_cache[cache_slot(pc)];
  const uint32_t s1 = e.seq.load(std::memory_order_acquire);
  if (s1 & 1) return false;
  const uint64_t p = e.pc.load(std::memory_order_relaxed), v = e.row.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (e.seq.load(std::memory_order_relaxed) != s1 || p != pc || !(v & kValid)) return false;
  *w = v;
  return true;
}
void cache_put(uint64_t pc, uint64_t w) {
  CacheEntry& e = g_cache[cache_slot(pc)];
  uint32_t s = e.seq.load(std::memory_order_relaxed);
  if ((s & 1) || !e.seq.compare_exchange_strong(s, s + 1, std::memory_order_acquire)) return;
  std::atomic_thread_fence(std::memory_order_release);
  e.pc.store(pc, std::memory_order_relaxed);
  e.row.store(w, std::memory_order_relaxed);
  e.seq.store(s + 2, std::memory_order_release);
}

// find_row through the cache: true with the row, false for the frame-pointer walk.
bool row_at(uint64_t pc, Row* row) {
  uint64_t w;
  if (cache_get(pc, &w)) {
    if (w & kNoRow) return false;
    *row = unpack(w);
    return true;
  }
  const bool found = find_row(pc, row) == Found::row;
  if (!found) cache_put(pc, kValid | kNoRow);
  else if (pack(*row, &w)) cache_put(pc, w);
  return found;
}

// unwind_user, with `read` and `fix` called as they are given: function pointers, or
// the direct calls of unwind_user_slots.
template <class Fix, class Read>
size_t unwind(const UnwindRegs& start, uint64_t* ips, size_t max, Fix fix, Read read) noexcept {
  if (start.sp < t_ok_lo || start.sp >= t_ok_hi) {  // another stack: prove it anew
    t_ok_hi = 0;
    fence();
    t_ok_lo = 0;
    fence();
  }
  uint64_t ip = start.ip, sp = start.sp, bp = start.bp;
  size_t n = 0;
  for (bool first = true; n < max; first = false) {
    ips[n++] = ip;
    // A return address is the instruction after the call: its call is at ip - 1.
    const uint64_t pc = first ? ip : ip - 1;
    Row row;
    uint64_t cfa = 0, slot = 0, ra = 0, next_bp = bp;
    if (row_at(pc, &row)) {
      cfa = (row.cfa_reg == kRegSp ? sp : bp) + static_cast<uint64_t>(row.cfa_off);
      if (row.ra.kind != Rule::offset) break;  // undefined: the outermost frame (_start, a thread's start)
      slot = cfa + static_cast<uint64_t>(row.ra.off);
      if (!stack_word(slot, &ra, read)) break;
      if (row.bp.kind == Rule::offset && !stack_word(cfa + static_cast<uint64_t>(row.bp.off), &next_bp, read)) break;
    } else {
      // No CFI here (or none this unwinder evaluates): the frame pointer's chain.
      if (bp < sp) break;
      slot = bp + 8;
      cfa = bp + 16;
      if (!stack_word(slot, &ra, read) || !stack_word(bp, &next_bp, read)) break;
    }
    if (cfa <= sp) break;  // a stack only grows towards its callers
    ra = fix(ra, slot);
    if (ra == 0) break;
    ip = ra;
    sp = cfa;
    bp = next_bp;
  }
  return n;
}

}  // namespace

size_t unwind_user(const UnwindRegs& start, uint64_t* ips, size_t max, ReturnAddressFix fix, SafeRead read) noexcept {
  return unwind(
      start, ips, max, [fix](uint64_t ra, uint64_t slot) { return fix ? fix(ra, slot) : ra; }, read);
}

size_t unwind_user_slots(const UnwindRegs& start, uint64_t* ips, size_t max) noexcept {
  return unwind(
      start, ips, max, [](uint64_t ra, uint64_t slot) { return utramp_slot_ra_fix(ra, slot); },
      [](void* dst, uint64_t src, size_t len) { return utramp_slot_safe_read(dst, src, len); });
}

}  // namespace utramp::arch
