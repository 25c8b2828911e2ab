// How long attaching pauses a running process: os::inject_library (the ptrace protocol
// of os/inject.hpp) loading a small library into a target whose worker threads call a
// function in a loop (tests/attach/attach_target.c), with 1 and 64 workers (plus its
// main thread, blocked in read(), and one thread inside a signal handler); the workers
// spin (busy: call after call) or sleep 1 ms after each call (a mostly idle process).
//
// Method: one target per thread count, started once; each iteration is one injection,
// timed from the first PTRACE_INTERRUPT to the last PTRACE_DETACH as the injector
// measures it (manual time). The library is loaded by the first iteration; the later
// ones find it loaded (dlopen returns its handle), so they time the stop, the call and
// the release, which is what every attach costs. The first load alone is reported as
// the counter first_load_ms. BM_AttachPauseAgent does the same with utramp's agent
// (libutramp-agent.so and the libraries it needs: what `utramp record -p` loads), on a
// new target, so that its first_load_ms is the pause of a real first attach.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "bench_support.hpp"
#include "os/inject.hpp"

namespace {

struct Target {
  pid_t pid = -1;
  int in = -1;
  Target(int workers, bool sleeping) {
    int i[2], o[2];
    if (pipe2(i, O_CLOEXEC) != 0 || pipe2(o, O_CLOEXEC) != 0) utramp::bench::fail("pipe");
    pid = fork();
    if (pid == 0) {
      dup2(i[0], 0);
      dup2(o[1], 1);
      const std::string n = std::to_string(workers);
      execl(UTRAMP_ATTACH_TARGET, UTRAMP_ATTACH_TARGET, n.c_str(), sleeping ? "sleep" : "busy",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(i[0]);
    close(o[1]);
    in = i[1];
    char c;
    std::string line;
    while (read(o[0], &c, 1) == 1 && c != '\n') line += c;
    close(o[0]);
    if (!line.starts_with("ready")) utramp::bench::fail("the target did not start");
  }
  ~Target() {
    (void)!write(in, "q", 1);
    close(in);
    waitpid(pid, nullptr, 0);
  }
};

void attach_pause(benchmark::State& state, const char* library) {
  Target t(static_cast<int>(state.range(0)), state.range(1) != 0);
  double first_ms = 0;
  for (auto _ : state) {
    auto r = utramp::bench::must(utramp::os::inject_library(t.pid, library), "inject");
    if (!r.handle) utramp::bench::fail("the library was not loaded: " + r.error);
    if (first_ms == 0) first_ms = static_cast<double>(r.pause_ns) / 1e6;
    state.SetIterationTime(static_cast<double>(r.pause_ns) / 1e9);
    state.counters["threads"] = static_cast<double>(r.threads);
  }
  state.counters["first_load_ms"] = first_ms;
}

void BM_AttachPause(benchmark::State& state) { attach_pause(state, UTRAMP_ATTACH_LIB); }
void BM_AttachPauseAgent(benchmark::State& state) { attach_pause(state, UTRAMP_AGENT_LIB); }

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  // Injections per configuration: 50 with the small library, 10 with the agent, or
  // UTRAMP_BENCH_PAUSE_RUNS for both (a slow protocol on a loaded machine).
  const char* env = getenv("UTRAMP_BENCH_PAUSE_RUNS");
  const int runs = env ? std::max(1, atoi(env)) : 0;
  struct Which {
    const char* name;
    const char* what;
    void (*fn)(benchmark::State&);
    int iterations;
  };
  const Which which[] = {{"BM_AttachPause", "small lib", BM_AttachPause, runs ? runs : 50},
                         {"BM_AttachPauseAgent", "agent", BM_AttachPauseAgent, runs ? runs : 10}};
  // Arguments: workers, sleeping (0: spinning).
  for (const Which& w : which)
    benchmark::RegisterBenchmark(w.name, w.fn)
        ->ArgNames({"workers", "sleeping"})
        ->ArgsProduct({{1, 64}, {0, 1}})
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(w.iterations);

  utramp::bench::add_context(
      "pause of a running process per injection (first interrupt to last detach), target "
      "with N workers (spinning, or sleeping 1 ms per call) + a thread blocked in read() + one in "
      "a signal handler");
  utramp::bench::KeepingReporter rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  // The figures side by side: 64 threads against 1, in this run.
  fmt::print("\n== attach pause (mean per injection, first load apart)\n");
  utramp::bench::print_machine();
  fmt::print("{:<22} {:>10} {:>10} {:>10} {:>10}\n", "", "1 worker", "64 workers", "ratio",
             "first 64");
  for (const Which& w : which)
    for (int sleeping : {0, 1}) {
      const char* lib = w.name;
      const auto* one = rep.find(fmt::format("{}/workers:1/sleeping:{}/iterations:{}/manual_time", lib,
                                             sleeping, w.iterations));
      const auto* many = rep.find(fmt::format("{}/workers:64/sleeping:{}/iterations:{}/manual_time", lib,
                                              sleeping, w.iterations));
      const std::string what = fmt::format("{} {}", w.what,
                                           sleeping ? "sleeping" : "spinning");
      if (!one || !many) {
        fmt::print("{:<22} (filtered out)\n", what);
        continue;
      }
      const double a = utramp::bench::per_unit_ns(*one, 1, true) / 1e6;
      const double b = utramp::bench::per_unit_ns(*many, 1, true) / 1e6;
      auto first = [](const benchmark::BenchmarkReporter::Run* r) {
        auto it = r->counters.find("first_load_ms");
        return it == r->counters.end() ? 0.0 : it->second.value;
      };
      fmt::print("{:<22} {:>8.2f}ms {:>8.2f}ms {:>9.1f}x {:>8.2f}ms\n", what, a, b, b / a, first(many));
    }
  benchmark::Shutdown();
  return 0;
}
