// The eBPF engines per run of a program, in one process:
//   interpreter   the reference, every check at run time
//   jit_checked   the JIT's code for an unverified program (ExecOptions::unverified):
//                 memory checks, the loop budget, division tests, as before the verifier
//   jit           the JIT's code for the verified program: the checks the proof makes
//                 redundant left out (docs/ebpf.md)
//   native        the same computation in C, gcc -O2 (ebpf_native.c), where there is one;
//                 fnv also without vectorising (native_scalar), as a JIT's code is scalar
// on these programs:
//   - the conformance programs that loop (a backward jump), as the suite has them;
//   - `prime` again with its input raised from 67 to 10007 (10005 loop iterations);
//   - `fnv`: FNV-1a over a 256-byte stack buffer it fills first (two loops of 256
//     iterations, a store or a load per iteration), seeded from its 8-byte context;
//     `fnv(clang)` the same as clang -O2 -target bpf compiles it from C;
//   - `empty` (mov r0, 0; exit): the fixed cost of a run, through Executable::run and,
//     for the JIT, through the native entry a trampoline calls.
// Every run is checked against the expected r0 (native C's result for fnv) before
// timing. The summary gives ns/run per engine and jit/native (goal <= 1.1).
//
// Then the verifier's own cost: a generated program of just over 1,000 instructions
// with 44 counted loops (16 iterations each, over the stack and a map value), clamps and
// helper calls, verified in full (goal <= 50 ms), with its statistics.
//
// Cases are read from UTRAMP_CONFORMANCE_DIR (as the tests); without them the
// conformance programs are left out.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "conformance_data.hpp"
#include "ebpf/asm.hpp"
#include "ebpf/engine.hpp"

extern "C" {
uint64_t utramp_bn_prime(uint64_t arg);
uint64_t utramp_bn_fnv(uint64_t seed);
uint64_t utramp_bn_fnv_scalar(uint64_t seed);
}

namespace {

using namespace utramp;
using namespace utramp::ebpf;
using bench::must;

constexpr int kEngines = 3;
const char* const kEngineNames[kEngines] = {"interpreter", "jit_checked", "jit"};

struct Workload {
  std::string name;
  std::vector<uint8_t> mem;
  std::unique_ptr<Executable> engines[kEngines];
  uint64_t expect;
  uint64_t (*native)(uint64_t) = nullptr;
  uint64_t (*native_scalar)(uint64_t) = nullptr;  // the same without vectorising, if it differs
  uint64_t native_arg = 0;
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

Workload* add(std::string name, std::vector<Insn> prog, std::vector<uint8_t> mem, uint64_t expect) {
  auto w = std::make_unique<Workload>();
  w->name = std::move(name);
  w->mem = std::move(mem);
  w->expect = expect;
  for (int e = 0; e < kEngines; ++e) {
    ExecOptions o;
    o.helpers = &testing::conformance_helpers();
    o.ctx_writable = true;
    o.ctx_size = w->mem.size();
    o.unverified = e == 1;
    w->engines[e] = must(load(Program{w->name, "", prog}, o, e ? EngineKind::jit : EngineKind::interpreter),
                         "loading " + w->name);
    std::vector<uint8_t> m = w->mem;
    const uint64_t r0 = must(w->engines[e]->execute(m.empty() ? nullptr : m.data(), m.size()), w->name);
    if (r0 != expect) {
      fmt::print(stderr, "{} on {} returned {:#x}, expected {:#x}\n", w->name, kEngineNames[e], r0, expect);
      std::exit(2);
    }
  }
  g_work.push_back(std::move(w));
  return g_work.back().get();
}

// FNV-1a over 256 stack bytes filled from the seed; ebpf_native.c has it in C.
constexpr const char* kFnv = R"(
  ldxdw %r2, [%r1+0]
  mov %r3, 0
fill:
  mov %r4, %r3
  add %r4, 1
  mul %r4, %r2
  rsh %r4, 8
  mov %r5, %r10
  add %r5, -256
  add %r5, %r3
  stxb [%r5+0], %r4
  add %r3, 1
  jlt %r3, 256, fill
  lddw %r0, 0xcbf29ce484222325
  lddw %r6, 0x100000001b3
  mov %r3, 0
hash:
  mov %r5, %r10
  add %r5, -256
  add %r5, %r3
  ldxb %r4, [%r5+0]
  xor %r0, %r4
  mul %r0, %r6
  add %r3, 1
  jlt %r3, 256, hash
  exit
)";

// The same computation as clang -O2 -target bpf compiles ebpf_native.c's C (its own
// strength reduction: the product stepped by `add r3, r1`; the hash loop's exit a
// forward jeq and its back edge a ja).
constexpr const char* kFnvClang = R"(
  mov %r2, 0
  ldxdw %r1, [%r1+0]
  mov %r3, %r1
fill:
  mov %r4, %r10
  add %r4, -256
  add %r4, %r2
  mov %r5, %r3
  rsh %r5, 8
  stxb [%r4+0], %r5
  add %r3, %r1
  add %r2, 1
  jne %r2, 256, fill
  lddw %r0, 0xcbf29ce484222325
  mov %r1, 0
  lddw %r2, 0x100000001b3
hash:
  mov %r3, %r10
  add %r3, -256
  add %r3, %r1
  ldxb %r3, [%r3+0]
  xor %r0, %r3
  mul %r0, %r2
  add %r1, 1
  jeq %r1, 256, +1
  ja hash
  exit
)";

void setup() {
  add("empty", must(assemble("mov %r0, 0\nexit\n"), "assembling"), {}, 0);
  {
    const uint64_t seed = 0x9e3779b97f4a7c15ull;
    std::vector<uint8_t> mem(8);
    std::memcpy(mem.data(), &seed, 8);
    Workload* w = add("fnv", must(assemble(kFnv), "assembling fnv"), mem, utramp_bn_fnv(seed));
    w->native = utramp_bn_fnv;
    w->native_scalar = utramp_bn_fnv_scalar;
    w->native_arg = seed;
    if (utramp_bn_fnv_scalar(seed) != w->expect) {
      fmt::print(stderr, "fnv: the scalar native build disagrees\n");
      std::exit(2);
    }
    Workload* c = add("fnv(clang)", must(assemble(kFnvClang), "assembling fnv(clang)"), mem, w->expect);
    c->native = utramp_bn_fnv;
    c->native_scalar = utramp_bn_fnv_scalar;
    c->native_arg = seed;
  }
  if (!testing::conformance_present()) {
    fmt::print("no conformance cases in {}: only `empty` and `fnv` run\n", testing::conformance_dir().string());
    return;
  }
  for (const auto& path : testing::data_files(testing::conformance_dir() / "tests")) {
    auto c = must(testing::parse_data_file(path), path.string());
    auto prog = must(testing::case_program(c), path.string());
    if (!loops(prog) || !c.result) continue;
    Workload* w = add(c.name, prog, c.mem, *c.result);
    if (c.name == "prime") {
      w->native = utramp_bn_prime;
      w->native_arg = 67;
      // The first instruction is `mov %r1, 67`: the number tested.
      if (prog[0].code == (op::kAlu64 | op::kMov) && prog[0].imm == 67) {
        prog[0].imm = 10007;
        Workload* big = add("prime(10007)", prog, c.mem, 1);
        big->native = utramp_bn_prime;
        big->native_arg = 10007;
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

void BM_native(benchmark::State& state, uint64_t (*fn)(uint64_t), uint64_t native_arg) {
  volatile uint64_t arg = native_arg;  // not a constant the compiler could fold
  for (auto _ : state) benchmark::DoNotOptimize(fn(arg));
}

void BM_native_entry(benchmark::State& state, Workload* w) {
  NativeFn fn = w->engines[2]->native();
  uint64_t ctx[4] = {};
  for (auto _ : state) benchmark::DoNotOptimize(fn(ctx));
}

// ---- the verifier's cost ---------------------------------------------------------------

// Just over 1,000 instructions: 22 blocks, each a counted loop of 16 iterations over
// the stack, one over a map value it looked up, a clamp of a context value and a
// helper call.
std::string big_program() {
  std::string t = "mov %r6, %r1\nmov %r7, 0\n";
  for (int k = 0; k < 8; ++k) t += fmt::format("stdw [%r10-{}], {}\n", 8 * (k + 1), k);
  t += "stw [%r10-68], 0\n";
  for (int b = 0; b < 22; ++b) {
    t += fmt::format("mov %r3, 0\nS{}:\nmov %r5, %r10\nadd %r5, -64\nmov %r4, %r3\nand %r4, 7\nlsh %r4, 3\n"
                     "add %r5, %r4\nldxdw %r4, [%r5+0]\nadd %r4, %r3\nstxdw [%r5+0], %r4\nadd %r3, 1\n"
                     "jlt %r3, 16, S{}\n",
                     b, b);
    t += fmt::format("mov %r2, %r10\nadd %r2, -68\nlddw %r1, map:vals\ncall 1\njeq %r0, 0, N{}\nmov %r3, 0\n"
                     "V{}:\nmov %r5, %r0\nmov %r4, %r3\nlsh %r4, 2\nadd %r5, %r4\nldxw %r4, [%r5+0]\nadd %r7, %r4\n"
                     "add %r3, 1\njlt %r3, 16, V{}\nN{}:\n",
                     b, b, b, b);
    t += fmt::format("ldxdw %r2, [%r6+{}]\njle %r2, 1000, C{}\nmov %r2, 1000\nC{}:\nadd %r7, %r2\n", 8 * (b % 2), b,
                     b);
    for (int k = 0; k < 3; ++k) t += fmt::format("xor %r7, {}\nmul %r7, 3\nrsh %r7, 1\nadd %r7, {}\n", b + k, k);
    t += "call 5\nadd %r7, %r0\n";
  }
  t += "mov %r0, %r7\nexit\n";
  return t;
}

struct BigProgram {
  std::vector<Insn> insns;
  ExecOptions options;
};

BigProgram make_big() {
  BigProgram b;
  std::string text = big_program();
  // `map:vals` names the only map: the lddw's immediate is a placeholder, the MapRef
  // says what it is.
  for (size_t at; (at = text.find("map:vals")) != std::string::npos;) text.replace(at, 8, "0");
  b.insns = must(assemble(text), "assembling the 1,000-instruction program");
  MapSpec vals;
  vals.name = "vals";
  vals.type = uint32_t(MapType::array);
  vals.key_size = 4;
  vals.value_size = 64;
  vals.max_entries = 1;
  b.options.helpers = &runtime_helpers();
  b.options.ctx_kind = CtxKind::tracing;
  b.options.ctx_size = 16;
  b.options.maps = {vals};
  for (size_t i = 0; i < b.insns.size(); ++i) {
    if (b.insns[i].code == op::kLddw) {
      b.options.refs.push_back({static_cast<uint32_t>(i), 0, false, 0});
      ++i;
    }
  }
  return b;
}

void BM_verify(benchmark::State& state, const BigProgram* b) {
  const VerifyEnv env = verify_env(b->options);
  for (auto _ : state) benchmark::DoNotOptimize(verify(b->insns, env));
}

}  // namespace

int main(int argc, char** argv) {
  auto full = bench::with_default_min_time(argc, argv, "--benchmark_min_time=0.2");
  int n = static_cast<int>(full.size());
  benchmark::Initialize(&n, full.data());
  bench::add_context("ns per run of each program on the interpreter, the JIT without a proof (checked), "
                     "the JIT with the verifier's proof, and native C (gcc -O2), in one process; "
                     "every result checked before timing; then verify() on a 1,000-instruction program");
  setup();
  const BigProgram big = make_big();
  const auto first = must(verify(big.insns, verify_env(big.options)), "verifying the 1,000-instruction program");
  for (auto& w : g_work) {
    for (int e = 0; e < kEngines; ++e)
      benchmark::RegisterBenchmark(fmt::format("{}/{}", w->name, kEngineNames[e]).c_str(), BM_run, w.get(), e);
    if (w->native)
      benchmark::RegisterBenchmark(fmt::format("{}/native", w->name).c_str(), BM_native, w->native, w->native_arg);
    if (w->native_scalar)
      benchmark::RegisterBenchmark(fmt::format("{}/native_scalar", w->name).c_str(), BM_native, w->native_scalar,
                                   w->native_arg);
  }
  benchmark::RegisterBenchmark("empty/jit_native_entry", BM_native_entry, g_work[0].get());
  benchmark::RegisterBenchmark("verify/1000_insns", BM_verify, &big)->Unit(benchmark::kMillisecond);
  bench::KeepingReporter rep;
  benchmark::RunSpecifiedBenchmarks(&rep);

  fmt::print("\n{:<14} {:>14} {:>13} {:>10} {:>10} {:>11} {:>11}\n", "program", "interpreter ns", "jit_checked ns",
             "jit ns", "native ns", "jit/checked", "jit/native");
  for (auto& w : g_work) {
    double ns[kEngines] = {};
    bool ok = true;
    for (int e = 0; e < kEngines; ++e) {
      const auto* r = rep.find(w->name + "/" + kEngineNames[e]);
      if (!r) ok = false;
      else ns[e] = bench::per_unit_ns(*r, 1, false);
    }
    if (!ok) continue;
    const auto* nat = w->native ? rep.find(w->name + "/native") : nullptr;
    const double nn = nat ? bench::per_unit_ns(*nat, 1, false) : 0;
    fmt::print("{:<14} {:>14.1f} {:>13.1f} {:>10.1f} {:>10} {:>10.2f}x {:>11}\n", w->name, ns[0], ns[1], ns[2],
               nat ? fmt::format("{:.1f}", nn) : "-", ns[2] / ns[1],
               nat ? fmt::format("{:.2f}x", ns[2] / nn) : "-");
  }
  for (auto& w : g_work) {
    const auto* jit = rep.find(w->name + "/jit");
    const auto* sc = w->native_scalar ? rep.find(w->name + "/native_scalar") : nullptr;
    if (jit && sc)
      fmt::print("{:<14} native without vectorising (gcc -fno-tree-vectorize): {:.1f} ns, jit/native {:.2f}x\n",
                 w->name, bench::per_unit_ns(*sc, 1, false),
                 bench::per_unit_ns(*jit, 1, false) / bench::per_unit_ns(*sc, 1, false));
  }
  if (const auto* nat = rep.find("empty/jit_native_entry"))
    fmt::print("{:<14} {:>14} {:>13} {:>10.1f}   (native entry: uint64_t fn(uint64_t* ctx))\n", "empty/entry", "", "",
               bench::per_unit_ns(*nat, 1, false));
  if (const auto* v = rep.find("verify/1000_insns"))
    fmt::print("\nverify(): {} instructions, {} processed, {} states stored, {} pruned: {:.2f} ms per verification "
               "(goal <= 50 ms)\n",
               big.insns.size(), first.proof.insns_processed, first.proof.states_stored, first.proof.pruned,
               bench::per_unit_ns(*v, 1, false) / 1e6);
  bench::print_machine();
  benchmark::Shutdown();
  return 0;
}
