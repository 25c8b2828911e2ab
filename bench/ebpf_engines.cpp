// The eBPF JIT against the interpreter, per run of a program:
//   - the conformance programs that loop (a backward jump), as the suite has them;
//   - `prime` again with its input raised from 67 to 10007 (the same code, 10005 loop
//     iterations instead of 65: what a loop costs once entry and exit are amortised);
//   - `empty` (mov r0, 0; exit): the fixed cost of a run, through Executable::run and,
//     for the JIT, through the native entry a trampoline calls.
// Every run is checked against the case's expected r0 before timing (a JIT that
// computed the wrong thing fast would make the ratio meaningless). The summary prints
// interpreter ns/run, JIT ns/run and their ratio. Default loop budget on (the cost of
// its check on every backward jump is part of the JIT figure).
//
// Cases are read from UTRAMP_CONFORMANCE_DIR (as the tests); without them only `empty`
// runs.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "conformance_data.hpp"
#include "ebpf/asm.hpp"
#include "ebpf/engine.hpp"

namespace {

using namespace utramp;
using namespace utramp::ebpf;
using bench::must;

struct Workload {
  std::string name;
  std::vector<uint8_t> mem;
  std::unique_ptr<Executable> engines[2];  // interpreter, jit
  uint64_t expect;
};

std::vector<std::unique_ptr<Workload>> g_work;

bool loops(const std::vector<Insn>& p) {
  for (const Insn& i : p) {
    if (i.code == op::kJa32Op && i.imm < 0) return true;
    if (op::is_jmp(i.code) && i.code != op::kJa32Op && i.code != op::kCallOp && i.code != op::kCallxOp &&
        i.code != op::kExitOp && i.off < 0)
      return true;
  }
  return false;
}

void add(std::string name, std::vector<Insn> prog, std::vector<uint8_t> mem, uint64_t expect) {
  auto w = std::make_unique<Workload>();
  w->name = std::move(name);
  w->mem = std::move(mem);
  w->expect = expect;
  ExecOptions o;
  o.helpers = &testing::conformance_helpers();
  o.ctx_writable = true;
  for (int e = 0; e < 2; ++e) {
    w->engines[e] = must(load(Program{w->name, "", prog}, o, e ? EngineKind::jit : EngineKind::interpreter),
                         "loading " + w->name);
    std::vector<uint8_t> m = w->mem;
    const uint64_t r0 = must(w->engines[e]->execute(m.empty() ? nullptr : m.data(), m.size()), w->name);
    if (r0 != expect) {
      fmt::print(stderr, "{} on {} returned {:#x}, expected {:#x}\n", w->name, e ? "jit" : "interpreter", r0, expect);
      std::exit(2);
    }
  }
  g_work.push_back(std::move(w));
}

void setup() {
  add("empty", must(assemble("mov %r0, 0\nexit\n"), "assembling"), {}, 0);
  if (!testing::conformance_present()) {
    fmt::print("no conformance cases in {}: only `empty` runs\n", testing::conformance_dir().string());
    return;
  }
  for (const auto& path : testing::data_files(testing::conformance_dir() / "tests")) {
    auto c = must(testing::parse_data_file(path), path.string());
    auto prog = must(testing::case_program(c), path.string());
    if (!loops(prog) || !c.result) continue;
    add(c.name, prog, c.mem, *c.result);
    if (c.name == "prime") {
      // The first instruction is `mov %r1, 67`: the number tested.
      if (prog[0].code == (op::kAlu64 | op::kMov) && prog[0].imm == 67) {
        prog[0].imm = 10007;
        add("prime(10007)", prog, c.mem, 1);
      }
    }
  }
}

void BM_run(benchmark::State& state, Workload* w, int engine) {
  std::vector<uint8_t> m = w->mem;
  void* ctx = m.empty() ? nullptr : m.data();
  const Executable& e = *w->engines[engine];
  RunStatus& st = e.default_status();
  for (auto _ : state) benchmark::DoNotOptimize(e.run(ctx, m.size(), &st));
}

void BM_native(benchmark::State& state, Workload* w) {
  NativeFn fn = w->engines[1]->native();
  uint64_t ctx[4] = {};
  for (auto _ : state) benchmark::DoNotOptimize(fn(ctx));
}

}  // namespace

int main(int argc, char** argv) {
  auto full = bench::with_default_min_time(argc, argv, "--benchmark_min_time=0.2");
  int n = static_cast<int>(full.size());
  benchmark::Initialize(&n, full.data());
  bench::add_context("ns per run of each program, interpreter and JIT in one process; "
                     "conformance programs with a backward jump, checked before timing");
  setup();
  for (auto& w : g_work) {
    benchmark::RegisterBenchmark(fmt::format("{}/interpreter", w->name).c_str(), BM_run, w.get(), 0);
    benchmark::RegisterBenchmark(fmt::format("{}/jit", w->name).c_str(), BM_run, w.get(), 1);
  }
  benchmark::RegisterBenchmark("empty/jit_native", BM_native, g_work[0].get());
  bench::KeepingReporter rep;
  benchmark::RunSpecifiedBenchmarks(&rep);

  fmt::print("\n{:<16} {:>16} {:>12} {:>10}\n", "program", "interpreter ns", "jit ns", "ratio");
  for (auto& w : g_work) {
    const auto* i = rep.find(w->name + "/interpreter");
    const auto* j = rep.find(w->name + "/jit");
    if (!i || !j) continue;
    const double ni = bench::per_unit_ns(*i, 1, false), nj = bench::per_unit_ns(*j, 1, false);
    fmt::print("{:<16} {:>16.1f} {:>12.1f} {:>9.1f}x\n", w->name, ni, nj, ni / nj);
  }
  if (const auto* nat = rep.find("empty/jit_native"))
    fmt::print("{:<16} {:>16} {:>12.1f}   (native entry: uint64_t fn(uint64_t* ctx))\n", "empty/native", "",
               bench::per_unit_ns(*nat, 1, false));
  bench::print_machine();
  benchmark::Shutdown();
  return 0;
}
