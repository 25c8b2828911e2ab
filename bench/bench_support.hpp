// What every utramp benchmark binary shares: the machine it ran on (printed in the
// benchmark context and again under the summary, since figures from this field mean
// little without CPU and kernel), a reporter that keeps the runs for the summary, the
// interleaved rounds and their medians, and a way to give up loudly on a setup step
// that failed; and what the *_cost binaries share besides: their command line, the
// sites canonicalised before anything patches, `--profile`, and the timed run itself.
//
// A benchmark is not a test: nothing here compares a timing with a threshold. Setup
// steps do check that patching worked (a stub that never counted would make every
// figure meaningless), and abort with the error when it did not.
#pragma once

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "sites/table.hpp"

namespace utramp::bench {

inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("model name")) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) break;
    auto v = line.substr(colon + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    return v;
  }
  return "unknown";
}

inline std::string kernel_version() {
  utsname u{};
  if (uname(&u) != 0) return "unknown";
  return fmt::format("{} {} {} {}", u.sysname, u.release, u.version, u.machine);
}

// Adds the machine and the method to the context benchmark prints before the runs.
inline void add_context(std::string_view method) {
  benchmark::AddCustomContext("cpu_model", cpu_model());
  benchmark::AddCustomContext("kernel", kernel_version());
  benchmark::AddCustomContext("method", std::string(method));
}

inline void print_machine() {
  fmt::print("cpu:    {}\nkernel: {}\n", cpu_model(), kernel_version());
}

[[noreturn]] inline void fail(std::string_view what) {
  std::fflush(stdout);
  fmt::print(stderr, "benchmark setup failed: {}\n", what);
  std::exit(2);
}

[[noreturn]] inline void die(std::string_view what, const Error& e) {
  fail(fmt::format("{}: {} ({})", what, e.message, errc_name(e.code)));
}

template <class T>
T must(Result<T> r, std::string_view what) {
  if (!r) die(what, r.error());
  return std::move(r).value();
}

inline void must(Result<void> r, std::string_view what) {
  if (!r) die(what, r.error());
}

// Prints as the console reporter does and keeps every successful run, by name.
// Colour only on a terminal.
class KeepingReporter : public benchmark::ConsoleReporter {
 public:
  KeepingReporter() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_Color : OO_None) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs)
      if (!r.error_occurred && r.run_type == Run::RT_Iteration) runs_[r.benchmark_name()] = r;
  }
  // By the registered name; a run timed with UseRealTime() is reported with
  // "/real_time" appended.
  const Run* find(const std::string& name) const {
    for (const std::string& n : {name, name + "/real_time"}) {
      auto it = runs_.find(n);
      if (it != runs_.end()) return &it->second;
    }
    return nullptr;
  }

 private:
  std::map<std::string, Run> runs_;
};

// Nanoseconds per unit: the run's real or CPU time divided by its units of work.
inline double per_unit_ns(const benchmark::BenchmarkReporter::Run& r, double units_per_iter,
                          bool real_time) {
  const double total = real_time ? r.real_accumulated_time : r.cpu_accumulated_time;  // seconds
  return total * 1e9 / (static_cast<double>(r.iterations) * units_per_iter);
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Reports the time per call as the counter "per_call", CALLS calls per iteration.
inline void count_calls(benchmark::State& state, int calls) {
  state.counters["per_call"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * calls,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// CALLS dependent calls (acc = fn(acc)) per iteration through a volatile function
// pointer, so that the compiler can neither inline nor overlap them: the one loop
// every configuration of a *_cost benchmark is timed with.
inline void dependent_calls(benchmark::State& state, int (*fn)(int), int calls) {
  int (*volatile fp)(int) = fn;
  int acc = 0;
  for (auto _ : state) {
    for (int i = 0; i < calls; ++i) acc = fp(acc);
    benchmark::DoNotOptimize(acc);
  }
  count_calls(state, calls);
}

// The same chain outside Google Benchmark: CALLS dependent calls, the accumulator
// returned. The body of each *_cost binary's `--profile` loop, a function named for
// that binary (callgrind's --toggle-collect), which this is inlined into.
__attribute__((always_inline)) inline int call_chain(int (*fn)(int), long calls) {
  int (*volatile fp)(int) = fn;
  int acc = 0;
  for (long i = 0; i < calls; ++i) acc = fp(acc);
  return acc;
}

// Interleaved rounds: every configuration is registered once per round, as
// "PREFIX/NAME/round:R", in an order that rotates by one each round, so that each one
// meets the same machine conditions as the baseline it is compared with. Figures are
// medians over the rounds (see RoundMedians).
class Rounds {
 public:
  Rounds(std::string prefix, int count) : prefix_(std::move(prefix)), count_(count) {}

  int count() const { return count_; }
  std::string run_name(const std::string& config, int round) const {
    return fmt::format("{}/{}/round:{}", prefix_, config, round);
  }
  // For each round and each item, rotated: reg(run name, item).
  template <class T, class Register>
  void register_all(const std::vector<T>& items, Register reg) const {
    for (int r = 0; r < count_; ++r)
      for (size_t k = 0; k < items.size(); ++k) {
        const T& item = items[(k + static_cast<size_t>(r)) % items.size()];
        reg(run_name(item.name, r), item);
      }
  }

 private:
  std::string prefix_;
  int count_;
};

// "--rounds=N" (at least 1) into *rounds; false for any other argument.
inline bool parse_rounds(const char* arg, int* rounds) {
  if (std::strncmp(arg, "--rounds=", 9) != 0) return false;
  *rounds = std::max(1, std::atoi(arg + 9));
  return true;
}

// CPU time per unit of the runs a KeepingReporter kept, combined per round and reduced
// to the median over the rounds.
class RoundMedians {
 public:
  // units(config name): units of work per iteration (calls, usually).
  RoundMedians(const KeepingReporter& rep, const Rounds& rounds,
               std::function<double(const std::string&)> units)
      : rep_(rep), rounds_(rounds), units_(std::move(units)) {}

  // ns per unit of NAME in round R, or -1 when that run is missing or failed.
  double ns(const std::string& name, int r) const {
    const auto* run = rep_.find(rounds_.run_name(name, r));
    const double units = run ? units_(name) : 0;
    return units > 0 ? per_unit_ns(*run, units, false) : -1;
  }
  // Median over the rounds of f(ns of each of NAMES in that round); a round in which
  // one of them is missing is left out; -1 when none is left.
  template <class F>
  double med(const std::vector<std::string>& names, F f) const {
    std::vector<double> v;
    for (int r = 0; r < rounds_.count(); ++r) {
      std::vector<double> x;
      for (const auto& n : names) x.push_back(ns(n, r));
      if (std::any_of(x.begin(), x.end(), [](double d) { return d <= 0; })) continue;
      v.push_back(f(x));
    }
    return v.empty() ? -1 : median(v);
  }

 private:
  const KeepingReporter& rep_;
  const Rounds& rounds_;
  std::function<double(const std::string&)> units_;
};

// argv with `--benchmark_min_time=<default>` put first, so that one given on the
// command line (parsed later) still wins.
inline std::vector<char*> with_default_min_time(int argc, char** argv, const char* flag) {
  std::vector<char*> out(argv, argv + argc);
  out.insert(out.begin() + 1, const_cast<char*>(flag));
  return out;
}

// ---- what the *_cost binaries share -------------------------------------------------

// The command line of a *_cost binary, less what Google Benchmark takes.
struct CostOptions {
  int rounds = 5;                            // --rounds=N
  std::string profile;                       // --profile=NAME[:CALLS]: NAME, or empty
  long profile_calls = 10'000'000;           // and CALLS
  std::set<std::string, std::less<>> flags;  // the binary's own flags that were given

  bool given(std::string_view flag) const { return flags.count(flag) != 0; }
};

// Takes `--rounds=N`, `--profile=NAME[:CALLS]` and the binary's OWN flags out of argv
// into *O and initialises benchmark with the rest, `--benchmark_min_time=0.1` unless
// the command line names another. False when benchmark did not recognise an argument
// (it has said which).
inline bool init_cost(int argc, char** argv, std::initializer_list<std::string_view> own,
                      CostOptions* o) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (parse_rounds(argv[i], &o->rounds)) continue;
    if (std::strncmp(argv[i], "--profile=", 10) == 0) {
      o->profile = argv[i] + 10;
      if (auto colon = o->profile.find(':'); colon != std::string::npos) {
        o->profile_calls = std::atol(o->profile.c_str() + colon + 1);
        o->profile.resize(colon);
      }
    } else if (std::find(own.begin(), own.end(), argv[i]) != own.end()) {
      o->flags.insert(argv[i]);
    } else {
      args.push_back(argv[i]);
    }
  }
  auto full = with_default_min_time(static_cast<int>(args.size()), args.data(),
                                    "--benchmark_min_time=0.1");
  int n = static_cast<int>(full.size());
  benchmark::Initialize(&n, full.data());
  return !benchmark::ReportUnrecognizedArguments(n, full.data());
}

// Discovers this process's sites and rewrites them into one 5-byte NOP each; says how
// many were left alone because other threads exist.
inline void canonicalize_sites() {
  auto& table = sites::SiteTable::instance();
  must(table.discover(), "discovering sites");
  const size_t left = must(table.canonicalize(sites::Quiescence::live), "canonicalising sites");
  if (left) fmt::print("note: {} sites left uncanonicalised (other threads exist)\n", left);
}

// `--profile`: O.profile_calls calls of the copy of the configuration named O.profile,
// made by LOOP (each binary has its own, by a name for callgrind's --toggle-collect);
// returns main's exit code. fail()s when no configuration has that name.
template <class Config>
int run_profile(const CostOptions& o, const std::vector<Config>& cfgs,
                int (*loop)(int (*)(int), long)) {
  for (const Config& c : cfgs)
    if (c.name == o.profile) {
      const int r = loop(c.fn, o.profile_calls);
      fmt::print("{}: {} calls, acc {}\n", c.name, o.profile_calls, r);
      return 0;
    }
  fail("--profile: no configuration named " + o.profile);
}

// The timed part: every configuration's copy (its `fn`) called by dependent_calls, CALLS
// per iteration, registered in the interleaved rounds RS and run; REP keeps the runs for
// the summary. The method goes into the context, ending in how the summary compares
// (COMPARED: "ratios", "differences").
template <class Config>
void run_rounds(const Rounds& rs, const std::vector<Config>& cfgs, int calls,
                std::string_view compared, KeepingReporter& rep) {
  add_context(fmt::format(
      "{} dependent calls through a volatile pointer per iteration, one function copy per "
      "configuration; configurations interleaved over {} rounds; {} against the "
      "no-site copy of the same round",
      calls, rs.count(), compared));
  rs.register_all(cfgs, [calls](const std::string& name, const Config& c) {
    benchmark::RegisterBenchmark(name.c_str(), dependent_calls, c.fn, calls);
  });
  benchmark::RunSpecifiedBenchmarks(&rep);
}

}  // namespace utramp::bench
