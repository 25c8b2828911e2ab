// Per-call cost of a function whose entry is diverted by an int3 (what `record -p` does
// to a function without a one-instruction site while the program's threads run:
// docs/attach.md, "Limits") against the same function entered by a jump, measured in
// one run.
//
// Method: three copies of one body without a compiler site whose first instruction is
// shorter than a jump (`mov eax, edi; add eax, 1; ret`, written in assembly so that the
// bytes do not depend on the compiler):
//   plain   nothing attached (the baseline)
//   jump    one fentry program, attached while this process has one thread: the
//           relocated prologue is entered by `jmp stub`
//   int3    the same program, attached while a second thread exists, with int3 entries
//           allowed (sites::set_trap_entries): an int3 over byte 0, SIGTRAP, the patcher's
//           handler sends the thread to the same stub
// The program counts its runs; each copy is checked (result, runs, entry byte) before
// anything is timed. Each round times CALLS calls of every copy, in an order that
// rotates each round, in CPU time of this thread (the kernel's signal delivery
// included); the summary gives medians over the rounds and the ratios of the same round.
//   bench_int3_entry [--rounds=N] [--calls=N]
#include <fmt/format.h>
#include <time.h>
#include <unistd.h>
#include <utramp/utramp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "arch/arch.hpp"
#include "bench_support.hpp"
#include "sites/table.hpp"

extern "C" {
int utramp_ie_plain(int);
int utramp_ie_jump(int);
int utramp_ie_int3(int);
}

asm(R"(
  .text
  .p2align 4
  .globl utramp_ie_plain
  .type utramp_ie_plain, @function
utramp_ie_plain:
  movl %edi, %eax
  addl $1, %eax
  ret
  .size utramp_ie_plain, .-utramp_ie_plain
  .p2align 4
  .globl utramp_ie_jump
  .type utramp_ie_jump, @function
utramp_ie_jump:
  movl %edi, %eax
  addl $1, %eax
  ret
  .size utramp_ie_jump, .-utramp_ie_jump
  .p2align 4
  .globl utramp_ie_int3
  .type utramp_ie_int3, @function
utramp_ie_int3:
  movl %edi, %eax
  addl $1, %eax
  ret
  .size utramp_ie_int3, .-utramp_ie_int3
)");

namespace {

using namespace utramp;
using bench::fail;

std::atomic<uint64_t> g_runs{0};
uint64_t counting_prog(uint64_t*) {
  g_runs.fetch_add(1, std::memory_order_relaxed);
  return 0;
}

void attach(int (*fn)(int)) {
  utramp_attach_opts opts{};
  opts.sz = sizeof opts;
  opts.signature = "i32 -> i32";
  if (!utramp_attach(reinterpret_cast<void*>(fn), UTRAMP_FENTRY, &counting_prog, &opts))
    fail(fmt::format("utramp_attach: {}", utramp_last_error()));
}

double cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

// CPU ns per call of CALLS dependent calls through a volatile pointer.
double time_calls(int (*fn)(int), long calls) {
  int (*volatile f)(int) = fn;
  int acc = 0;
  const double t0 = cpu_ns();
  for (long i = 0; i < calls; ++i) acc = f(acc);
  const double t1 = cpu_ns();
  if (acc != static_cast<int>(calls)) fail("wrong result while timing");
  return (t1 - t0) / static_cast<double>(calls);
}

void check(const char* name, int (*fn)(int), uint8_t entry, uint64_t runs_per_call) {
  const uint8_t first = *reinterpret_cast<const uint8_t*>(fn);
  if (first != entry) fail(fmt::format("{}: entry byte {:02x}, expected {:02x}", name, first, entry));
  const uint64_t r0 = g_runs.load();
  if (fn(41) != 42) fail(fmt::format("{}: wrong result", name));
  if (g_runs.load() - r0 != runs_per_call) fail(fmt::format("{}: the program ran {} times", name, g_runs.load() - r0));
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  long calls = 20000;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--rounds=", 9) == 0) rounds = std::max(1, std::atoi(argv[i] + 9));
    else if (std::strncmp(argv[i], "--calls=", 8) == 0) calls = std::max(1L, std::atol(argv[i] + 8));
    else if (std::strncmp(argv[i], "--benchmark_", 12) != 0)  // scripts/bench.sh passes those to all
      fail(fmt::format("unknown argument {} (--rounds=N, --calls=N)", argv[i]));
  }
  attach(&utramp_ie_jump);  // one thread: the prologue may be replaced by a jump
  {
    std::atomic<bool> stop{false};
    std::thread other([&] {  // a second thread while the int3 copy is attached
      while (!stop.load()) usleep(1000);
    });
    sites::set_trap_entries(true);
    attach(&utramp_ie_int3);
    sites::set_trap_entries(false);  // the site keeps its int3 until detached
    stop = true;
    other.join();
  }
  check("plain", &utramp_ie_plain, 0x89, 0);
  check("jump", &utramp_ie_jump, 0xe9, 1);
  check("int3", &utramp_ie_int3, arch::kTrapByte, 1);

  struct Copy {
    const char* name;
    int (*fn)(int);
    std::vector<double> ns;
  };
  std::vector<Copy> copies = {{"plain", &utramp_ie_plain, {}}, {"jump", &utramp_ie_jump, {}},
                              {"int3", &utramp_ie_int3, {}}};
  for (Copy& c : copies) (void)time_calls(c.fn, calls / 10 + 1);  // warm up
  std::vector<double> int3_over_jump, jump_over_plain;
  for (int r = 0; r < rounds; ++r) {
    for (size_t k = 0; k < copies.size(); ++k) {
      Copy& c = copies[(k + static_cast<size_t>(r)) % copies.size()];
      c.ns.push_back(time_calls(c.fn, calls));
    }
    int3_over_jump.push_back(copies[2].ns.back() / copies[1].ns.back());
    jump_over_plain.push_back(copies[1].ns.back() - copies[0].ns.back());
  }
  fmt::print("== utramp int3 entry vs jump entry: `mov eax, edi; add eax, 1; ret` without a "
             "compiler site,\n   one fentry program counting its runs; {} dependent calls per "
             "copy and round, CPU time\n   of the calling thread per call (kernel included), "
             "medians of {} interleaved rounds.\n",
             calls, rounds);
  bench::print_machine();
  fmt::print("\n{:<8} {:>10}\n", "entry", "ns/call");
  for (const Copy& c : copies) fmt::print("{:<8} {:>10.1f}\n", c.name, bench::median(c.ns));
  fmt::print("\njump over plain: {:+.1f} ns/call; int3 over jump: {:.1f}x (same round)\n",
             bench::median(jump_over_plain), bench::median(int3_over_jump));
  return 0;
}
