// Raw cost of the operations a patch batch is made of, with this thread alone and with
// a second thread of the process running (what a traced program usually has):
//   write_text     a 5-byte write through /proc/self/mem (os::write_text)
//   sync_cores     membarrier(PRIVATE_EXPEDITED_SYNC_CORE) (os::sync_cores)
//   read_maps      parsing /proc/self/maps, which patch::apply does once per batch
//   apply_1        patch::apply of one op (NOP <-> call) on code no thread runs
//   syscall        getppid(), the floor of any system call
// The code written to is a block of the executable arena that nothing executes.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "arch/arch.hpp"
#include "bench_support.hpp"
#include "os/exec_memory.hpp"
#include "os/maps.hpp"
#include "os/text_writer.hpp"
#include "patch/patcher.hpp"

namespace {

using namespace utramp;
using bench::must;

os::ExecBlock g_block;    // [0, 5): the patched "site"; [16, ...): the stub
uint64_t g_counter = 0;

// Keeps a second thread of this process busy on the other core for the duration of a
// benchmark, so that membarrier has someone to interrupt.
class Spinner {
 public:
  explicit Spinner(bool on) {
    if (on) t_ = std::thread([this] {
      while (!stop_.load(std::memory_order_relaxed)) benchmark::ClobberMemory();
    });
  }
  ~Spinner() {
    stop_.store(true, std::memory_order_relaxed);
    if (t_.joinable()) t_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread t_;
};

bool with_thread(const benchmark::State& state) { return state.range(0) != 0; }

void BM_syscall(benchmark::State& state) {
  Spinner sp(with_thread(state));
  for (auto _ : state) benchmark::DoNotOptimize(syscall(SYS_getppid));
}

void BM_write_text(benchmark::State& state) {
  Spinner sp(with_thread(state));
  std::vector<uint8_t> bytes(arch::kNop5.begin(), arch::kNop5.end());
  for (auto _ : state) must(os::write_text(g_block.addr, bytes), "write_text");
}

void BM_sync_cores(benchmark::State& state) {
  Spinner sp(with_thread(state));
  for (auto _ : state) must(os::sync_cores(), "sync_cores");
}

void BM_read_maps(benchmark::State& state) {
  Spinner sp(with_thread(state));
  for (auto _ : state) benchmark::DoNotOptimize(must(os::read_maps(), "read_maps"));
}

void BM_apply_1(benchmark::State& state) {
  Spinner sp(with_thread(state));
  const uint64_t site = g_block.addr;
  const uint64_t stub = g_block.addr + 16;
  const auto call = must(arch::encode_call(site, stub), "encode_call");
  const std::vector<uint8_t> nop(arch::kNop5.begin(), arch::kNop5.end());
  const std::vector<uint8_t> cb(call.begin(), call.end());
  const patch::PatchOp on{site, nop, cb, patch::Emulation::call(stub, site + 5), "bench+0x0"};
  const patch::PatchOp off{site, cb, nop, patch::Emulation::jump_to(site + 5), "bench+0x0"};
  for (auto _ : state) {
    must(patch::apply({&on, 1}), "apply");
    must(patch::apply({&off, 1}), "apply");
  }
  state.counters["per_apply"] = benchmark::Counter(static_cast<double>(state.iterations()) * 2,
                                                   benchmark::Counter::kIsRate |
                                                       benchmark::Counter::kInvert);
}

// A block holding a canonical NOP at 0 and a counting stub at 16, never executed.
void setup() {
  const auto self = reinterpret_cast<uint64_t>(&setup);
  const auto w = arch::rel32_window(self);
  g_block = must(os::ExecArena::instance().allocate(64, w.lo, w.hi), "allocating a block");
  must(os::ExecArena::instance().write(g_block, 0, arch::kNop5), "writing the NOP");
  const auto stub = must(arch::emit_counting_stub(g_block.addr + 16,
                                                  reinterpret_cast<uint64_t>(&g_counter)),
                         "emitting the stub");
  must(os::ExecArena::instance().write(g_block, 16, stub), "writing the stub");
  must(os::sync_cores(), "registering membarrier");
}

}  // namespace

int main(int argc, char** argv) {
  auto full = bench::with_default_min_time(argc, argv, "--benchmark_min_time=0.2");
  int n = static_cast<int>(full.size());
  benchmark::Initialize(&n, full.data());
  if (benchmark::ReportUnrecognizedArguments(n, full.data())) return 1;
  setup();
  bench::add_context("wall-clock per operation; other_thread:1 keeps a second thread spinning");
  struct Entry {
    const char* name;
    void (*fn)(benchmark::State&);
  };
  for (const Entry& e : {Entry{"primitive/syscall", BM_syscall},
                         Entry{"primitive/write_text_5", BM_write_text},
                         Entry{"primitive/sync_cores", BM_sync_cores},
                         Entry{"primitive/read_maps", BM_read_maps},
                         Entry{"primitive/apply_1_op", BM_apply_1}})
    benchmark::RegisterBenchmark(e.name, e.fn)
        ->ArgName("other_thread")
        ->Arg(0)
        ->Arg(1)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  benchmark::ConsoleReporter rep(isatty(STDOUT_FILENO) ? benchmark::ConsoleReporter::OO_Color
                                                       : benchmark::ConsoleReporter::OO_None);
  fmt::print("== utramp patching primitives\n");
  bench::print_machine();
  benchmark::RunSpecifiedBenchmarks(&rep);
  benchmark::Shutdown();
  return 0;
}
