// Cost per site of patching 10,000 sites in one batch, against one site at a time.
//
// Method: sites.c (generated at build time by gen_sites.cmake) holds 10,000 distinct
// tiny functions compiled with -fpatchable-function-entry=5. After discovery and
// canonicalisation (timed once, printed), every site is toggled NOP -> call to one
// counting stub -> NOP through the SiteTable, the way a tracer would:
//   batch/N         set_desired on N sites, one commit(); then back, one commit()
//   one_at_a_time   for each of 500 sites: set_desired, commit(); then back likewise
// Times are wall-clock (patching waits on other cores). Per-site cost is the time of an
// iteration divided by its 2N site changes. Each benchmark also reports, from
// patch::stats(), the writes and core syncs (membarrier) per batch: a batch costs a
// constant number of them whatever its size.
// A second thread waits from the end of set-up (canonicalisation of five 1-byte NOPs
// needs the process alone) to the end, so that the batches take the int3 protocol
// of a process whose other threads may run (patch/patcher.hpp); UTRAMP_BENCH_ALONE=1
// leaves it out: the one-write batches of a process alone (the agent's start-up).
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "arch/arch.hpp"
#include "bench_support.hpp"
#include "os/exec_memory.hpp"
#include "patch/patcher.hpp"
#include "sites/table.hpp"

extern "C" {
extern const unsigned utramp_bench_site_count;
extern int (*const utramp_bench_sites[])(int);
}

namespace {

using namespace utramp;
using bench::must;

constexpr size_t kOneAtATime = 500;

std::vector<sites::Site*> g_sites;  // in the order of utramp_bench_sites
uint64_t g_stub = 0;
uint64_t g_stub_count = 0;

void set_all(size_t n, sites::SiteState st) {
  auto& t = sites::SiteTable::instance();
  for (size_t i = 0; i < n; ++i) must(t.set_desired(g_sites[i], st), "set_desired");
}

struct StatsDelta {
  patch::PatchStats start = patch::stats();
  void report(benchmark::State& state) const {
    const patch::PatchStats end = patch::stats();
    const double batches = static_cast<double>(end.batches - start.batches);
    if (batches == 0) return;
    state.counters["sites/batch"] = static_cast<double>(end.ops - start.ops) / batches;
    state.counters["writes/batch"] = static_cast<double>(end.writes - start.writes) / batches;
    state.counters["syncs/batch"] = static_cast<double>(end.syncs - start.syncs) / batches;
  }
};

void per_site_counter(benchmark::State& state, size_t changes_per_iter) {
  state.counters["per_site"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * static_cast<double>(changes_per_iter),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_batch(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  auto& t = sites::SiteTable::instance();
  StatsDelta d;
  for (auto _ : state) {
    set_all(n, {sites::SiteOp::call, g_stub});
    must(t.commit(), "commit");
    set_all(n, {sites::SiteOp::nop, 0});
    must(t.commit(), "commit");
  }
  per_site_counter(state, 2 * n);
  d.report(state);
}

void BM_one_at_a_time(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  auto& t = sites::SiteTable::instance();
  StatsDelta d;
  for (auto _ : state) {
    for (size_t i = 0; i < n; ++i) {
      must(t.set_desired(g_sites[i], {sites::SiteOp::call, g_stub}), "set_desired");
      must(t.commit(), "commit");
    }
    for (size_t i = 0; i < n; ++i) {
      must(t.set_desired(g_sites[i], {sites::SiteOp::nop, 0}), "set_desired");
      must(t.commit(), "commit");
    }
  }
  per_site_counter(state, 2 * n);
  d.report(state);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void print_stats_delta(const char* what, const patch::PatchStats& a, const patch::PatchStats& b,
                       double secs) {
  fmt::print("{}: {:.2f} ms, {} batch(es), {} sites, {} writes, {} core syncs\n", what, secs * 1e3,
             b.batches - a.batches, b.ops - a.ops, b.writes - a.writes, b.syncs - a.syncs);
}

// Discovery, canonicalisation, the stub, and one checked round trip: with every site
// calling the stub each function is counted once and still returns its value; with
// every site back to its NOP nothing is counted.
void setup() {
  auto& t = sites::SiteTable::instance();
  const size_t n = utramp_bench_site_count;
  fmt::print("== setup ({} generated sites)\n", n);
  auto t0 = std::chrono::steady_clock::now();
  const size_t found = must(t.discover(), "discovering sites");
  fmt::print("discover: {:.2f} ms, {} functions in the process\n", seconds_since(t0) * 1e3, found);

  const patch::PatchStats s0 = patch::stats();
  t0 = std::chrono::steady_clock::now();
  const size_t left = must(t.canonicalize(sites::Quiescence::live), "canonicalising sites");
  print_stats_delta("canonicalize (every five-1-byte-NOP site of the process, one batch)", s0,
                    patch::stats(), seconds_since(t0));
  if (left) fmt::print("note: {} sites left uncanonicalised\n", left);

  g_sites.resize(n);
  for (size_t i = 0; i < n; ++i) {
    g_sites[i] = t.find(reinterpret_cast<uint64_t>(utramp_bench_sites[i]));
    if (!g_sites[i]) {
      fmt::print(stderr, "utramp_bench_site_{} is not in the site table\n", i);
      std::exit(2);
    }
    std::string why;
    if (!g_sites[i]->usable(&why)) {
      fmt::print(stderr, "utramp_bench_site_{}: {}\n", i, why);
      std::exit(2);
    }
  }

  const auto w = arch::rel32_window(g_sites[0]->addr());
  const os::ExecBlock block =
      must(os::ExecArena::instance().allocate(32, w.lo, w.hi), "allocating the stub");
  const auto code = must(
      arch::emit_counting_stub(block.addr, reinterpret_cast<uint64_t>(&g_stub_count)),
      "emitting the stub");
  must(os::ExecArena::instance().write(block, 0, code), "writing the stub");
  g_stub = block.addr;

  const patch::PatchStats s1 = patch::stats();
  t0 = std::chrono::steady_clock::now();
  set_all(n, {sites::SiteOp::call, g_stub});
  must(t.commit(), "commit");
  print_stats_delta("enable all (one batch)", s1, patch::stats(), seconds_since(t0));
  for (size_t i = 0; i < n; ++i) {
    if (utramp_bench_sites[i](0) != static_cast<int>(i + 1)) {
      fmt::print(stderr, "utramp_bench_site_{} returned a wrong value when patched\n", i);
      std::exit(2);
    }
  }
  const uint64_t counted = g_stub_count;
  const patch::PatchStats s2 = patch::stats();
  t0 = std::chrono::steady_clock::now();
  set_all(n, {sites::SiteOp::nop, 0});
  must(t.commit(), "commit");
  print_stats_delta("disable all (one batch)", s2, patch::stats(), seconds_since(t0));
  for (size_t i = 0; i < n; ++i) (void)utramp_bench_sites[i](0);
  fmt::print("check: the stub counted {} calls of {} with every site patched, {} more with "
             "none\n\n",
             counted, n, g_stub_count - counted);
  if (counted != n || g_stub_count != counted) std::exit(2);
}

void summary(const bench::KeepingReporter& rep, size_t n) {
  const auto* batch = rep.find(fmt::format("patch/batch/sites:{}", n));
  const auto* single = rep.find(fmt::format("patch/one_at_a_time/sites:{}", kOneAtATime));
  fmt::print("\n== utramp batch patching: wall-clock time per site change (NOP -> call or back), "
             "through SiteTable::set_desired + commit\n");
  bench::print_machine();
  if (!batch || !single) {
    fmt::print("(the batch/{} or one_at_a_time/{} run was filtered out: no ratio)\n", n,
               kOneAtATime);
    return;
  }
  const double b = bench::per_unit_ns(*batch, 2.0 * static_cast<double>(n), true);
  const double s = bench::per_unit_ns(*single, 2.0 * kOneAtATime, true);
  auto c = [](const benchmark::BenchmarkReporter::Run* r, const char* k) {
    auto it = r->counters.find(k);
    return it == r->counters.end() ? 0.0 : it->second.value;
  };
  fmt::print("{:<36} {:>12} {:>13} {:>13}\n", "", "us/site", "syncs/batch", "writes/batch");
  fmt::print("{:<36} {:>12.3f} {:>13.1f} {:>13.1f}\n",
             fmt::format("{} sites in one batch", n), b / 1e3, c(batch, "syncs/batch"),
             c(batch, "writes/batch"));
  fmt::print("{:<36} {:>12.3f} {:>13.1f} {:>13.1f}\n",
             fmt::format("one site per batch ({} sites)", kOneAtATime), s / 1e3,
             c(single, "syncs/batch"), c(single, "writes/batch"));
  fmt::print("one at a time costs {:.0f}x the batched per-site cost\n", s / b);
}

}  // namespace

int main(int argc, char** argv) {
  auto full = bench::with_default_min_time(argc, argv, "--benchmark_min_time=0.3");
  int n = static_cast<int>(full.size());
  benchmark::Initialize(&n, full.data());
  if (benchmark::ReportUnrecognizedArguments(n, full.data())) return 1;

  setup();  // alone: five 1-byte NOPs are canonicalised only so
  const size_t count = utramp_bench_site_count;
  // The other thread: blocked until the end (never runs the sites).
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  const char* alone_env = std::getenv("UTRAMP_BENCH_ALONE");
  const bool alone = alone_env && std::string_view(alone_env) == "1";
  std::thread other;
  if (!alone)
    other = std::thread([&] {
      std::unique_lock l(mu);
      cv.wait(l, [&] { return done; });
    });
  bench::add_context(
      "wall-clock; each iteration moves N sites NOP -> call -> NOP via set_desired + commit");
  benchmark::RegisterBenchmark("patch/batch", BM_batch)
      ->ArgName("sites")
      ->Arg(1)
      ->Arg(100)
      ->Arg(static_cast<int64_t>(count))
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("patch/one_at_a_time", BM_one_at_a_time)
      ->ArgName("sites")
      ->Arg(static_cast<int64_t>(std::min(kOneAtATime, count)))
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  bench::KeepingReporter rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  summary(rep, count);
  fmt::print("{}\n", alone ? "(alone: UTRAMP_BENCH_ALONE=1, one write per batch)"
                            : "(another thread waits meanwhile: the int3 protocol)");
  benchmark::Shutdown();
  if (other.joinable()) {
    {
      std::lock_guard l(mu);
      done = true;
    }
    cv.notify_all();
    other.join();
  }
  return 0;
}
