// Per-call cost of a function with a site, against the same function with no site,
// measured in one run.
//
// Method: callee.c is compiled into several copies of one tiny non-inlined function
// (`return x + 1`), each in its own translation unit so the caller cannot inline it:
//   plain/gcc    no site (the baseline)
//   nop/gcc      -fpatchable-function-entry=5: five 1-byte NOPs, canonicalised by the
//                SiteTable into one 5-byte NOP before anything runs
//   call/gcc     as nop/gcc, then patched into `call` to a counting stub (lock inc; ret)
//   plain/clang  no site, clang's baseline
//   nop/clang    clang -fpatchable-function-entry=5: one 5-byte NOP as emitted
//   call/clang   as nop/clang, patched like call/gcc if the SiteTable accepts the site
// Each benchmark iteration makes kCallsPerIter dependent direct calls (acc = f(acc)).
// The variants are registered round-robin, `--rounds` times, in an order that rotates
// each round, so every variant sees the same machine conditions as its baseline; the
// summary gives per variant the median over rounds of its CPU time per call, of its
// difference with its compiler's baseline of the same round, and of their ratio.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "arch/arch.hpp"
#include "bench_support.hpp"
#include "common/hex.hpp"
#include "os/exec_memory.hpp"
#include "os/text_writer.hpp"
#include "patch/patcher.hpp"
#include "sites/table.hpp"

extern "C" {
#ifdef UTRAMP_BENCH_HAVE_GCC
int utramp_bench_plain_gcc(int);
int utramp_bench_nop_gcc(int);
int utramp_bench_call_gcc(int);
#endif
#ifdef UTRAMP_BENCH_HAVE_CLANG
int utramp_bench_plain_clang(int);
int utramp_bench_nop_clang(int);
int utramp_bench_call_clang(int);
#endif
}

namespace {

using namespace utramp;
using bench::must;

constexpr int kCallsPerIter = 1000;

// Calls made through each copy, to check the stub's count against.
uint64_t g_calls[2];
// Incremented by the counting stubs (one per patched copy).
uint64_t g_stub_count[2];

template <int (*F)(int)>
void BM_call(benchmark::State& state) {
  int acc = 0;
  for (auto _ : state) {
    for (int i = 0; i < kCallsPerIter; ++i) acc = F(acc);
    benchmark::DoNotOptimize(acc);
  }
  bench::count_calls(state, kCallsPerIter);
}

template <int (*F)(int), int Slot>
void BM_counted_call(benchmark::State& state) {
  BM_call<F>(state);
  g_calls[Slot] += static_cast<uint64_t>(state.iterations()) * kCallsPerIter;
}

struct Variant {
  std::string name;      // "nop/gcc"
  std::string baseline;  // name of the variant it is compared with
  int (*fn)(int);
  void (*bench)(benchmark::State&);
  int stub_slot = -1;    // for call variants: which stub counts it
  std::string note;      // how the entry looked after setup
  bool enabled = true;
};

uint64_t addr_of(int (*f)(int)) { return reinterpret_cast<uint64_t>(f); }

std::string entry_bytes(int (*f)(int)) {
  return hex_bytes({reinterpret_cast<const uint8_t*>(f), arch::kSiteLen});
}

std::string site_kind(int (*f)(int)) {
  sites::Site* s = sites::SiteTable::instance().find(addr_of(f));
  return s ? std::string(sites::site_kind_name(s->info.kind)) : "not in the site table";
}

// Places a counting stub within rel32 reach of `f`'s site and patches the site into a
// call to it. Returns why not when the SiteTable refuses the site.
Result<void> patch_to_stub(int (*f)(int), uint64_t* counter) {
  auto& table = sites::SiteTable::instance();
  sites::Site* s = table.find(addr_of(f));
  if (!s) return make_error(Errc::not_found, "no site for the function");
  std::string why;
  if (!s->usable(&why)) return make_error(Errc::unsupported, why);
  const auto w = arch::rel32_window(s->addr());
  constexpr size_t kStubMax = 32;
  auto block = os::ExecArena::instance().allocate(kStubMax, w.lo, w.hi);
  if (!block) return std::move(block).error();
  auto code = arch::emit_counting_stub(block->addr, reinterpret_cast<uint64_t>(counter));
  if (!code) return std::move(code).error();
  if (code->size() > block->size)
    return make_error(Errc::too_big, fmt::format("stub of {} bytes", code->size()));
  UTRAMP_TRY(os::ExecArena::instance().write(*block, 0, *code));
  UTRAMP_TRY(table.set_desired(s, {sites::SiteOp::call, block->addr}));
  return table.commit();
}

std::vector<Variant> make_variants() {
  std::vector<Variant> v;
#ifdef UTRAMP_BENCH_HAVE_GCC
  v.push_back({"plain/gcc", "plain/gcc", utramp_bench_plain_gcc, BM_call<utramp_bench_plain_gcc>});
  v.push_back({"nop/gcc", "plain/gcc", utramp_bench_nop_gcc, BM_call<utramp_bench_nop_gcc>});
  v.push_back({"call/gcc", "plain/gcc", utramp_bench_call_gcc,
               BM_counted_call<utramp_bench_call_gcc, 0>, 0});
#endif
#ifdef UTRAMP_BENCH_HAVE_CLANG
  v.push_back({"plain/clang", "plain/clang", utramp_bench_plain_clang,
               BM_call<utramp_bench_plain_clang>});
  v.push_back({"nop/clang", "plain/clang", utramp_bench_nop_clang,
               BM_call<utramp_bench_nop_clang>});
  v.push_back({"call/clang", "plain/clang", utramp_bench_call_clang,
               BM_counted_call<utramp_bench_call_clang, 1>, 1});
#endif
  return v;
}

// Everything that patches runs here, while this process has one thread.
void setup(std::vector<Variant>& vars) {
  auto& table = sites::SiteTable::instance();
  must(table.discover(), "discovering sites");
  std::vector<std::string> before;
  for (const Variant& v : vars) before.push_back(entry_bytes(v.fn));
  const size_t left = must(table.canonicalize(sites::Quiescence::live), "canonicalising sites");
  if (left) fmt::print("note: {} sites left uncanonicalised (other threads exist)\n", left);
  for (size_t i = 0; i < vars.size(); ++i) {
    Variant& v = vars[i];
    if (v.stub_slot >= 0) {
      if (auto r = patch_to_stub(v.fn, &g_stub_count[v.stub_slot]); !r) {
        v.enabled = false;
        v.note = fmt::format("SKIPPED: {} ({})", r.error().message, errc_name(r.error().code));
      }
    }
    const std::string after = entry_bytes(v.fn);
    if (v.note.empty())
      v.note = before[i] == after ? fmt::format("{} [{}]", after, site_kind(v.fn))
                                  : fmt::format("{} -> {} [{}]", before[i], after, site_kind(v.fn));
  }
  // One call each: a patched site must reach its stub and still run the body.
  for (Variant& v : vars) {
    if (!v.enabled) continue;
    const uint64_t c0 = v.stub_slot >= 0 ? g_stub_count[v.stub_slot] : 0;
    if (v.fn(41) != 42) {
      fmt::print(stderr, "{}: wrong result after setup\n", v.name);
      std::exit(2);
    }
    if (v.stub_slot >= 0 && g_stub_count[v.stub_slot] != c0 + 1) {
      fmt::print(stderr, "{}: the stub did not count the call\n", v.name);
      std::exit(2);
    }
  }
  for (int s = 0; s < 2; ++s) g_stub_count[s] = 0;
}

void summary(const std::vector<Variant>& vars, const bench::KeepingReporter& rep,
             const bench::Rounds& rounds) {
  fmt::print("\n== utramp call cost: `return x + 1`, not inlined, {} dependent direct calls per "
             "iteration;\n   CPU time per call, medians over {} interleaved rounds; overhead and "
             "ratio against\n   the same compiler's copy with no site, from the same round.\n",
             kCallsPerIter, rounds.count());
  bench::print_machine();
  fmt::print("\n{:<12} {:>9} {:>10} {:>7}   {}\n", "variant", "ns/call", "+ns/call", "ratio",
             "entry bytes: compiled -> after setup [kind at discovery]");
  const bench::RoundMedians m(rep, rounds, [](const std::string&) { return kCallsPerIter; });
  for (const Variant& v : vars) {
    // Rounds in which the variant and its baseline both ran.
    const std::vector<std::string> pair = {v.name, v.baseline};
    const double ns = v.enabled ? m.med(pair, [](auto& x) { return x[0]; }) : -1;
    if (ns < 0) {
      fmt::print("{:<12} {:>9} {:>10} {:>7}   {}\n", v.name, "-", "-", "-", v.note);
      continue;
    }
    fmt::print("{:<12} {:>9.3f} {:>+10.3f} {:>7.2f}   {}\n", v.name, ns,
               m.med(pair, [](auto& x) { return x[0] - x[1]; }),
               m.med(pair, [](auto& x) { return x[0] / x[1]; }), v.note);
  }
  for (const Variant& v : vars)
    if (v.enabled && v.stub_slot >= 0)
      fmt::print("{}: the stub counted {} of {} calls\n", v.name, g_stub_count[v.stub_slot],
                 g_calls[v.stub_slot]);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  // Our one flag, taken out before benchmark sees the rest.
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i)
    if (!bench::parse_rounds(argv[i], &rounds)) args.push_back(argv[i]);
  auto full = bench::with_default_min_time(static_cast<int>(args.size()), args.data(),
                                           "--benchmark_min_time=0.1");
  int n = static_cast<int>(full.size());
  benchmark::Initialize(&n, full.data());
  if (benchmark::ReportUnrecognizedArguments(n, full.data())) return 1;

  std::vector<Variant> vars = make_variants();
  if (vars.empty()) {
    fmt::print(stderr, "no callee copies were built (neither gcc nor clang found)\n");
    return 1;
  }
  setup(vars);
  bench::add_context(fmt::format(
      "{} dependent calls of a tiny non-inlined function per iteration; variants "
      "interleaved over {} rounds; ratios against the no-site copy of the same round",
      kCallsPerIter, rounds));
  const bench::Rounds rs("call", rounds);
  rs.register_all(vars, [](const std::string& name, const Variant& v) {
    if (v.enabled) benchmark::RegisterBenchmark(name.c_str(), v.bench);
  });
  bench::KeepingReporter rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  summary(vars, rep, rs);
  benchmark::Shutdown();
  return 0;
}
