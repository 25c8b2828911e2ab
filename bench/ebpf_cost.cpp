// Per-call cost of eBPF programs on a traced function, against the same function with
// nothing attached and with an empty native program, measured in one run; then, where
// bpftrace may run, the same latency histogram done by a kernel uprobe + uretprobe.
//
// Method: tramp_target.c is compiled into one copy of a tiny non-inlined function
// (`return x + 1`) per configuration (bench/CMakeLists.txt), each with its own site:
//   plain          no site, nothing attached                                      (a)
//   native         an empty native fentry program (utramp_attach, the C API)      (b)
//   ebpf_empty     an empty eBPF fentry program (ebpf_cost.bpf.c `empty`), JIT    (c)
//   ebpf_hash      an eBPF fentry doing a hash-map increment (`count`), JIT       (d)
//   ebpf_latency   examples/bpf/latency.bpf.c: fentry + fexit, log2 histogram     (e)
//   bpftrace       nothing attached by us; a bpftrace uprobe + uretprobe doing the
//                  histogram of (e), when bpftrace may run                       (f)
// Every eBPF object is loaded as `utramp run` loads it (loader, map file, resolve, JIT)
// but in this process; each program is attached to its configuration's copy, whatever
// function its section names. The in-process configurations run as bench_tramp_cost's:
// kCallsPerIter dependent calls through a volatile pointer per iteration, registered
// round-robin `--rounds` times in an order that rotates each round, CPU time per call;
// the summary gives medians over the rounds of ns/call, of the difference with `plain`
// in the same round, and of (c-a)/(b-a), the cost of an empty eBPF program over an
// empty native one (goal <= 1.5x).
//
// Before timing, every configuration is checked: it still returns x + 1, the map of
// (d) counted every call, the histogram of (e) holds every call, and no program
// recorded a fault (a program that faulted at once would be fast and meaningless).
//
// (f) runs after the others, outside Google Benchmark: the bpftrace copy is timed
// without anything attached, bpftrace is started on it (`uprobe:`/`uretprobe:` on this
// binary), and once its probes are seen to fire the copy is timed again, interleaved
// with the plain copy; wall-clock ns per call (a uprobe's cost is kernel time).
// bpftrace is then stopped with SIGINT and its histogram printed. Skipped with the
// reason when bpftrace is not installed, not root, or it fails to attach; --no-bpftrace
// skips it.
//
// JIT against interpreter on the conformance programs that loop: bench_ebpf_engines.
//
// `--profile=NAME[:CALLS]` skips the benchmarks and makes CALLS calls of NAME's copy in
// utramp_ec_profile_loop, for an instruction count under
//   valgrind --tool=callgrind --toggle-collect=utramp_ec_profile_loop
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <utramp/utramp.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "abi/signature.hpp"
#include "ebpf/engine.hpp"
#include "ebpf/helpers.hpp"
#include "ebpf/loader.hpp"
#include "ebpf/maps.hpp"

extern "C" {
int utramp_ec_plain(int);
int utramp_ec_native(int);
int utramp_ec_ebpf_empty(int);
int utramp_ec_ebpf_hash(int);
int utramp_ec_ebpf_latency(int);
int utramp_ec_bpftrace(int);

__attribute__((noinline)) uint64_t utramp_ec_native_prog(uint64_t*) { return 0; }

// The loop `--profile` runs, by name for callgrind's --toggle-collect.
__attribute__((noinline)) int utramp_ec_profile_loop(int (*fn)(int), long calls) {
  return utramp::bench::call_chain(fn, calls);
}
}

namespace {

using namespace utramp;
using bench::fail;
using bench::must;

constexpr int kCallsPerIter = 1000;
constexpr const char* kSignature = "i32 -> i32";

// ---- eBPF objects, loaded in this process as the agent loads them ---------------------

struct BpfObject {
  ebpf::Object obj;
  ebpf::MapFile maps;  // attached (registered), its file already unlinked
  std::vector<std::unique_ptr<ebpf::Executable>> progs;  // obj.programs' order

  size_t map_index(const std::string& name) const {
    for (size_t i = 0; i < obj.maps.size(); ++i)
      if (obj.maps[i].name == name) return i;
    fail(fmt::format("{}: no map '{}'", obj.path, name));
  }
  ebpf::MapHeader* map(const std::string& name) const { return maps.header(map_index(name)); }
  const ebpf::Executable& prog(const std::string& name) const {
    for (size_t i = 0; i < progs.size(); ++i)
      if (obj.programs[i].name == name) return *progs[i];
    fail(fmt::format("{}: no program '{}'", obj.path, name));
  }
  uint64_t faults() const {
    uint64_t n = 0;
    for (const auto& p : progs) n += p->default_status().faults.load();
    return n;
  }
};

std::unique_ptr<BpfObject> load_bpf(const std::string& path) {
  auto b = std::make_unique<BpfObject>();
  const ebpf::HelperTable& helpers = ebpf::runtime_helpers();
  b->obj = must(ebpf::load_object_file(path, helpers), "loading " + path);
  const char* tmp = getenv("TMPDIR");
  std::string file = fmt::format("{}/utramp-bench-maps-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  const int fd = mkstemp(file.data());
  if (fd < 0) fail(fmt::format("mkstemp {}: {}", file, strerror(errno)));
  close(fd);
  {
    auto created = ebpf::MapFile::create(file, b->obj.maps);
    if (created) {
      auto attached = ebpf::MapFile::attach(file);
      if (attached) b->maps = std::move(*attached);
      else created = std::move(attached).error();
    }
    unlink(file.c_str());
    if (!created) bench::die("map file for " + path, created.error());
  }
  std::vector<uint64_t> hdr, val;
  ebpf::ExecOptions o;
  o.helpers = &helpers;
  for (size_t i = 0; i < b->obj.maps.size(); ++i) {
    hdr.push_back(reinterpret_cast<uint64_t>(b->maps.header(i)));
    auto d = b->maps.values(i);
    val.push_back(reinterpret_cast<uint64_t>(d.data()));
    o.regions.push_back({reinterpret_cast<uint64_t>(d.data()),
                         reinterpret_cast<uint64_t>(d.data() + d.size()), !b->obj.maps[i].readonly});
  }
  const abi::Signature sig = must(abi::parse_signature(kSignature), "the target's signature");
  for (ebpf::LoadedProgram& p : b->obj.programs) {
    ebpf::resolve(p, hdr, val);
    ebpf::ExecOptions po = o;
    // As the agent loads it: the context of "i32 -> i32", the maps; verified.
    ebpf::program_options(b->obj, p, sig, po);
    b->progs.push_back(must(ebpf::load(ebpf::Program{p.name, p.section, p.insns}, po, ebpf::EngineKind::jit),
                            fmt::format("{}: program {}", path, p.name)));
  }
  return b;
}

void attach(int (*fn)(int), utramp_attach_type type, utramp_prog_t prog, const std::string& what) {
  utramp_attach_opts opts{};
  opts.sz = sizeof opts;
  opts.signature = kSignature;
  if (!utramp_attach(reinterpret_cast<void*>(fn), type, prog, &opts))
    fail(fmt::format("{}: utramp_attach: {}", what, utramp_last_error()));
}

utramp_prog_t native_of(const ebpf::Executable& e) { return reinterpret_cast<utramp_prog_t>(e.native()); }

// ---- configurations ---------------------------------------------------------------------

struct Config {
  std::string name;
  std::string label;
  int (*fn)(int);
};

const std::vector<Config>& configs() {
  static const std::vector<Config> v = {
      {"plain", "(a) plain, nothing attached", utramp_ec_plain},
      {"native", "(b) empty native fentry", utramp_ec_native},
      {"ebpf_empty", "(c) empty eBPF fentry (JIT)", utramp_ec_ebpf_empty},
      {"ebpf_hash", "(d) eBPF fentry, hash-map ++", utramp_ec_ebpf_hash},
      {"ebpf_latency", "(e) latency.bpf.c fentry+fexit", utramp_ec_ebpf_latency},
  };
  return v;
}

struct Setup {
  std::unique_ptr<BpfObject> cost, latency;
};

uint64_t hash_count(const BpfObject& b) {
  uint32_t key = 0;
  const auto* v = static_cast<const uint64_t*>(ebpf::map_lookup(b.map("counts"), &key));
  return v ? *v : 0;
}

uint64_t hist_total(const BpfObject& b) {
  uint64_t n = 0;
  for (const auto& e : b.maps.entries(b.map_index("hist_ns")))
    for (const auto& v : e.values) {
      uint64_t x = 0;
      std::memcpy(&x, v.data(), std::min<size_t>(v.size(), 8));
      n += x;
    }
  return n;
}

Setup setup(const std::string& cost_obj, const std::string& latency_obj) {
  Setup s;
  s.cost = load_bpf(cost_obj);
  s.latency = load_bpf(latency_obj);
  attach(utramp_ec_native, UTRAMP_FENTRY, &utramp_ec_native_prog, "native");
  attach(utramp_ec_ebpf_empty, UTRAMP_FENTRY, native_of(s.cost->prog("empty")), "ebpf_empty");
  attach(utramp_ec_ebpf_hash, UTRAMP_FENTRY, native_of(s.cost->prog("count")), "ebpf_hash");
  attach(utramp_ec_ebpf_latency, UTRAMP_FENTRY, native_of(s.latency->prog("work_entry")), "latency entry");
  attach(utramp_ec_ebpf_latency, UTRAMP_FEXIT, native_of(s.latency->prog("work_exit")), "latency exit");

  // Check: results unchanged, every call counted, no fault.
  constexpr int kCheck = 1000;
  for (const Config& c : configs())
    for (int i = 0; i < kCheck; ++i)
      if (c.fn(i) != i + 1) fail(c.name + ": wrong result after attaching");
  if (hash_count(*s.cost) != kCheck)
    fail(fmt::format("ebpf_hash: the map counted {} calls, {} made", hash_count(*s.cost), kCheck));
  if (hist_total(*s.latency) != kCheck)
    fail(fmt::format("ebpf_latency: the histogram holds {} calls, {} made", hist_total(*s.latency), kCheck));
  if (s.cost->faults() || s.latency->faults())
    fail("a program faulted: the figures would measure its fault path");
  return s;
}

// ---- benchmarks and summary -------------------------------------------------------------

void summary(const bench::KeepingReporter& rep, const bench::Rounds& rounds) {
  const bench::RoundMedians m(rep, rounds, [](const std::string&) { return kCallsPerIter; });
  fmt::print("\n== utramp eBPF cost: `return x + 1`, not inlined, one copy per configuration,"
             "\n   {} dependent calls per iteration through a volatile function pointer; CPU time"
             "\n   per call, medians over {} interleaved rounds; differences against the plain"
             "\n   copy of the same round. eBPF programs JIT-compiled; signature \"{}\".\n",
             kCallsPerIter, rounds.count(), kSignature);
  bench::print_machine();
  fmt::print("\n{:<34} {:>8} {:>10} {:>8}\n", "configuration", "ns/call", "+ns plain", "x (b)");
  for (const Config& c : configs()) {
    const double ns = m.med({c.name}, [](auto& x) { return x[0]; });
    const double over = m.med({c.name, "plain"}, [](auto& x) { return x[0] - x[1]; });
    const double vs_native = m.med({c.name, "native", "plain"},
                                   [](auto& x) { return (x[0] - x[2]) / (x[1] - x[2]); });
    if (c.name == "plain") fmt::print("{:<34} {:>8.3f} {:>10} {:>8}\n", c.label, ns, "-", "-");
    else fmt::print("{:<34} {:>8.3f} {:>+10.3f} {:>7.2f}x\n", c.label, ns, over, vs_native);
  }
  fmt::print("(x (b): overhead over plain divided by the empty native program's, same round)\n");
  const double ratio = m.med({"ebpf_empty", "native", "plain"},
                             [](auto& x) { return (x[0] - x[2]) / (x[1] - x[2]); });
  fmt::print("\ngoal on this machine (measured, not asserted):\n");
  fmt::print("  empty eBPF / empty native fentry, (c-a)/(b-a)   goal <= 1.5x   measured {:.2f}x  {}\n",
             ratio, ratio <= 1.5 ? "within" : "OVER");
}

// ---- (f) bpftrace -------------------------------------------------------------------------

double now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) * 1e9 + double(t.tv_nsec);
}

// Wall-clock ns per call of `calls` dependent calls of fn.
double time_calls(int (*fn)(int), long calls) {
  const double t0 = now_ns();
  benchmark::DoNotOptimize(utramp_ec_profile_loop(fn, calls));
  return (now_ns() - t0) / double(calls);
}

std::string find_in_path(const std::string& name) {
  const char* path = getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    const size_t end = std::min(p.find(':', start), p.size());
    std::string cand = p.substr(start, end - start) + "/" + name;
    if (access(cand.c_str(), X_OK) == 0) return cand;
    start = end + 1;
  }
  return {};
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

// A child bpftrace, its stdout and stderr on one pipe.
struct Child {
  pid_t pid = -1;
  int out = -1;
  std::string text;
  // Reads what is there, waiting up to ms; false at EOF.
  bool pump(int ms) {
    pollfd p{out, POLLIN, 0};
    if (poll(&p, 1, ms) <= 0) return true;
    char buf[4096];
    const ssize_t n = read(out, buf, sizeof buf);
    if (n <= 0) return false;
    text.append(buf, size_t(n));
    return true;
  }
  // Stops it with SIGINT (bpftrace prints its maps then), SIGKILL after 10 s; reaps it.
  int stop() {
    if (pid < 0) return -1;
    kill(pid, SIGINT);
    int status = 0;
    for (int i = 0; i < 1000; ++i) {
      while (pump(10)) {
        if (waitpid(pid, &status, WNOHANG) == pid) goto done;
      }
      if (waitpid(pid, &status, WNOHANG) == pid) goto done;
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  done:
    while (pump(0)) {
    }
    close(out);
    pid = -1;
    return status;
  }
};

std::optional<std::string> spawn_bpftrace(const std::string& bin, const std::string& script, Child& c) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return fmt::format("pipe: {}", strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) return fmt::format("fork: {}", strerror(errno));
  if (pid == 0) {
    // If this benchmark dies (a probe gone wrong), bpftrace must not outlive it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execl(bin.c_str(), bin.c_str(), "-e", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  c.pid = pid;
  c.out = fds[0];
  return std::nullopt;
}

void bench_bpftrace(int rounds) {
  fmt::print("\n== (f) the latency histogram of (e) by a kernel uprobe + uretprobe (bpftrace)\n");
  const std::string bin = find_in_path("bpftrace");
  if (bin.empty()) {
    fmt::print("skipped: bpftrace is not installed (not in PATH)\n");
    return;
  }
  if (geteuid() != 0) {
    fmt::print("skipped: bpftrace needs root to attach uprobes (euid {})\n", geteuid());
    return;
  }
  const std::string exe = self_exe();
  const std::string fn = "utramp_ec_bpftrace";
  const std::string script = fmt::format(
      "uprobe:{0}:{1} {{ @start[tid] = nsecs; }} "
      "uretprobe:{0}:{1} /@start[tid]/ {{ @latency_ns = hist(nsecs - @start[tid]); delete(@start[tid]); }}",
      exe, fn);
  // Per-call cost may reach 15 us (a single-stepped uprobe): keep each timing short.
  constexpr long kCalls = 20'000;
  std::vector<double> without, plain0;
  time_calls(utramp_ec_bpftrace, kCalls);  // warm both up first
  time_calls(utramp_ec_plain, kCalls);
  for (int r = 0; r < rounds; ++r) {
    without.push_back(time_calls(utramp_ec_bpftrace, kCalls));
    plain0.push_back(time_calls(utramp_ec_plain, kCalls));
  }
  const double base = bench::median(without);

  Child c;
  if (auto err = spawn_bpftrace(bin, script, c)) {
    fmt::print("skipped: cannot start {}: {}\n", bin, *err);
    return;
  }
  // Attached once the copy's calls cost more than 100 ns over what they did (a uprobe
  // costs hundreds at least); bpftrace may take seconds to compile and attach.
  bool attached = false, alive = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!attached && alive && std::chrono::steady_clock::now() < deadline) {
    alive = c.pump(100);
    if (waitpid(c.pid, nullptr, WNOHANG) == c.pid) {
      alive = false;
      c.pid = -1;
      break;
    }
    attached = time_calls(utramp_ec_bpftrace, 1000) > base + 100;
  }
  if (!attached) {
    std::string why = alive ? "its probes did not fire within 60 s" : "it exited";
    if (c.pid >= 0) c.stop();
    else {
      while (c.pump(0)) {
      }
      close(c.out);
    }
    fmt::print("skipped: bpftrace did not attach ({}); it said:\n{}\n", why, c.text);
    return;
  }
  std::vector<double> with, plain1, diff;
  for (int r = 0; r < rounds; ++r) {
    const double w = time_calls(utramp_ec_bpftrace, kCalls);
    const double p = time_calls(utramp_ec_plain, kCalls);
    with.push_back(w);
    plain1.push_back(p);
    diff.push_back(w - p);
  }
  const int status = c.stop();
  fmt::print("{} dependent calls per timing, wall clock, medians of {} rounds, the probed copy "
             "interleaved with the plain one\n",
             kCalls, rounds);
  fmt::print("{:<34} {:>10} {:>12}\n", "configuration", "ns/call", "+ns plain");
  fmt::print("{:<34} {:>10.1f} {:>+12.1f}\n", "bpftrace copy, nothing attached", base,
             base - bench::median(plain0));
  fmt::print("{:<34} {:>10.1f} {:>+12.1f}\n", "bpftrace uprobe+uretprobe hist", bench::median(with),
             bench::median(diff));
  fmt::print("bpftrace exit status {}; its output:\n{}", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
             c.text);
}

}  // namespace

int main(int argc, char** argv) {
  bench::CostOptions opts;
  if (!bench::init_cost(argc, argv, {"--no-bpftrace"}, &opts)) return 1;

  // Everything that patches runs here, while this process has one thread.
  bench::canonicalize_sites();
  Setup s = setup(UTRAMP_BENCH_EBPF_COST_OBJ, UTRAMP_BENCH_LATENCY_OBJ);

  const auto& cfgs = configs();
  if (!opts.profile.empty()) return bench::run_profile(opts, cfgs, utramp_ec_profile_loop);

  const bench::Rounds rs("ebpf", opts.rounds);
  bench::KeepingReporter rep;
  bench::run_rounds(rs, cfgs, kCallsPerIter, "differences", rep);
  if (s.cost->faults() || s.latency->faults()) fail("a program faulted while timed");
  summary(rep, rs);
  if (!opts.given("--no-bpftrace")) bench_bpftrace(opts.rounds);
  else fmt::print("\n(f) bpftrace: skipped (--no-bpftrace)\n");
  fmt::print("\nJIT against interpreter on the looping conformance programs: bench_ebpf_engines.\n");
  benchmark::Shutdown();
  return 0;
}
