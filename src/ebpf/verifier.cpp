#include "ebpf/verifier.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>

#include "ebpf/bounds.hpp"

namespace utramp::ebpf {

namespace {

using namespace op;

// ---- abstract values -------------------------------------------------------------------

enum class Kind : uint8_t {
  not_init,
  scalar,
  ctx,
  stack,
  map,
  map_value,
  map_value_or_null,
  mem,
  mem_or_null,
  released,  // a ring buffer record already submitted or discarded
};

bool is_pointer(Kind k) { return k != Kind::not_init && k != Kind::scalar && k != Kind::released; }
bool maybe_null(Kind k) { return k == Kind::map_value_or_null || k == Kind::mem_or_null; }

// Pointer offsets stay within +-2^29 (as the kernel's): no sum of offsets, access
// offsets and sizes can wrap.
constexpr int64_t kMaxOffset = int64_t(1) << 29;

struct Reg {
  Kind kind = Kind::not_init;
  uint8_t frame = 0;      // stack: whose frame
  uint32_t map = 0;       // map, map_value*: index in VerifyEnv::maps
  uint32_t mem_size = 0;  // mem*: bytes
  uint32_t id = 0;        // *_or_null and its copies; scalars copied from one another
  uint32_t ref = 0;       // mem* from ringbuf_reserve: the reservation it is
  Scalar v;               // scalar: the value; pointers: the offset

  static Reg scalar(Scalar s) {
    Reg r;
    r.kind = Kind::scalar;
    r.v = s;
    return r;
  }
  static Reg pointer(Kind k, Scalar off = Scalar::constant(0)) {
    Reg r;
    r.kind = k;
    r.v = off;
    return r;
  }
};

// Stack bytes: never written, written with an unknown number, written with zero, or a
// byte of an 8-byte aligned register spill (whose value is kept in Frame::spills).
enum Byte : uint8_t { kInvalid = 0, kMisc, kZero, kSpill };

struct Frame {
  Reg r[kNumRegs];
  std::array<uint8_t, kStackSize> bytes{};       // [i]: byte at fp - 512 + i
  std::vector<std::pair<uint8_t, Reg>> spills;   // (slot, value), slot k = bytes 8k..8k+7
  uint32_t callsite = 0;                         // the caller's call instruction
  uint32_t func = 0;                             // first instruction of this function

  const Reg* spill(unsigned slot) const {
    for (const auto& [s, r] : spills)
      if (s == slot) return &r;
    return nullptr;
  }
  void set_spill(unsigned slot, const Reg& r) {
    for (auto& [s, x] : spills)
      if (s == slot) {
        x = r;
        return;
      }
    spills.emplace_back(static_cast<uint8_t>(slot), r);
  }
  // The slot's spill ends: its bytes keep their data as unknown numbers.
  void drop_spill(unsigned slot) {
    for (size_t i = 0; i < spills.size(); ++i)
      if (spills[i].first == slot) {
        spills.erase(spills.begin() + static_cast<long>(i));
        for (unsigned b = 0; b < 8; ++b)
          if (bytes[slot * 8 + b] == kSpill) bytes[slot * 8 + b] = kMisc;
        return;
      }
  }
};

struct LiveRef {
  uint32_t ref;
  uint32_t insn;  // where it was reserved
};

struct State {
  std::vector<Frame> frames;
  std::vector<LiveRef> refs;
  Frame& cur() { return frames.back(); }
  const Frame& cur() const { return frames.back(); }
  Reg& reg(unsigned r) { return frames.back().r[r]; }

  // Every register and spill, in every frame.
  template <class F>
  void each_reg(F&& f) {
    for (Frame& fr : frames) {
      for (Reg& r : fr.r) f(r);
      for (auto& [s, r] : fr.spills) f(r);
    }
  }
};

// ---- printing ----------------------------------------------------------------------------

std::string offset_str(const Scalar& off) {
  if (off.is_const()) {
    const int64_t o = static_cast<int64_t>(off.value());
    return o == 0 ? "" : fmt::format("{:+d}", o);
  }
  return fmt::format("+[{}, {}]", off.smin, off.smax);
}

// ---- pruning ----------------------------------------------------------------------------

// Ids of the old state mapped to the new one's, one to one.
class IdMap {
 public:
  bool check(uint32_t o, uint32_t n) {
    if (o == 0 && n == 0) return true;
    if (o == 0 || n == 0) return false;
    for (auto [a, b] : pairs_) {
      if (a == o || b == n) return a == o && b == n;
    }
    pairs_.emplace_back(o, n);
    return true;
  }

 private:
  std::vector<std::pair<uint32_t, uint32_t>> pairs_;
};

// A path's explored states form a tree: a node per state stored at a prune point.
// `branches` counts the paths still running through the node (the current one and
// those waiting on the stack); at 0 everything reachable from its state was proven safe,
// and it may prune other paths.
struct Node {
  Node* parent = nullptr;
  uint32_t branches = 1;
};

struct PathEdge {
  uint32_t from, to;
  std::string how;
  std::shared_ptr<const PathEdge> parent;
};
using Path = std::shared_ptr<const PathEdge>;

struct Work {
  State st;
  uint32_t pc = 0;
  Node* node = nullptr;
  Path path;
  uint32_t since_store = 0;  // instructions since this path last stored a state
};

// Verification stops at the first unsafe instruction: the error travels as a value.
struct Refusal {
  Errc code;
  std::string msg;
};

// What a memory access is, for a refusal's message ("a 4-byte read"): formatted only
// when one is refused, not for each of the (up to a million) instructions processed.
struct Access {
  const char* head;           // "a", "an atomic"; the whole text when size is 0
  unsigned size = 0;          // bytes
  const char* noun = nullptr; // "read", "write", "update"
  std::string str() const { return size ? fmt::format("{} {}-byte {}", head, size, noun) : std::string(head); }
};

class Verifier {
 public:
  Verifier(std::span<const Insn> p, const VerifyEnv& env) : p_(p), env_(env) {}
  Result<Verified> run();

 private:
  // Static analysis.
  Result<void> functions();
  void liveness();
  uint32_t uses(uint32_t pc) const;
  uint32_t defs(uint32_t pc) const;

  // Exploration.
  bool explore(Work& w);  // false: refused (refusal_ set)
  bool step(Work& w, bool* ended);
  bool alu(Work& w, const Insn& n);
  bool jump(Work& w, const Insn& n, bool* ended);
  bool call_helper(Work& w, uint32_t id);
  bool call_local(Work& w, const Insn& n);
  bool exit(Work& w, bool* ended);
  bool load(Work& w, const Insn& n);
  bool store(Work& w, const Insn& n);
  bool atomic(Work& w, const Insn& n);

  // Memory: the region a pointer may reach and the stack's bytes.
  bool check_region(Work& w, unsigned regno, const Reg& p, int64_t lo, int64_t hi, bool write, const Access& what);
  bool stack_read(Work& w, const Reg& p, int16_t off, unsigned size, Reg* out, const Access& what);
  bool stack_write(Work& w, const Reg& p, int16_t off, unsigned size, const Reg* value, const Scalar* imm);
  bool helper_mem(Work& w, unsigned regno, uint64_t min_size, uint64_t max_size, bool write, const char* what);

  bool need_init(Work& w, unsigned r);
  bool fail(const Work& w, const std::string& why, Errc code = Errc::invalid_argument);
  void end_path(Node* n);
  bool covers(const State& old, const State& cur, uint32_t pc, bool exact) const;
  bool reg_covers(const Reg& o, const Reg& n, IdMap& ids, bool exact) const;
  uint32_t new_id() { return next_id_++; }
  void mark_nullness(State& st, uint32_t id, bool is_null);
  void narrow_linked(State& st, const Reg& r);
  void drop_frame_pointers(State& st, size_t frame);

  std::string reg_str(const Reg& r) const;
  std::string state_str(const State& st) const;
  std::string path_str(const Path& p, uint32_t pc) const;
  std::string where(uint32_t pc) const;
  void log(const std::string& s) {
    if (log_.size() < env_.log_limit) log_ += s;
    else log_dropped_ += s.size();
  }

  std::span<const Insn> p_;
  const VerifyEnv& env_;
  std::vector<uint32_t> func_of_;   // instruction -> index in funcs_
  std::vector<uint32_t> funcs_;     // first instruction of each function, sorted
  std::vector<uint16_t> live_;      // registers live into each instruction (bit r)
  std::vector<bool> prune_;         // jump targets: where states are stored and compared
  std::vector<int> ref_at_;         // lddw -> index in env_.refs, or -1
  std::deque<Node> nodes_;
  struct Stored {
    State st;
    Node* node;
  };
  std::vector<std::vector<Stored>> visited_;
  std::vector<Work> stack_;
  Proof proof_;
  std::string log_;
  size_t log_dropped_ = 0;
  uint32_t next_id_ = 1;
  uint64_t stored_total_ = 0;
  Refusal refusal_{Errc::invalid_argument, {}};
};

constexpr uint32_t kMaxStoredPerInsn = 256;
constexpr uint64_t kMaxStoredTotal = 200'000;
constexpr uint32_t kStoreEvery = 4;  // store a state at most every few instructions of a path

// ---- static analysis ----------------------------------------------------------------------

bool is_cond_jump(const Insn& n) {
  return is_jmp(n.code) && n.code != kJaOp && n.code != kJa32Op && n.code != kExitOp && n.code != kCallOp &&
         n.code != kCallxOp;
}

Result<void> Verifier::functions() {
  const uint32_t n = static_cast<uint32_t>(p_.size());
  funcs_.push_back(0);
  for (uint32_t i = 0; i < n; ++i) {
    const Insn& x = p_[i];
    if (x.code == kCallOp && x.src == kCallLocal) {
      const int64_t t = static_cast<int64_t>(i) + 1 + x.imm;
      if (t == 0)
        return make_error(Errc::invalid_argument,
                          fmt::format("insn {}: {}\n{}call of insn 0, the program itself: recursion is not allowed", i,
                                      disassemble_insn(p_, i), where(i)));
      funcs_.push_back(static_cast<uint32_t>(t));
    }
    if (x.code == kLddw) ++i;
  }
  std::sort(funcs_.begin(), funcs_.end());
  funcs_.erase(std::unique(funcs_.begin(), funcs_.end()), funcs_.end());
  func_of_.assign(n, 0);
  for (uint32_t f = 0; f < funcs_.size(); ++f) {
    const uint32_t end = f + 1 < funcs_.size() ? funcs_[f + 1] : n;
    for (uint32_t i = funcs_[f]; i < end; ++i) func_of_[i] = f;
  }
  prune_.assign(n, false);
  for (uint32_t i = 0; i < n; ++i) {
    const Insn& x = p_[i];
    if (x.code == kLddw) {
      ++i;
      continue;
    }
    const bool jumps = is_cond_jump(x) || x.code == kJaOp || x.code == kJa32Op;
    if (jumps) {
      const uint32_t t = static_cast<uint32_t>(jump_target(i, x));
      if (func_of_[t] != func_of_[i])
        return make_error(Errc::invalid_argument,
                          fmt::format("insn {}: {}\n{}jump from the function at insn {} into the function at insn {}", i,
                                      disassemble_insn(p_, i), where(i), funcs_[func_of_[i]], funcs_[func_of_[t]]));
      prune_[t] = true;
    }
    // The last instruction of a function may not fall into the next one.
    const uint32_t last = func_of_[i] + 1 < funcs_.size() ? funcs_[func_of_[i] + 1] - 1 : n - 1;
    if (i == last && x.code != kExitOp && x.code != kJaOp && x.code != kJa32Op)
      return make_error(Errc::invalid_argument,
                        fmt::format("insn {}: {}\n{}the function at insn {} falls through into the function at insn {}",
                                    i, disassemble_insn(p_, i), where(i), funcs_[func_of_[i]], i + 1));
  }
  // A lddw's second slot at a function's end is checked by its first slot's successor.
  for (uint32_t i = 0; i + 1 < n; ++i)
    if (p_[i].code == kLddw && func_of_[i + 1] != func_of_[i])
      return make_error(Errc::invalid_argument, fmt::format("insn {}: lddw split between two functions", i));
  return {};
}

uint32_t Verifier::uses(uint32_t pc) const {
  const Insn& n = p_[pc];
  auto bit = [](unsigned r) { return uint32_t(1) << r; };
  switch (cls(n.code)) {
    case kAlu:
    case kAlu64:
      if (alu_op(n.code) == kMov) return src_bit(n.code) == kX ? bit(n.src) : 0;
      return bit(n.dst) | (src_bit(n.code) == kX ? bit(n.src) : 0);
    case kLd: return 0;
    case kLdx: return bit(n.src);
    case kSt: return bit(n.dst);
    case kStx:
      if (mode(n.code) == kAtomic && n.imm == kCmpxchg) return bit(n.dst) | bit(n.src) | bit(0);
      return bit(n.dst) | bit(n.src);
    default: break;
  }
  if (n.code == kExitOp) return bit(0);
  if (n.code == kCallOp && n.src == kCallHelper) {
    uint32_t u = 0;
    const HelperInfo* h = env_.helpers->find(static_cast<uint32_t>(n.imm));  // there (check_program)
    for (unsigned a = 0; a < 5 && h->proto.args[a] != Arg::none; ++a) u |= bit(a + 1);
    return u;
  }
  if (n.code == kCallOp || n.code == kCallxOp) return 0x3e | (n.code == kCallxOp ? bit(n.dst) : 0);
  if (n.code == kJaOp || n.code == kJa32Op) return 0;
  return bit(n.dst) | (src_bit(n.code) == kX ? bit(n.src) : 0);
}

uint32_t Verifier::defs(uint32_t pc) const {
  const Insn& n = p_[pc];
  auto bit = [](unsigned r) { return uint32_t(1) << r; };
  switch (cls(n.code)) {
    case kAlu:
    case kAlu64:
    case kLd:
    case kLdx: return bit(n.dst);
    case kStx:
      if (mode(n.code) != kAtomic) return 0;
      if (n.imm == kCmpxchg) return bit(0);
      return (n.imm & kFetch) ? bit(n.src) : 0;
    default: break;
  }
  if (n.code == kCallOp || n.code == kCallxOp) return 0x3f;
  return 0;
}

// Registers live into each instruction: read on some path before being written. A
// register dead at a prune point cannot matter to what follows, so states that differ
// only there are the same state.
void Verifier::liveness() {
  const uint32_t n = static_cast<uint32_t>(p_.size());
  std::vector<uint32_t> use(n), def(n);
  for (uint32_t i = 0; i < n; ++i) use[i] = uses(i), def[i] = defs(i);
  live_.assign(n, 0);
  bool changed = true;
  while (changed) {
    changed = false;
    for (uint32_t k = n; k-- > 0;) {
      const Insn& x = p_[k];
      if (k > 0 && p_[k - 1].code == kLddw) continue;  // a second slot
      uint32_t out = 0;
      if (x.code == kExitOp) {
        out = 0;
      } else if (x.code == kJaOp || x.code == kJa32Op) {
        out = live_[static_cast<uint32_t>(jump_target(k, x))];
      } else {
        const uint32_t next = k + (x.code == kLddw ? 2 : 1);
        if (next < n) out = live_[next];
        if (is_cond_jump(x)) out |= live_[static_cast<uint32_t>(jump_target(k, x))];
        if (x.code == kCallOp && x.src == kCallLocal) out &= ~uint32_t(0x3f);
      }
      const uint16_t in = static_cast<uint16_t>((use[k] | (out & ~def[k])) & 0x3ff);
      if (in != live_[k]) {
        live_[k] = in;
        changed = true;
      }
    }
  }
}

// ---- messages ----------------------------------------------------------------------------

std::string Verifier::where(uint32_t pc) const {
  const LineInfo* best = nullptr;
  for (const LineInfo& l : env_.lines) {
    if (l.insn > pc) break;
    best = &l;
  }
  if (!best || best->line == 0) return {};
  return fmt::format("  at {}:{}: {}\n", best->file, best->line, best->text);
}

std::string Verifier::reg_str(const Reg& r) const {
  auto map_name = [&](uint32_t m) { return m < env_.maps.size() ? env_.maps[m].name : fmt::format("#{}", m); };
  switch (r.kind) {
    case Kind::not_init: return "not_init";
    case Kind::released: return "released";
    case Kind::scalar: return r.v.is_const() ? r.v.str() : fmt::format("scalar({})", r.v.str());
    case Kind::ctx: return "ctx" + offset_str(r.v);
    case Kind::stack: return fmt::format("fp{}{}", r.frame, offset_str(r.v));
    case Kind::map: return fmt::format("map({})", map_name(r.map));
    case Kind::map_value: return fmt::format("map_value({}){}", map_name(r.map), offset_str(r.v));
    case Kind::map_value_or_null:
      return fmt::format("map_value_or_null({}){} id={}", map_name(r.map), offset_str(r.v), r.id);
    case Kind::mem: return fmt::format("mem({} bytes){}", r.mem_size, offset_str(r.v));
    case Kind::mem_or_null: return fmt::format("mem_or_null({} bytes){} id={}", r.mem_size, offset_str(r.v), r.id);
  }
  return "?";
}

std::string Verifier::state_str(const State& st) const {
  std::string out;
  for (size_t f = st.frames.size(); f-- > 0;) {
    const Frame& fr = st.frames[f];
    std::string line;
    for (unsigned r = 0; r < kNumRegs; ++r)
      if (fr.r[r].kind != Kind::not_init) line += fmt::format(" r{}={}", r, reg_str(fr.r[r]));
    for (unsigned slot = 0; slot < kStackSize / 8; ++slot) {
      const uint8_t* b = &fr.bytes[slot * 8];
      if (std::all_of(b, b + 8, [](uint8_t x) { return x == kInvalid; })) continue;
      const int off = static_cast<int>(slot * 8) - static_cast<int>(kStackSize);
      if (const Reg* s = fr.spill(slot); s && std::all_of(b, b + 8, [](uint8_t x) { return x == kSpill; })) {
        line += fmt::format(" fp{}={}", off, reg_str(*s));
        continue;
      }
      std::string bytes;
      for (int k = 0; k < 8; ++k) bytes += "?mzs"[b[k]];
      line += fmt::format(" fp{}={}", off, bytes);
    }
    if (f + 1 == st.frames.size()) out += "  state:" + line;
    else out += fmt::format("\n  caller (function at insn {}):{}", fr.func, line);
    if (f > 0) out += fmt::format("\n  (in the function at insn {}, called at insn {})", fr.func, fr.callsite);
  }
  for (const LiveRef& r : st.refs) out += fmt::format("\n  ring buffer record reserved at insn {} (ref {}) not yet released", r.insn, r.ref);
  return out;
}

std::string Verifier::path_str(const Path& p, uint32_t pc) const {
  std::vector<const PathEdge*> edges;
  for (const PathEdge* e = p.get(); e; e = e->parent.get()) edges.push_back(e);
  std::reverse(edges.begin(), edges.end());
  constexpr size_t kShown = 24;
  std::string out = "  path:";
  uint32_t from = 0;
  size_t first = 0;
  if (edges.size() > kShown) {
    first = edges.size() - kShown;
    out += fmt::format(" ({} earlier branches)", first);
    from = edges[first - 1]->to;
  }
  auto seg = [](uint32_t a, uint32_t b) { return a == b ? fmt::format("{}", a) : fmt::format("{}..{}", a, b); };
  for (size_t i = first; i < edges.size(); ++i) {
    const PathEdge* e = edges[i];
    out += fmt::format(" {} ({}) ->", seg(from, e->from), e->how);
    from = e->to;
  }
  out += " " + seg(from, pc);
  return out;
}

bool Verifier::fail(const Work& w, const std::string& why, Errc code) {
  refusal_.code = code;
  refusal_.msg = fmt::format("insn {}: {}\n{}  {}\n{}\n{}", w.pc, disassemble_insn(p_, w.pc), where(w.pc), why,
                             state_str(w.st), path_str(w.path, w.pc));
  return false;
}

bool Verifier::need_init(Work& w, unsigned r) {
  const Reg& x = w.st.reg(r);
  if (x.kind == Kind::not_init) return fail(w, fmt::format("r{} is read but no instruction on this path wrote it", r));
  if (x.kind == Kind::released)
    return fail(w, fmt::format("r{} held a ring buffer record that was submitted or discarded: it may not be used", r));
  return true;
}

// ---- pruning -------------------------------------------------------------------------------

bool Verifier::reg_covers(const Reg& o, const Reg& n, IdMap& ids, bool exact) const {
  if (o.kind == Kind::not_init) return !exact || n.kind == Kind::not_init;
  if (o.kind != n.kind) return false;
  switch (o.kind) {
    case Kind::scalar:
      if (exact ? !(o.v == n.v) : !o.v.contains(n.v)) return false;
      return o.id == 0 || ids.check(o.id, n.id);
    case Kind::released: return true;
    case Kind::ctx:
    case Kind::stack:
    case Kind::map:
    case Kind::map_value:
    case Kind::mem:
      if (o.frame != n.frame || o.map != n.map || o.mem_size != n.mem_size) return false;
      if (o.ref != n.ref && !ids.check(o.ref | 0x80000000u, n.ref | 0x80000000u)) return false;
      return exact ? o.v == n.v : o.v.contains(n.v);
    case Kind::map_value_or_null:
    case Kind::mem_or_null:
      if (o.map != n.map || o.mem_size != n.mem_size || !(o.v == n.v)) return false;
      if (o.ref != n.ref && !ids.check(o.ref | 0x80000000u, n.ref | 0x80000000u)) return false;
      return ids.check(o.id, n.id);
    default: return false;
  }
}

// Whether every run from `cur` at pc is a run from `old` (already proven safe), as far
// as anything read later can tell. `exact`: the states are the same (loop detection).
bool Verifier::covers(const State& old, const State& cur, uint32_t pc, bool exact) const {
  if (old.frames.size() != cur.frames.size() || old.refs.size() != cur.refs.size()) return false;
  IdMap ids;
  for (size_t f = 0; f < old.frames.size(); ++f) {
    const Frame& of = old.frames[f];
    const Frame& nf = cur.frames[f];
    if (of.callsite != nf.callsite || of.func != nf.func) return false;
    // Registers that matter: those live here (current frame); in a caller's frame,
    // the callee-saved ones live where the call returns.
    uint32_t live = 0;
    if (f + 1 == old.frames.size()) live = live_[pc];
    else live = live_[old.frames[f + 1].callsite + 1] & 0x3c0;
    for (unsigned r = 0; r < kFp; ++r) {
      if (!(live & (1u << r))) continue;
      if (!reg_covers(of.r[r], nf.r[r], ids, exact)) return false;
    }
    for (unsigned i = 0; i < kStackSize; ++i) {
      const uint8_t o = of.bytes[i], n = nf.bytes[i];
      if (exact && o != n) return false;
      switch (o) {
        case kInvalid: break;
        case kMisc:
          if (n == kInvalid) return false;
          break;
        case kZero:
          if (n != kZero) return false;
          break;
        case kSpill:
          if (n != kSpill) return false;
          if (i % 8 == 0) {
            const Reg* a = of.spill(i / 8);
            const Reg* b = nf.spill(i / 8);
            if (a && (!b || !reg_covers(*a, *b, ids, exact))) return false;
          }
          break;
      }
    }
  }
  for (size_t i = 0; i < old.refs.size(); ++i)
    if (!ids.check(old.refs[i].ref | 0x80000000u, cur.refs[i].ref | 0x80000000u)) return false;
  return true;
}

void Verifier::end_path(Node* n) {
  while (n && --n->branches == 0) n = n->parent;
}

// ---- the walk ----------------------------------------------------------------------------

bool Verifier::explore(Work& w) {
  for (;;) {
    if (++proof_.insns_processed > env_.max_insns)
      return fail(w,
                  fmt::format("the program is too complex to verify: {} instructions processed over all paths (a "
                              "loop the verifier cannot prove bounded, or too many paths)",
                              env_.max_insns),
                  Errc::too_big);
    const uint32_t pc = w.pc;
    if (prune_[pc]) {
      auto& seen = visited_[pc];
      for (const Stored& s : seen) {
        const bool done = s.node->branches == 0;
        if (done && covers(s.st, w.st, pc, false)) {
          ++proof_.pruned;
          if (env_.log_level >= 2) log(fmt::format("{}: safe (a state already proven from here covers this one)\n", pc));
          end_path(w.node);
          return true;
        }
        if (!done && covers(s.st, w.st, pc, true))
          return fail(w, "infinite loop: this path came back here in the same state (no loop variable changed)");
      }
      if (w.since_store >= kStoreEvery && seen.size() < kMaxStoredPerInsn && stored_total_ < kMaxStoredTotal) {
        Node& nn = nodes_.emplace_back();
        nn.parent = w.node;
        w.node = &nn;
        seen.push_back({w.st, &nn});
        ++stored_total_;
        proof_.peak_states_at_insn = std::max(proof_.peak_states_at_insn, static_cast<uint32_t>(seen.size()));
        w.since_store = 0;
      }
    }
    ++w.since_store;
    proof_.insn[pc] |= Proof::kReached;
    bool ended = false;
    if (!step(w, &ended)) return false;
    if (ended) {
      end_path(w.node);
      return true;
    }
  }
}

bool Verifier::step(Work& w, bool* ended) {
  const uint32_t pc = w.pc;
  const Insn& n = p_[pc];
  if (env_.log_level >= 2) log(fmt::format("{}: {}\n", pc, disassemble_insn(p_, pc)));
  bool ok = true;
  switch (cls(n.code)) {
    case kAlu:
    case kAlu64: ok = alu(w, n); break;
    case kJmp:
    case kJmp32: return jump(w, n, ended);
    case kLd: {
      Reg r;
      const int ri = ref_at_[pc];
      if (ri < 0) {
        r = Reg::scalar(Scalar::constant(imm64(p_, pc)));
      } else {
        const MapRef& ref = env_.refs[static_cast<size_t>(ri)];
        if (ref.map >= env_.maps.size()) return fail(w, fmt::format("names map {} of {}", ref.map, env_.maps.size()));
        r = Reg::pointer(ref.value ? Kind::map_value : Kind::map, Scalar::constant(ref.value ? ref.offset : 0));
        r.map = ref.map;
        if (ref.value && ref.offset > env_.maps[ref.map].value_size)
          return fail(w, fmt::format("offset {} is past the end of '{}' ({} bytes)", ref.offset,
                                     env_.maps[ref.map].name, env_.maps[ref.map].value_size));
      }
      w.st.reg(n.dst) = r;
      w.pc += 2;
      if (env_.log_level >= 2) log(fmt::format("    r{}={}\n", n.dst, reg_str(r)));
      return true;
    }
    case kLdx: ok = load(w, n); break;
    case kSt:
    case kStx: ok = mode(n.code) == kAtomic ? atomic(w, n) : store(w, n); break;
  }
  if (!ok) return false;
  if (env_.log_level >= 2 && (is_alu(n.code) || cls(n.code) == kLdx))
    log(fmt::format("    r{}={}\n", n.dst, reg_str(w.st.reg(n.dst))));
  ++w.pc;
  return true;
}

bool may_be(const Scalar& s, uint64_t x) {
  return s.umin <= x && x <= s.umax && s.smin <= static_cast<int64_t>(x) && static_cast<int64_t>(x) <= s.smax &&
         (x & ~s.t.mask) == s.t.value;
}

bool Verifier::alu(Work& w, const Insn& n) {
  const bool is64 = cls(n.code) == kAlu64;
  const uint8_t o = alu_op(n.code);
  const bool x = src_bit(n.code) == kX;
  Reg& d = w.st.reg(n.dst);
  if (o == kEnd || o == kNeg) {
    if (!need_init(w, n.dst)) return false;
    if (d.kind != Kind::scalar)
      return fail(w, fmt::format("r{} is a pointer ({}): {} applies to numbers only", n.dst, reg_str(d),
                                 o == kNeg ? "negation" : "a byte swap"));
    d.v = o == kNeg ? Scalar::alu(kNeg, 0, is64, d.v, d.v) : Scalar::byte_swap(d.v, n.imm, is64 || src_bit(n.code) == kToBe);
    d.id = 0;
    return true;
  }
  Reg s;
  if (x) {
    if (!need_init(w, n.src)) return false;
    s = w.st.reg(n.src);
  } else {
    s = Reg::scalar(Scalar::constant(is64 ? static_cast<uint64_t>(static_cast<int64_t>(n.imm))
                                          : static_cast<uint32_t>(n.imm)));
  }
  if (o == kMov) {
    if (x && n.off != 0) {
      if (s.kind != Kind::scalar)
        return fail(w, fmt::format("r{} is a pointer ({}): sign extension applies to numbers only", n.src, reg_str(s)));
      d = Reg::scalar(Scalar::sign_extend(s.v, n.off, is64));
      return true;
    }
    if (!is64) {  // the low half of anything is a number
      d = Reg::scalar(s.kind == Kind::scalar ? s.v.low32() : Scalar::of_size(4));
      return true;
    }
    if (x && s.kind == Kind::scalar && !s.v.is_const()) {
      // A copy: a branch that narrows one narrows the other.
      Reg& src = w.st.reg(n.src);
      if (src.id == 0) src.id = new_id();
      s.id = src.id;
    }
    d = s;
    return true;
  }
  if (!need_init(w, n.dst)) return false;
  if (o == kDiv || o == kMod) {
    const Scalar dv = s.kind == Kind::scalar ? (is64 ? s.v : s.v.low32()) : Scalar::unknown();
    if (may_be(dv, 0)) proof_.insn[w.pc] &= static_cast<uint8_t>(~Proof::kDivisorNonZero);
    if (n.off == 1 && may_be(dv, is64 ? ~uint64_t(0) : 0xffffffffu))
      proof_.insn[w.pc] &= static_cast<uint8_t>(~Proof::kNoOverflowDiv);
  }
  if (d.kind == Kind::scalar && s.kind == Kind::scalar) {
    d.v = Scalar::alu(o, n.off, is64, d.v, s.v);
    d.id = 0;
    return true;
  }
  // Pointer arithmetic: pointer +- number, number + pointer, pointer - pointer.
  const char* opname = alu_name(o);  // not end or neg: handled above
  const Reg& p = is_pointer(d.kind) ? d : s;
  if (!is64) return fail(w, fmt::format("32-bit arithmetic on a pointer ({}) is not allowed", reg_str(p)));
  if (o != kAdd && o != kSub)
    return fail(w, fmt::format("{} on a pointer ({}) is not allowed: only 64-bit add and sub of a number", opname,
                               reg_str(p)));
  if (maybe_null(p.kind))
    return fail(w, fmt::format("arithmetic on {}, which may be NULL: compare it with 0 first", reg_str(p)));
  if (p.kind == Kind::map)
    return fail(w, fmt::format("arithmetic on a map ({}): a map is only passed to helpers", reg_str(p)));
  if (is_pointer(d.kind) && is_pointer(s.kind)) {
    if (o != kSub || d.kind != s.kind || d.frame != s.frame || d.map != s.map || d.ref != s.ref)
      return fail(w, fmt::format("{} {} {}: only the difference of two pointers into the same memory is allowed",
                                 reg_str(d), o == kAdd ? "+" : "-", reg_str(s)));
    d = Reg::scalar(Scalar::alu(kSub, 0, true, d.v, s.v));
    return true;
  }
  if (is_pointer(s.kind) && o == kSub)
    return fail(w, fmt::format("number - pointer ({}) is not allowed", reg_str(s)));
  const Reg& num = is_pointer(d.kind) ? s : d;
  Reg r = p;
  r.v = Scalar::alu(o, 0, true, p.v, num.v);
  if (r.v.smin < -kMaxOffset || r.v.smax > kMaxOffset) {
    const std::string which = x ? fmt::format("r{}", is_pointer(d.kind) ? n.src : n.dst) : "the constant";
    return fail(w, fmt::format("{} {} {} gives an offset in [{}, {}], beyond +-2^29: {} is not bounded (compare it "
                               "with limits first)",
                               reg_str(p), o == kAdd ? "+" : "-", num.kind == Kind::scalar ? num.v.str() : "?",
                               r.v.smin, r.v.smax, which));
  }
  r.id = 0;
  d = r;
  return true;
}

// Narrowing reached a register with an id: every copy of it learns the same.
void Verifier::narrow_linked(State& st, const Reg& r) {
  if (r.kind != Kind::scalar || r.id == 0) return;
  st.each_reg([&](Reg& x) {
    if (x.kind == Kind::scalar && x.id == r.id) x.v = r.v;
  });
}

void Verifier::mark_nullness(State& st, uint32_t id, bool is_null) {
  uint32_t ref = 0;
  st.each_reg([&](Reg& x) {
    if (!maybe_null(x.kind) || x.id != id) return;
    if (is_null) {
      ref = x.ref ? x.ref : ref;
      x = Reg::scalar(Scalar::constant(0));
    } else {
      x.kind = x.kind == Kind::map_value_or_null ? Kind::map_value : Kind::mem;
      x.id = 0;
    }
  });
  if (is_null && ref) {  // nothing was reserved: nothing to release
    st.refs.erase(std::remove_if(st.refs.begin(), st.refs.end(), [&](const LiveRef& l) { return l.ref == ref; }),
                  st.refs.end());
  }
}

bool Verifier::jump(Work& w, const Insn& n, bool* ended) {
  const uint32_t pc = w.pc;
  if (n.code == kExitOp) return exit(w, ended);
  if (n.code == kCallOp) {
    if (n.src == kCallLocal) return call_local(w, n);
    if (!call_helper(w, static_cast<uint32_t>(n.imm))) return false;
    ++w.pc;
    return true;
  }
  if (n.code == kCallxOp) {
    if (!need_init(w, n.dst)) return false;
    const Reg& r = w.st.reg(n.dst);
    const HelperInfo* h = r.kind == Kind::scalar && r.v.is_const() && env_.helpers
                              ? env_.helpers->find(static_cast<uint32_t>(r.v.value()))
                              : nullptr;
    if (!h || !h->fn)
      return fail(w, fmt::format("callx r{}: r{} is {}, not the number of a helper", n.dst, n.dst, reg_str(r)));
    if (h->id == kTailCallHelper)
      return fail(w, fmt::format("callx r{}: bpf_tail_call ({}) is called by number only (call {})", n.dst,
                                 kTailCallHelper, kTailCallHelper));
    const int32_t id = static_cast<int32_t>(h->id);
    if (proof_.callx[pc] >= 0 && proof_.callx[pc] != id)
      return fail(w, fmt::format("callx r{} calls helper {} here and helper {} on another path", n.dst, id,
                                 proof_.callx[pc]));
    proof_.callx[pc] = id;
    if (!call_helper(w, h->id)) return false;
    ++w.pc;
    return true;
  }
  if (n.code == kJaOp || n.code == kJa32Op) {
    w.pc = static_cast<uint32_t>(jump_target(pc, n));
    w.path = std::make_shared<const PathEdge>(PathEdge{pc, w.pc, "ja", w.path});
    return true;
  }
  const bool is64 = cls(n.code) == kJmp;
  const uint8_t o = jmp_op(n.code);
  const bool x = src_bit(n.code) == kX;
  if (!need_init(w, n.dst) || (x && !need_init(w, n.src))) return false;
  const uint32_t taken_pc = static_cast<uint32_t>(jump_target(pc, n));
  Reg d = w.st.reg(n.dst);
  Reg s = x ? w.st.reg(n.src)
            : Reg::scalar(Scalar::constant(is64 ? static_cast<uint64_t>(static_cast<int64_t>(n.imm))
                                                : static_cast<uint32_t>(n.imm)));

  // Two successors: the taken one is pushed, the fall-through continued.
  const std::string mnemonic = std::string(jmp_name(o)) + (is64 ? "" : "32");
  auto fork = [&](State taken, State fall, std::string how_taken, std::string how_fall) {
    ++w.node->branches;
    Work t;
    t.st = std::move(taken);
    t.pc = taken_pc;
    t.node = w.node;
    t.path = std::make_shared<const PathEdge>(PathEdge{pc, taken_pc, how_taken, w.path});
    t.since_store = w.since_store;
    stack_.push_back(std::move(t));
    w.st = std::move(fall);
    w.path = std::make_shared<const PathEdge>(PathEdge{pc, pc + 1, how_fall, w.path});
    w.pc = pc + 1;
    if (env_.log_level >= 2) log(fmt::format("    both ways; falling through with\n{}\n", state_str(w.st)));
  };
  auto one_way = [&](bool taken) {
    w.pc = taken ? taken_pc : pc + 1;
    if (env_.log_level >= 2) log(fmt::format("    always {}\n", taken ? "taken" : "falls through"));
  };

  if (is_pointer(d.kind) || is_pointer(s.kind)) {
    if (!is64) return fail(w, "a 32-bit comparison of a pointer: pointers are compared as 64-bit values");
    const bool eq = o == kJeq || o == kJne;
    // pointer ==/!= 0
    const Reg& p = is_pointer(d.kind) ? d : s;
    const Reg& other = is_pointer(d.kind) ? s : d;
    if (other.kind == Kind::scalar) {
      if (!(other.v.is_const() && other.v.value() == 0) || !eq)
        return fail(w, fmt::format("comparison of a pointer ({}) with a number ({}): a pointer is compared only "
                                   "with 0 (==, !=) or with a pointer into the same memory",
                                   reg_str(p), reg_str(other)));
      if (!maybe_null(p.kind)) {  // never NULL
        one_way(o == kJne);
        return true;
      }
      State null_st = w.st, nonnull_st = w.st;
      mark_nullness(null_st, p.id, true);
      mark_nullness(nonnull_st, p.id, false);
      if (o == kJeq) fork(std::move(null_st), std::move(nonnull_st), "== NULL", "!= NULL");
      else fork(std::move(nonnull_st), std::move(null_st), "!= NULL", "== NULL");
      return true;
    }
    if (d.kind != s.kind || d.frame != s.frame || d.map != s.map || d.ref != s.ref || maybe_null(d.kind))
      return fail(w, fmt::format("comparison of {} with {}: pointers are compared only with pointers into the same "
                                 "memory",
                                 reg_str(d), reg_str(s)));
    // Two pointers into one region compare as their offsets.
    const Branch b = branch_outcome(o, true, d.v, s.v);
    if (b != Branch::maybe) {
      one_way(b == Branch::always);
      return true;
    }
    fork(w.st, w.st, mnemonic + " taken", mnemonic + " not taken");
    return true;
  }
  if (d.kind != Kind::scalar || s.kind != Kind::scalar) return fail(w, "comparison of values that are not numbers");
  const Branch b = branch_outcome(o, is64, d.v, s.v);
  if (b != Branch::maybe) {
    one_way(b == Branch::always);
    return true;
  }
  State ts = w.st, fs = w.st;
  // The state on one edge: the operands narrowed by the outcome, and their copies;
  // false when the outcome is impossible.
  auto edge = [&](State& st, bool taken) {
    Scalar a = d.v, c = s.v;
    if (!narrow(o, is64, taken, a, c)) return false;
    Reg& rd = st.reg(n.dst);
    rd.v = a;
    narrow_linked(st, rd);
    if (x) {
      Reg& rs = st.reg(n.src);
      rs.v = c;
      narrow_linked(st, rs);
    }
    return true;
  };
  const bool t_ok = edge(ts, true), f_ok = edge(fs, false);
  if (t_ok && f_ok) {
    fork(std::move(ts), std::move(fs), mnemonic + " taken", mnemonic + " not taken");
  } else {
    w.st = std::move(t_ok ? ts : fs);
    one_way(t_ok);
  }
  return true;
}

bool Verifier::call_local(Work& w, const Insn& n) {
  const uint32_t pc = w.pc;
  const uint32_t target = static_cast<uint32_t>(static_cast<int64_t>(pc) + 1 + n.imm);
  if (w.st.frames.size() >= kMaxFrames)
    return fail(w, fmt::format("calling the function at insn {} would nest {} frames: at most {} (the main "
                               "program and {} nested calls)",
                               target, w.st.frames.size() + 1, kMaxFrames, kMaxFrames - 1));
  Frame nf;
  for (unsigned r = 1; r <= 5; ++r) nf.r[r] = w.st.reg(r);
  nf.r[kFp] = Reg::pointer(Kind::stack);
  nf.r[kFp].frame = static_cast<uint8_t>(w.st.frames.size());
  nf.callsite = pc;
  nf.func = target;
  w.st.frames.push_back(std::move(nf));
  proof_.frames = std::max(proof_.frames, static_cast<uint32_t>(w.st.frames.size()));
  w.path = std::make_shared<const PathEdge>(PathEdge{pc, target, "call", w.path});
  w.pc = target;
  return true;
}

// Stack pointers into a frame that no longer exists become numbers: they can no longer
// be used to reach memory.
void Verifier::drop_frame_pointers(State& st, size_t frame) {
  st.each_reg([&](Reg& x) {
    if (x.kind == Kind::stack && x.frame >= frame) x = Reg::scalar(Scalar::unknown());
  });
}

bool Verifier::exit(Work& w, bool* ended) {
  if (!need_init(w, 0)) return false;
  if (w.st.frames.size() > 1) {
    Reg r0 = w.st.reg(0);
    const uint32_t callsite = w.st.cur().callsite;
    const size_t gone = w.st.frames.size() - 1;
    w.st.frames.pop_back();
    w.st.reg(0) = r0;
    for (unsigned r = 1; r <= 5; ++r) w.st.reg(r) = Reg{};
    drop_frame_pointers(w.st, gone);
    w.path = std::make_shared<const PathEdge>(PathEdge{w.pc, callsite + 1, "return", w.path});
    w.pc = callsite + 1;
    return true;
  }
  const Reg& r0 = w.st.reg(0);
  if (r0.kind != Kind::scalar)
    return fail(w, fmt::format("r0 is {} at the program's exit: a program returns a number", reg_str(r0)));
  if (!w.st.refs.empty())
    return fail(w, fmt::format("the ring buffer record reserved at insn {} is neither submitted nor discarded on this "
                               "path",
                               w.st.refs.front().insn));
  if (env_.log_level >= 2) log(fmt::format("    exit: r0={}\n", reg_str(r0)));
  *ended = true;
  return true;
}

// ---- memory ------------------------------------------------------------------------------

// [lo, hi) relative to the pointer's base is inside what `p` may reach (`regno` names it).
bool Verifier::check_region(Work& w, unsigned regno, const Reg& p, int64_t lo, int64_t hi, bool write,
                            const Access& what) {
  const auto r = [regno] { return regno < kNumRegs ? fmt::format("r{}", regno) : std::string("the pointer"); };
  switch (p.kind) {
    case Kind::not_init:
    case Kind::released: return need_init(w, regno);
    case Kind::scalar:
      if (p.v.is_const() && p.v.value() == 0)
        return fail(w, fmt::format("{} through {} = NULL", what.str(), r()));
      return fail(w, fmt::format("{} through {} = {}: a number, not a pointer", what.str(), r(), reg_str(p)));
    case Kind::map_value_or_null:
    case Kind::mem_or_null:
      return fail(w, fmt::format("{} through {} = {}, which may be NULL: compare it with 0 first", what.str(), r(),
                                 reg_str(p)));
    case Kind::map:
      return fail(w, fmt::format("{} through {} = {}: a map is passed to helpers, never read or written directly",
                                 what.str(), r(), reg_str(p)));
    case Kind::ctx: {
      if (!p.v.is_const())
        return fail(w, fmt::format("{} at a variable offset ({}) of the context: context offsets must be constant",
                                   what.str(), reg_str(p)));
      if (lo < 0 || hi > static_cast<int64_t>(env_.ctx.size))
        return fail(w, fmt::format("{} at offset {} of the context, outside it: {} has {} bytes", what.str(), lo,
                                   env_.ctx.what.empty() ? "it" : env_.ctx.what, env_.ctx.size));
      if (write && !env_.ctx.writable)
        return fail(w, fmt::format("{} into the context ({}), which is read-only", what.str(), env_.ctx.what));
      return true;
    }
    case Kind::stack:
      if (lo < -static_cast<int64_t>(kStackSize) || hi > 0)
        return fail(w, fmt::format("{} at [{}, {}) from the frame pointer ({}): outside the {}-byte stack frame [-{}, "
                                   "0)",
                                   what.str(), lo, hi, reg_str(p), kStackSize, kStackSize));
      return true;
    case Kind::map_value: {
      const MapSpec& m = env_.maps[p.map];
      if (lo < 0 || hi > static_cast<int64_t>(m.value_size))
        return fail(w, fmt::format("{} at offset [{}, {}) of a value of map '{}' ({} bytes): outside it{}",
                                   what.str(), lo, hi, m.name, m.value_size,
                                   p.v.is_const() ? "" : fmt::format(" ({} is {})", r(), reg_str(p))));
      if (write && m.readonly) return fail(w, fmt::format("{} into '{}', which is read-only", what.str(), m.name));
      return true;
    }
    case Kind::mem:
      if (lo < 0 || hi > static_cast<int64_t>(p.mem_size))
        return fail(w, fmt::format("{} at offset [{}, {}) of a ring buffer record of {} bytes: outside it",
                                   what.str(), lo, hi, p.mem_size));
      return true;
  }
  return fail(w, "unknown pointer");
}

bool Verifier::stack_read(Work& w, const Reg& p, int16_t off, unsigned size, Reg* out, const Access& what) {
  const Frame& fr = w.st.frames[p.frame];
  const int64_t lo = p.v.smin + off + kStackSize, hi = p.v.smax + off + kStackSize + size;
  bool all_zero = true;
  for (int64_t i = lo; i < hi; ++i) {
    const uint8_t b = fr.bytes[static_cast<size_t>(i)];
    if (b == kInvalid)
      return fail(w, fmt::format("{} reads fp{}{}, a stack byte no instruction on this path wrote", what.str(),
                                 p.frame, i - static_cast<int64_t>(kStackSize)));
    if (b != kZero) all_zero = false;
  }
  if (p.v.is_const()) {
    const size_t at = static_cast<size_t>(lo);
    const Reg* s = fr.bytes[at] == kSpill ? fr.spill(static_cast<unsigned>(at / 8)) : nullptr;
    if (s && size == 8 && at % 8 == 0) {  // a fill: the spilled register as it was
      *out = *s;
      return true;
    }
    // Part of a spilled constant: those bytes of it.
    if (s && s->kind == Kind::scalar && s->v.is_const() && at / 8 == (at + size - 1) / 8) {
      const uint64_t v = s->v.value() >> (8 * (at % 8));
      *out = Reg::scalar(Scalar::constant(size == 8 ? v : v & ((uint64_t(1) << (8 * size)) - 1)));
      return true;
    }
  }
  // Anything else, part of a spilled pointer too, reads as a number: never dereferenced.
  *out = Reg::scalar(all_zero ? Scalar::constant(0) : Scalar::of_size(size));
  return true;
}

bool Verifier::stack_write(Work& w, const Reg& p, int16_t off, unsigned size, const Reg* value, const Scalar* imm) {
  Frame& fr = w.st.frames[p.frame];
  const int64_t lo = p.v.smin + off + kStackSize, hi = p.v.smax + off + kStackSize + size;
  for (int64_t slot = lo / 8; slot <= (hi - 1) / 8; ++slot) fr.drop_spill(static_cast<unsigned>(slot));
  if (!p.v.is_const()) {
    if (value && value->kind != Kind::scalar)
      return fail(w, fmt::format("a pointer ({}) stored at a variable stack offset: spills must be at a constant "
                                 "offset",
                                 reg_str(*value)));
    // Any byte in the range may have been written with anything: zeros are no longer
    // known, never-written bytes may still be unwritten.
    for (int64_t i = lo; i < hi; ++i)
      if (fr.bytes[static_cast<size_t>(i)] == kZero) fr.bytes[static_cast<size_t>(i)] = kMisc;
    return true;
  }
  const size_t at = static_cast<size_t>(lo);
  if (value && value->kind != Kind::scalar) {
    if (size != 8 || at % 8 != 0)
      return fail(w, fmt::format("a {}-byte store of a pointer ({}) at fp{}{}: pointers are spilled whole, 8 bytes "
                                 "at an 8-byte aligned offset",
                                 size, reg_str(*value), p.frame, static_cast<int64_t>(at) - static_cast<int64_t>(kStackSize)));
  }
  if (size == 8 && at % 8 == 0 && (value || imm)) {
    std::fill(fr.bytes.begin() + static_cast<long>(at), fr.bytes.begin() + static_cast<long>(at + 8), kSpill);
    Reg v = value ? *value : Reg::scalar(*imm);
    fr.set_spill(static_cast<unsigned>(at / 8), v);
    return true;
  }
  const Scalar* sv = value ? &value->v : imm;
  const bool zero = sv && sv->is_const() && (sv->value() & (size == 8 ? ~uint64_t(0) : (uint64_t(1) << (8 * size)) - 1)) == 0;
  std::fill(fr.bytes.begin() + static_cast<long>(at), fr.bytes.begin() + static_cast<long>(at + size),
            zero ? kZero : kMisc);
  return true;
}

bool Verifier::load(Work& w, const Insn& n) {
  if (!need_init(w, n.src)) return false;
  const unsigned size = size_bytes(n.code);
  const Reg p = w.st.reg(n.src);
  const Access what{"a", size, "read"};
  if (!check_region(w, n.src, p, p.v.smin + n.off, p.v.smax + n.off + size, false, what)) return false;
  Reg out;
  if (p.kind == Kind::stack) {
    if (!stack_read(w, p, n.off, size, &out, what)) return false;
  } else {
    out = Reg::scalar(Scalar::of_size(size));
  }
  if (mode(n.code) == kMemSx) {
    if (out.kind != Kind::scalar) out = Reg::scalar(Scalar::unknown());
    out = Reg::scalar(Scalar::sign_extend(out.v, static_cast<int>(8 * size), true));
  }
  w.st.reg(n.dst) = out;
  return true;
}

bool Verifier::store(Work& w, const Insn& n) {
  if (!need_init(w, n.dst)) return false;
  const bool x = cls(n.code) == kStx;
  if (x && !need_init(w, n.src)) return false;
  const unsigned size = size_bytes(n.code);
  const Reg p = w.st.reg(n.dst);
  if (!check_region(w, n.dst, p, p.v.smin + n.off, p.v.smax + n.off + size, true, Access{"a", size, "write"}))
    return false;
  if (p.kind != Kind::stack) return true;
  if (x) {
    const Reg v = w.st.reg(n.src);
    return stack_write(w, p, n.off, size, &v, nullptr);
  }
  const Scalar imm = Scalar::constant(static_cast<uint64_t>(static_cast<int64_t>(n.imm)));
  return stack_write(w, p, n.off, size, nullptr, &imm);
}

bool Verifier::atomic(Work& w, const Insn& n) {
  if (!need_init(w, n.dst) || !need_init(w, n.src)) return false;
  const unsigned size = size_bytes(n.code);
  const Reg p = w.st.reg(n.dst);
  const Reg v = w.st.reg(n.src);
  if (v.kind != Kind::scalar)
    return fail(w, fmt::format("an atomic operation with a pointer operand (r{} = {})", n.src, reg_str(v)));
  if (n.imm == kCmpxchg) {
    if (!need_init(w, 0)) return false;
    if (w.st.reg(0).kind != Kind::scalar)
      return fail(w, fmt::format("cmpxchg compares with r0 = {}, a pointer", reg_str(w.st.reg(0))));
  }
  const Access what{"an atomic", size, "update"};
  if (!check_region(w, n.dst, p, p.v.smin + n.off, p.v.smax + n.off + size, true, what)) return false;
  // Every region starts 8-byte aligned (frames 16, values 8, records 8, the context 8):
  // the offset decides alignment.
  const Scalar eff = Scalar::alu(kAdd, 0, true, p.v, Scalar::constant(static_cast<uint64_t>(static_cast<int64_t>(n.off))));
  if ((eff.t.value | eff.t.mask) & (size - 1))
    return fail(w, fmt::format("{} at offset {} ({}): not {}-byte aligned", what.str(), eff.str(), reg_str(p), size));
  if (p.kind == Kind::stack) {
    Reg old;
    if (!stack_read(w, p, n.off, size, &old, what)) return false;
    if (old.kind != Kind::scalar)
      return fail(w, fmt::format("{} of a spilled pointer ({})", what.str(), reg_str(old)));
    const Scalar any = Scalar::of_size(size);
    if (!stack_write(w, p, n.off, size, nullptr, &any)) return false;
    // What the slot holds now is unknown: not a spill of a known number.
    Frame& fr = w.st.frames[p.frame];
    const int64_t at = p.v.smin + n.off + kStackSize;
    if (size == 8 && at % 8 == 0) {
      fr.drop_spill(static_cast<unsigned>(at / 8));
    }
  }
  if (n.imm == kCmpxchg) w.st.reg(0) = Reg::scalar(Scalar::of_size(size));
  else if (n.imm & kFetch) w.st.reg(n.src) = Reg::scalar(Scalar::of_size(size));
  return true;
}

// A helper's memory argument in r`regno`: [0, max_size) from the pointer must be
// reachable, readable (initialised, on the stack) unless `write`; a write initialises
// the stack bytes it surely covers, [0, min_size).
bool Verifier::helper_mem(Work& w, unsigned regno, uint64_t min_size, uint64_t max_size, bool write,
                          const char* what) {
  if (!need_init(w, regno)) return false;
  const Reg p = w.st.reg(regno);
  const std::string desc = fmt::format("{} (r{}, {} bytes)", what, regno, max_size);
  if (!check_region(w, regno, p, p.v.smin, p.v.smax + static_cast<int64_t>(max_size), write, Access{desc.c_str()}))
    return false;
  if (p.kind == Kind::ctx && write) return fail(w, desc + ": the context is read-only");
  if (p.kind != Kind::stack || max_size == 0) return true;
  if (!write) {
    Frame& fr = w.st.frames[p.frame];
    const int64_t lo = p.v.smin + kStackSize, hi = p.v.smax + kStackSize + static_cast<int64_t>(max_size);
    for (int64_t i = lo; i < hi; ++i)
      if (fr.bytes[static_cast<size_t>(i)] == kInvalid)
        return fail(w, fmt::format("{} reads fp{}{}, a stack byte no instruction on this path wrote", desc, p.frame,
                                   i - static_cast<int64_t>(kStackSize)));
    return true;
  }
  Frame& fr = w.st.frames[p.frame];
  const int64_t lo = p.v.smin + kStackSize, hi = p.v.smax + kStackSize + static_cast<int64_t>(max_size);
  for (int64_t slot = lo / 8; slot <= (hi - 1) / 8; ++slot) fr.drop_spill(static_cast<unsigned>(slot));
  for (int64_t i = lo; i < hi; ++i)
    if (fr.bytes[static_cast<size_t>(i)] == kZero) fr.bytes[static_cast<size_t>(i)] = kMisc;
  if (p.v.is_const())
    std::fill(fr.bytes.begin() + lo, fr.bytes.begin() + lo + static_cast<int64_t>(min_size), kMisc);
  return true;
}

bool Verifier::call_helper(Work& w, uint32_t id) {
  const HelperInfo* h = env_.helpers->find(id);  // there (check_program)
  const HelperProto& pr = h->proto;
  if (id == kTailCallHelper) {
    // A tail call replaces the running program: from a BPF-to-BPF function the kernel
    // returns the target's value to that function's caller and limits each frame to 256
    // bytes for the stack the chain may hold; here tail calls are taken in the main
    // function only, so a chain holds one program's frames at a time (512 bytes each,
    // 8 deep) and nothing returns into a replaced program.
    if (w.st.frames.size() > 1)
      return fail(w, fmt::format("bpf_tail_call in a BPF-to-BPF function (frame {}): tail calls are taken only in "
                                 "the program's main function here",
                                 w.st.frames.size() - 1));
    // The replaced program cannot release what it holds (the kernel's "tail_call would
    // lead to reference leak").
    if (!w.st.refs.empty())
      return fail(w, fmt::format("bpf_tail_call with the ring buffer record reserved at insn {} not yet submitted or "
                                 "discarded: the program it jumps to could not release it",
                                 w.st.refs.front().insn));
  }
  int map = -1;
  uint64_t alloc = 0;
  uint32_t release = 0;
  for (unsigned a = 0; a < 5 && pr.args[a] != Arg::none; ++a) {
    const unsigned r = a + 1;
    const Arg kind = pr.args[a];
    if (kind == Arg::size || kind == Arg::size_or_zero) continue;  // with the memory before it
    if (!need_init(w, r)) return false;
    const Reg& x = w.st.reg(r);
    const std::string arg = fmt::format("{} argument {} (r{}, {})", h->name, a + 1, r, arg_name(kind));
    switch (kind) {
      case Arg::anything: break;
      case Arg::scalar:
        if (x.kind != Kind::scalar) return fail(w, fmt::format("{} is {}: a number is expected", arg, reg_str(x)));
        break;
      case Arg::map: {
        if (x.kind != Kind::map) return fail(w, fmt::format("{} is {}: a map is expected", arg, reg_str(x)));
        const uint32_t t = env_.maps[x.map].type;
        if (pr.map_types && (t >= 32 || !(pr.map_types & (1u << t))))
          return fail(w, fmt::format("{} is map '{}' of type {}, which {} does not take", arg, env_.maps[x.map].name,
                                     map_type_name(t), h->name));
        map = static_cast<int>(x.map);
        break;
      }
      case Arg::map_key:
      case Arg::map_value:
      case Arg::map_value_out: {
        if (map < 0) return fail(w, fmt::format("{}: no map argument before it", arg));
        const MapSpec& m = env_.maps[static_cast<size_t>(map)];
        const uint32_t n = kind == Arg::map_key ? m.key_size : m.value_size;
        // An out value is filled by the helper, except a bloom filter's, which it tests.
        const bool out = kind == Arg::map_value_out && m.type != uint32_t(MapType::bloom_filter);
        if (!helper_mem(w, r, n, n, out, arg.c_str())) return false;
        break;
      }
      case Arg::mem:
      case Arg::mem_uninit: {
        if (a + 1 >= 5 || (pr.args[a + 1] != Arg::size && pr.args[a + 1] != Arg::size_or_zero))
          return fail(w, fmt::format("{}: the prototype gives no size after it", arg));
        if (!need_init(w, r + 1)) return false;
        const Reg& sz = w.st.reg(r + 1);
        const std::string sarg = fmt::format("{} argument {} (r{}, the size)", h->name, a + 2, r + 1);
        if (sz.kind != Kind::scalar) return fail(w, fmt::format("{} is {}: a number is expected", sarg, reg_str(sz)));
        if (sz.v.smin < 0 || sz.v.umax >= static_cast<uint64_t>(kMaxOffset))
          return fail(w, fmt::format("{} is {}: not bounded; compare it with a limit first", sarg, sz.v.str()));
        if (pr.args[a + 1] == Arg::size && sz.v.umin == 0)
          return fail(w, fmt::format("{} may be 0 ({}): {} needs at least 1 byte", sarg, sz.v.str(), h->name));
        if (!helper_mem(w, r, sz.v.umin, sz.v.umax, kind == Arg::mem_uninit, arg.c_str())) return false;
        break;
      }
      case Arg::alloc_size:
        if (x.kind != Kind::scalar || !x.v.is_const())
          return fail(w, fmt::format("{} is {}: a constant size is expected", arg, reg_str(x)));
        if (x.v.value() >= static_cast<uint64_t>(kMaxOffset))
          return fail(w, fmt::format("{} is {}: too big", arg, x.v.str()));
        alloc = x.v.value();
        break;
      case Arg::ctx:
        if (x.kind != Kind::ctx || !x.v.is_const() || x.v.value() != 0)
          return fail(w, fmt::format("{} is {}: the context (r1 at entry, unmoved) is expected", arg, reg_str(x)));
        if (env_.ctx.kind == CtxKind::memory)
          return fail(w, fmt::format("{}: {} needs a tracing or uprobe context", arg, h->name));
        break;
      case Arg::ringbuf_record:
        if (x.kind == Kind::mem_or_null)
          return fail(w, fmt::format("{} is {}, which may be NULL: compare it with 0 first", arg, reg_str(x)));
        if (x.kind != Kind::mem || x.ref == 0 || !x.v.is_const() || x.v.value() != 0)
          return fail(w, fmt::format("{} is {}: a record bpf_ringbuf_reserve returned, at its start, is expected", arg,
                                     reg_str(x)));
        release = x.ref;
        break;
      case Arg::u64_out:
        if (!helper_mem(w, r, 8, 8, true, arg.c_str())) return false;
        break;
      default: break;
    }
  }
  if (release) {
    w.st.refs.erase(std::remove_if(w.st.refs.begin(), w.st.refs.end(), [&](const LiveRef& l) { return l.ref == release; }),
                    w.st.refs.end());
    w.st.each_reg([&](Reg& x) {
      if ((x.kind == Kind::mem || x.kind == Kind::mem_or_null) && x.ref == release) {
        x = Reg{};
        x.kind = Kind::released;
      }
    });
  }
  for (unsigned r = 1; r <= 5; ++r) w.st.reg(r) = Reg{};
  Reg r0;
  switch (pr.ret) {
    case Ret::scalar: r0 = Reg::scalar(Scalar::unknown()); break;
    case Ret::none: break;
    case Ret::map_value_or_null:
      if (map < 0) return fail(w, fmt::format("{} returns a map value but takes no map", h->name));
      r0 = Reg::pointer(Kind::map_value_or_null);
      r0.map = static_cast<uint32_t>(map);
      r0.id = new_id();
      break;
    case Ret::ringbuf_record_or_null:
      r0 = Reg::pointer(Kind::mem_or_null);
      r0.mem_size = static_cast<uint32_t>(alloc);
      r0.id = new_id();
      r0.ref = new_id();
      w.st.refs.push_back({r0.ref, w.pc});
      break;
  }
  w.st.reg(0) = r0;
  if (env_.log_level >= 2) log(fmt::format("    r0={}\n", reg_str(r0)));
  return true;
}

Result<Verified> Verifier::run() {
  const auto t0 = std::chrono::steady_clock::now();
  const uint32_t n = static_cast<uint32_t>(p_.size());
  UTRAMP_TRY(functions());
  liveness();
  ref_at_.assign(n, -1);
  for (size_t i = 0; i < env_.refs.size(); ++i) {
    const MapRef& r = env_.refs[i];
    if (r.insn >= n || p_[r.insn].code != kLddw)
      return make_error(Errc::invalid_argument, fmt::format("map reference at insn {}, which is not a lddw", r.insn));
    ref_at_[r.insn] = static_cast<int>(i);
  }
  proof_.insn.assign(n, Proof::kDivisorNonZero | Proof::kNoOverflowDiv);
  proof_.callx.assign(n, -1);
  for (uint32_t i = 0; i < n; ++i)
    if (func_of_[i] != 0 && p_[i].code == kExitOp) proof_.insn[i] |= Proof::kSubprogExit;
  visited_.resize(n);

  Work first;
  State& st = first.st;
  st.frames.emplace_back();
  Frame& f0 = st.frames.back();
  if (env_.ctx.kind == CtxKind::memory && env_.ctx.size == 0) {
    f0.r[1] = Reg::scalar(Scalar::constant(0));  // no memory: r1 is NULL
  } else {
    f0.r[1] = Reg::pointer(Kind::ctx);
  }
  if (env_.ctx.kind == CtxKind::memory) f0.r[2] = Reg::scalar(Scalar::constant(env_.ctx.size));
  f0.r[kFp] = Reg::pointer(Kind::stack);
  first.node = &nodes_.emplace_back();
  stack_.push_back(std::move(first));
  if (env_.log_level >= 2) log(fmt::format("context: {} ({} bytes{})\n", env_.ctx.what, env_.ctx.size, env_.ctx.writable ? ", writable" : ""));
  while (!stack_.empty()) {
    Work w = std::move(stack_.back());
    stack_.pop_back();
    if (env_.log_level >= 2 && w.path) log(fmt::format("from {} to {} ({}):\n", w.path->from, w.path->to, w.path->how));
    if (!explore(w)) {
      std::string msg = refusal_.msg;
      if (env_.log_level > 0) msg += "\nverifier log:\n" + log_;
      return make_error(refusal_.code, msg);
    }
  }
  proof_.states_stored = stored_total_;
  proof_.micros = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  Verified out;
  if (env_.log_level >= 1) {
    uint32_t reached = 0;
    for (uint8_t f : proof_.insn) reached += (f & Proof::kReached) != 0;
    log(fmt::format("accepted: {} instructions ({} reachable, {} functions), {} processed, {} states stored, {} paths "
                    "pruned, at most {} states at one instruction, {} frame(s) deep, {:.0f} us\n",
                    n, reached, funcs_.size(), proof_.insns_processed, proof_.states_stored, proof_.pruned,
                    proof_.peak_states_at_insn, proof_.frames, proof_.micros));
    if (log_dropped_) log_ += fmt::format("({} bytes of log left out)\n", log_dropped_);
    out.log = std::move(log_);
  }
  out.proof = std::move(proof_);
  return out;
}

}  // namespace

Result<Verified> verify(std::span<const Insn> insns, const VerifyEnv& env) {
  Verifier v(insns, env);
  return v.run();
}

}  // namespace utramp::ebpf
