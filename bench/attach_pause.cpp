// How long attaching pauses a running process: os::inject_library (the ptrace protocol
// of os/inject.hpp) loading a small library into a target whose worker threads call a
// function in a loop (tests/attach/attach_target.c), with 1 and 64 workers (plus its
// main thread, blocked in read(), and one thread inside a signal handler).
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

#include <string>

#include "bench_support.hpp"
#include "os/inject.hpp"

namespace {

struct Target {
  pid_t pid = -1;
  int in = -1;
  explicit Target(int workers) {
    int i[2], o[2];
    if (pipe2(i, O_CLOEXEC) != 0 || pipe2(o, O_CLOEXEC) != 0) utramp::bench::fail("pipe");
    pid = fork();
    if (pid == 0) {
      dup2(i[0], 0);
      dup2(o[1], 1);
      const std::string n = std::to_string(workers);
      execl(UTRAMP_ATTACH_TARGET, UTRAMP_ATTACH_TARGET, n.c_str(), static_cast<char*>(nullptr));
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
  Target t(static_cast<int>(state.range(0)));
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
BENCHMARK(BM_AttachPause)->Arg(1)->Arg(64)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(50);
BENCHMARK(BM_AttachPauseAgent)->Arg(1)->Arg(64)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(10);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  utramp::bench::add_context(
      "pause of a running process per injection (first interrupt to last detach), target "
      "with N busy workers + a thread blocked in read() + one in a signal handler");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
