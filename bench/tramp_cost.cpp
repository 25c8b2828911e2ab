// Per-call cost of the BPF trampolines (fentry, fexit, fmod_ret), against the same
// function with nothing attached, measured in one run.
//
// Method: tramp_target.c is compiled into one copy of a tiny non-inlined function
// (`return x + 1`) per configuration, so that each configuration has its own function:
//   plain          no site (the baseline: a plain direct call)
//   nop            -fpatchable-function-entry=5, canonicalised to one 5-byte NOP
//   floor          the site patched into `call` to a hand-written stub that saves the
//                  six argument registers and calls an empty C function (the practical
//                  floor for fentry in ../shared/ANCHORS.md)
//   fentry         one empty native program (`return 0`), signature "i32 -> i32"
//   fentry_nosig   the same without a signature: the fallback saves every argument
//                  register, al and xmm0-7
//   fexit          one empty program, "i32 -> i32"
//   fmod_ret       one program returning 0 (so the function runs), "i32 -> i32"
//   fentry_fexit   one of each
//   fentry_xN      N = 4, 16, 38 fentry programs (38: the most one function takes)
// and, for functions reached without a compiler site, whose stub and images keep every
// register (arch/image.hpp: preserve_all), pairs of copies of a body long enough for a
// relocated prologue (UTRAMP_BENCH_LOAD: `mov eax, [rip+one]; add eax, edi; ret`):
//   ld_nop                  NOP site, nothing attached
//   ld_K / pro_K            K = fentry, fexit, fmod_ret as above, on a copy with a NOP
//                           site (ld_) and on one with none (pro_: a relocated prologue)
// Each benchmark iteration makes kCallsPerIter dependent calls (acc = f(acc)) through a
// volatile function pointer, from one loop shared by every configuration. The
// configurations are registered round-robin, `--rounds` times, in an order that rotates
// each round; the summary gives medians over the rounds of the CPU time per call, of its
// difference with the plain copy of the same round, and of their ratio.
//
// Before measuring, every configuration is checked: its function still returns x + 1,
// and with program statistics on, each of its programs ran exactly once per call.
// `--profile=NAME[:CALLS]` skips the benchmarks and makes CALLS calls of NAME's copy in
// utramp_tc_profile_loop, for an instruction count under
//   valgrind --tool=callgrind --toggle-collect=utramp_tc_profile_loop
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <utramp/utramp.h>

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "arch/arch.hpp"
#include "bench_support.hpp"
#include "common/hex.hpp"
#include "sites/table.hpp"
#include "tramp/trampoline.hpp"

extern "C" {
int utramp_tc_plain(int);
int utramp_tc_nop(int);
int utramp_tc_floor(int);
int utramp_tc_fentry(int);
int utramp_tc_fentry_nosig(int);
int utramp_tc_fexit(int);
int utramp_tc_fmod_ret(int);
int utramp_tc_fentry_fexit(int);
int utramp_tc_fentry_x4(int);
int utramp_tc_fentry_x16(int);
int utramp_tc_fentry_x38(int);
int utramp_tc_ld_nop(int);
int utramp_tc_ld_fentry(int);
int utramp_tc_ld_fexit(int);
int utramp_tc_ld_fmod_ret(int);
int utramp_tc_pro_fentry(int);
int utramp_tc_pro_fexit(int);
int utramp_tc_pro_fmod_ret(int);

// The floor stub's handler: an empty C function.
__attribute__((noinline)) void utramp_tc_floor_handler() { asm volatile(""); }

// The floor stub, reached by `call` from the site (rsp = 0 mod 16 at its entry, and
// still after six pushes): saves the six argument registers, calls the empty handler,
// restores them and returns to site + 5.
void utramp_tc_floor_stub();
asm(R"(
        .text
        .p2align 4
        .globl utramp_tc_floor_stub
        .type utramp_tc_floor_stub, @function
utramp_tc_floor_stub:
        push %rdi
        push %rsi
        push %rdx
        push %rcx
        push %r8
        push %r9
        call utramp_tc_floor_handler
        pop %r9
        pop %r8
        pop %rcx
        pop %rdx
        pop %rsi
        pop %rdi
        ret
        .size utramp_tc_floor_stub, . - utramp_tc_floor_stub
)");

// The loop `--profile` runs, by name for callgrind's --toggle-collect.
__attribute__((noinline)) int utramp_tc_profile_loop(int (*fn)(int), long calls) {
  return utramp::bench::call_chain(fn, calls);
}
}

namespace {

using namespace utramp;
using bench::fail;
using bench::must;

constexpr int kCallsPerIter = 1000;
constexpr size_t kMaxProgs = tramp::kMaxLinks;  // 38
constexpr const char* kSignature = "i32 -> i32";

// The programs: kMaxProgs distinct empty functions (-fno-ipa-icf keeps them apart), so
// that N programs on one function are N different programs, as N BPF programs would be.
template <size_t I>
uint64_t empty_prog(uint64_t*) {
  return 0;
}
template <size_t... I>
constexpr std::array<utramp_prog_t, sizeof...(I)> make_progs(std::index_sequence<I...>) {
  return {&empty_prog<I>...};
}
const std::array<utramp_prog_t, kMaxProgs> g_progs =
    make_progs(std::make_index_sequence<kMaxProgs>{});

enum class Kind { plain, nop, floor, tramp };

struct LinkSpec {
  utramp_attach_type type;
  size_t prog;  // index into g_progs
};

struct Config {
  std::string name;   // "fentry"
  std::string label;  // as printed
  int (*fn)(int);
  Kind kind;
  std::vector<LinkSpec> links;
  bool signature = true;
};

std::vector<LinkSpec> fentries(size_t n) {
  std::vector<LinkSpec> v;
  for (size_t i = 0; i < n; ++i) v.push_back({UTRAMP_FENTRY, i});
  return v;
}

std::vector<Config> make_configs() {
  std::vector<Config> v;
  v.push_back({"plain", "plain (no site)", utramp_tc_plain, Kind::plain});
  v.push_back({"nop", "NOP site", utramp_tc_nop, Kind::nop});
  v.push_back({"floor", "floor: call+6 saves+empty C fn", utramp_tc_floor, Kind::floor});
  v.push_back({"fentry", "fentry, 1 empty program", utramp_tc_fentry, Kind::tramp, fentries(1)});
  v.push_back({"fentry_nosig", "fentry, no signature", utramp_tc_fentry_nosig, Kind::tramp,
               fentries(1), false});
  v.push_back({"fexit", "fexit", utramp_tc_fexit, Kind::tramp, {{UTRAMP_FEXIT, 0}}});
  v.push_back({"fmod_ret", "fmod_ret (returns 0)", utramp_tc_fmod_ret, Kind::tramp,
               {{UTRAMP_FMOD_RET, 0}}});
  v.push_back({"fentry_fexit", "fentry+fexit", utramp_tc_fentry_fexit, Kind::tramp,
               {{UTRAMP_FENTRY, 0}, {UTRAMP_FEXIT, 1}}});
  v.push_back({"fentry_x4", "fentry x 4", utramp_tc_fentry_x4, Kind::tramp, fentries(4)});
  v.push_back({"fentry_x16", "fentry x 16", utramp_tc_fentry_x16, Kind::tramp, fentries(16)});
  v.push_back({"fentry_x38", "fentry x 38", utramp_tc_fentry_x38, Kind::tramp, fentries(38)});
  v.push_back({"ld_nop", "load body: NOP site", utramp_tc_ld_nop, Kind::nop});
  v.push_back({"ld_fentry", "load body: fentry", utramp_tc_ld_fentry, Kind::tramp, fentries(1)});
  v.push_back({"ld_fexit", "load body: fexit", utramp_tc_ld_fexit, Kind::tramp,
               {{UTRAMP_FEXIT, 0}}});
  v.push_back({"ld_fmod_ret", "load body: fmod_ret", utramp_tc_ld_fmod_ret, Kind::tramp,
               {{UTRAMP_FMOD_RET, 0}}});
  v.push_back({"pro_fentry", "load body, no site: fentry", utramp_tc_pro_fentry, Kind::tramp,
               fentries(1)});
  v.push_back({"pro_fexit", "load body, no site: fexit", utramp_tc_pro_fexit, Kind::tramp,
               {{UTRAMP_FEXIT, 0}}});
  v.push_back({"pro_fmod_ret", "load body, no site: fmod_ret", utramp_tc_pro_fmod_ret,
               Kind::tramp, {{UTRAMP_FMOD_RET, 0}}});
  return v;
}

uint64_t addr_of(int (*f)(int)) { return reinterpret_cast<uint64_t>(f); }
const uint64_t kFloorStub = reinterpret_cast<uint64_t>(&utramp_tc_floor_stub);
const uint64_t kFloorHandler = reinterpret_cast<uint64_t>(&utramp_tc_floor_handler);

// Points the floor copy's site at utramp_tc_floor_stub with a 5-byte `call`.
void install_floor(const Config& c) {
  auto& table = sites::SiteTable::instance();
  sites::Site* s = table.find(addr_of(c.fn));
  if (!s) fail("floor: no site for utramp_tc_floor");
  std::string why;
  if (!s->usable(&why)) fail("floor: " + why);
  must(table.set_desired(s, {sites::SiteOp::call, kFloorStub}), "floor: set_desired");
  must(table.commit(), "floor: commit");
}

void attach_all(const Config& c) {
  for (const LinkSpec& l : c.links) {
    utramp_attach_opts opts{};
    opts.sz = sizeof opts;
    opts.signature = c.signature ? kSignature : nullptr;
    if (!utramp_attach(reinterpret_cast<void*>(c.fn), l.type, g_progs[l.prog], &opts))
      fail(fmt::format("{}: utramp_attach: {}", c.name, utramp_last_error()));
  }
}

// Run count per program address, from the Manager (links of one program share it).
std::map<uint64_t, uint64_t> run_counts() {
  std::map<uint64_t, uint64_t> out;
  for (const auto& t : tramp::Manager::instance().list())
    for (const auto& l : t.links) out[l.prog] = l.run_cnt;
  return out;
}

// Every configuration returns x + 1; with statistics on, one call of each runs every
// program once per link; with statistics off again, the images no longer count.
void check(const std::vector<Config>& cfgs) {
  std::map<uint64_t, uint64_t> expected;
  for (const Config& c : cfgs)
    for (const LinkSpec& l : c.links) ++expected[reinterpret_cast<uint64_t>(g_progs[l.prog])];
  utramp_set_stats(1);
  auto before = run_counts();
  for (const Config& c : cfgs)
    if (c.fn(41) != 42) fail(c.name + ": wrong result after setup");
  auto after = run_counts();
  for (auto [prog, n] : expected)
    if (after[prog] - before[prog] != n)
      fail(fmt::format("program {:#x} ran {} times, {} expected", prog,
                       after[prog] - before[prog], n));
  utramp_set_stats(0);
  before = run_counts();
  for (const Config& c : cfgs)
    if (c.fn(41) != 42) fail(c.name + ": wrong result after stats off");
  if (run_counts() != before) fail("the images still count runs with statistics off");
}

// ---- the hot path, as straight-line code ------------------------------------------------

struct PathInsn {
  std::string region;
  arch::Insn insn;
};

arch::Insn decode_at(uint64_t pc) {
  return must(arch::decode(reinterpret_cast<const uint8_t*>(pc), arch::kMaxInsnLen, pc),
              fmt::format("decoding at {:#x}", pc));
}

// Instructions a straight-line callee runs up to its ret (a program, the body).
int callee_len(uint64_t pc) {
  for (int n = 1; n < 64; ++n) {
    const arch::Insn i = decode_at(pc);
    if (i.flow == arch::Flow::ret) return n;
    pc += i.length;
  }
  return -1;
}

// Bytes of straight-line code from `pc` to its ret included.
size_t straight_bytes(uint64_t pc) {
  const uint64_t start = pc;
  for (int n = 0; n < 64; ++n) {
    const arch::Insn i = decode_at(pc);
    pc += i.length;
    if (i.flow == arch::Flow::ret) break;
  }
  return pc - start;
}

// Where the body goes on after the site: site + 5, or past the relocated prologue.
uint64_t body_of(uint64_t fn) {
  const sites::Site* s = sites::SiteTable::instance().find(fn);
  if (!s) fail(fmt::format("no site at {:#x}", fn));
  return s->info.site + s->info.site_len;
}

// From the function's entry to the final ret, taking no conditional branch (the hot
// path of every configuration has none taken) and not following calls.
std::vector<PathInsn> hot_path(uint64_t fn) {
  static const char* const kRegions[] = {"site", "stub", "image", "stub", "?"};
  std::vector<PathInsn> out;
  const uint64_t body = body_of(fn);
  uint64_t pc = fn;
  int region = 0;
  bool in_body = false;
  for (int n = 0; n < 1000; ++n) {
    const arch::Insn i = decode_at(pc);
    out.push_back({in_body ? "body" : kRegions[std::min(region, 4)], i});
    if (i.flow == arch::Flow::ret) break;
    if (i.flow == arch::Flow::jump) {
      pc = i.target;
      if (pc == body) in_body = true;
      else ++region;
    } else {
      pc += i.length;
    }
  }
  return out;
}

struct PathCount {
  int generated = 0;  // site jmp, stub, image, stub tail
  int callees = 0;    // programs and the body reached by call
  int body = 0;       // the body run inline (fentry-only: jmp to site + 5)
  int total() const { return generated + callees + body; }
};

PathCount count(const std::vector<PathInsn>& path) {
  PathCount c;
  for (const PathInsn& p : path) {
    if (p.region == "body") {
      ++c.body;
      continue;
    }
    ++c.generated;
    if (p.insn.flow == arch::Flow::call) c.callees += callee_len(p.insn.target);
  }
  return c;
}

void print_path(const Config& c) {
  const auto path = hot_path(addr_of(c.fn));
  const PathCount n = count(path);
  fmt::print("\n-- {} ({}): hot path, {} instructions generated + {} in called programs/body + "
             "{} body inline\n",
             c.name, c.label, n.generated, n.callees, n.body);
  for (const PathInsn& p : path)
    fmt::print("  {:<5} {:#x}: {:<36} {}\n", p.region, p.insn.address, hex_bytes(p.insn.raw()),
               p.insn.text());
}

// ---- benchmarks and summary -------------------------------------------------------------

void summary(const std::vector<Config>& cfgs, const bench::KeepingReporter& rep,
             const bench::Rounds& rounds) {
  const bench::RoundMedians m(rep, rounds, [](const std::string&) { return kCallsPerIter; });
  fmt::print("\n== utramp trampoline cost: `return x + 1`, not inlined, one copy per configuration,"
             "\n   {} dependent calls per iteration through a volatile function pointer; CPU time"
             "\n   per call, medians over {} interleaved rounds; differences and ratios against the"
             "\n   plain copy (no site) and the NOP-site copy of the same round. Programs are empty"
             "\n   native functions; signature \"{}\" unless marked.\n",
             kCallsPerIter, rounds.count(), kSignature);
  bench::print_machine();
  fmt::print("\n{:<32} {:>8} {:>9} {:>7} {:>9} {:>6}\n", "configuration", "ns/call", "+ns plain",
             "ratio", "+ns NOP", "insns");
  for (const Config& c : cfgs) {
    const double ns = m.med({c.name}, [](auto& x) { return x[0]; });
    const double over = m.med({c.name, "plain"}, [](auto& x) { return x[0] - x[1]; });
    const double ratio = m.med({c.name, "plain"}, [](auto& x) { return x[0] / x[1]; });
    const double vs_nop = m.med({c.name, "nop"}, [](auto& x) { return x[0] - x[1]; });
    int insns = 0;
    if (c.kind == Kind::plain) insns = callee_len(addr_of(c.fn));
    else if (c.kind == Kind::nop) insns = 1 + callee_len(body_of(addr_of(c.fn)));
    else if (c.kind == Kind::floor)
      insns = 1 + callee_len(kFloorStub) + callee_len(kFloorHandler) +
              callee_len(addr_of(c.fn) + arch::kSiteLen);
    else insns = count(hot_path(addr_of(c.fn))).total();
    fmt::print("{:<32} {:>8.3f} {:>+9.3f} {:>7.2f} {:>+9.3f} {:>6}\n", c.label, ns, over, ratio,
               vs_nop, insns);
  }
  fmt::print("(insns: instructions executed per call from the function's entry to its return, "
             "programs and handler included)\n");

  // The scaling table: N fentry programs on one function.
  fmt::print("\n{:<12} {:>8} {:>14} {:>18}\n", "fentry progs", "ns/call", "+ns over 1 prog",
             "+ns per further");
  const std::vector<std::pair<int, std::string>> scale = {
      {1, "fentry"}, {4, "fentry_x4"}, {16, "fentry_x16"}, {38, "fentry_x38"}};
  for (const auto& [n, name] : scale) {
    const double ns = m.med({name}, [](auto& x) { return x[0]; });
    if (n == 1) {
      fmt::print("{:<12} {:>8.3f} {:>14} {:>18}\n", n, ns, "-", "-");
      continue;
    }
    const double d = m.med({name, "fentry"}, [](auto& x) { return x[0] - x[1]; });
    fmt::print("{:<12} {:>8.3f} {:>+14.3f} {:>18.3f}\n", n, ns, d, d / (n - 1));
  }

  // Keeping every register: the same programs on the same body, reached through a
  // relocated prologue (pro_) and through a NOP site (ld_).
  fmt::print("\nno compiler site (every register kept) vs NOP site, same body (load):\n");
  fmt::print("{:<10} {:>12} {:>12} {:>9} {:>10} {:>10}\n", "attached", "NOP ns/call",
             "no-site ns", "+ns", "NOP insns", "no-site");
  for (const char* k : {"fentry", "fexit", "fmod_ret"}) {
    const std::string fp = std::string("ld_") + k, pro = std::string("pro_") + k;
    const double ns_fp = m.med({fp}, [](auto& x) { return x[0]; });
    const double ns_pro = m.med({pro}, [](auto& x) { return x[0]; });
    const double d = m.med({pro, fp}, [](auto& x) { return x[0] - x[1]; });
    int i_fp = 0, i_pro = 0;
    for (const Config& c : cfgs) {
      if (c.name == fp) i_fp = count(hot_path(addr_of(c.fn))).total();
      if (c.name == pro) i_pro = count(hot_path(addr_of(c.fn))).total();
    }
    fmt::print("{:<10} {:>12.3f} {:>12.3f} {:>+9.3f} {:>10} {:>10}\n", k, ns_fp, ns_pro, d, i_fp,
               i_pro);
  }

  // The goals, next to what was measured (not asserted: a benchmark is not a test).
  const double fentry_vs_nop = m.med({"fentry", "nop"}, [](auto& x) { return x[0] - x[1]; });
  const double fexit_ratio =
      m.med({"fexit", "fentry", "plain"}, [](auto& x) { return (x[0] - x[2]) / (x[1] - x[2]); });
  const double fexit_ratio_total = m.med({"fexit", "fentry"}, [](auto& x) { return x[0] / x[1]; });
  const double per_prog =
      m.med({"fentry_x38", "fentry"}, [](auto& x) { return (x[0] - x[1]) / 37; });
  const double floor_gap = m.med({"fentry", "floor"}, [](auto& x) { return x[0] - x[1]; });
  auto verdict = [](bool met) { return met ? "within" : "OVER"; };
  fmt::print("\ngoals on this machine (measured, not asserted):\n");
  fmt::print("  empty fentry - NOP site      goal <= 3.0 ns   measured {:+.3f} ns  {}\n",
             fentry_vs_nop, verdict(fentry_vs_nop <= 3.0));
  fmt::print("  fexit / fentry (overheads)   goal <= 1.5x     measured {:.2f}x  {}"
             "  (ns/call ratio {:.2f}x)\n",
             fexit_ratio, verdict(fexit_ratio <= 1.5), fexit_ratio_total);
  fmt::print("  each further fentry program  goal <= 2.0 ns   measured {:.3f} ns  {}"
             "  (38 vs 1 program, /37)\n",
             per_prog, verdict(per_prog <= 2.0));
  fmt::print("  gap of empty fentry to the hand-written floor: {:+.3f} ns\n", floor_gap);
}

void print_listings(const std::vector<Config>& cfgs) {
  fmt::print("\n== generated code on the hot path (conditional branches not taken; `call` "
             "targets counted, not listed)\n");
  for (const Config& c : cfgs) {
    if (c.kind == Kind::floor) {
      fmt::print("\n-- floor: site `call` -> hand-written stub -> empty handler, ret to site+5\n");
      fmt::print("{}", arch::disassemble({reinterpret_cast<const uint8_t*>(kFloorStub),
                                          straight_bytes(kFloorStub)},
                                         kFloorStub));
    }
    if (c.name == "fentry" || c.name == "fexit" || c.name == "fentry_nosig" ||
        c.name == "pro_fentry" || c.name == "pro_fexit")
      print_path(c);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bench::CostOptions opts;
  if (!bench::init_cost(argc, argv, {"--no-listing"}, &opts)) return 1;

  if (std::set<utramp_prog_t>(g_progs.begin(), g_progs.end()).size() != kMaxProgs)
    fail("the empty programs were merged into fewer functions (build with -fno-ipa-icf)");

  const std::vector<Config> cfgs = make_configs();
  // Everything that patches runs here, while this process has one thread.
  bench::canonicalize_sites();
  for (const Config& c : cfgs) {
    if (c.kind == Kind::floor) install_floor(c);
    if (c.kind == Kind::tramp) attach_all(c);
  }
  check(cfgs);

  if (!opts.profile.empty()) return bench::run_profile(opts, cfgs, utramp_tc_profile_loop);

  const bench::Rounds rs("tramp", opts.rounds);
  bench::KeepingReporter rep;
  bench::run_rounds(rs, cfgs, kCallsPerIter, "ratios", rep);
  summary(cfgs, rep, rs);
  if (!opts.given("--no-listing")) print_listings(cfgs);
  benchmark::Shutdown();
  return 0;
}
