// What every utramp benchmark binary shares: the machine it ran on (printed in the
// benchmark context and again under the summary, since figures from this field mean
// little without CPU and kernel), a reporter that keeps the runs for the summary, and
// a way to give up loudly on a setup step that failed.
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
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

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

[[noreturn]] inline void die(std::string_view what, const Error& e) {
  std::fflush(stdout);
  fmt::print(stderr, "benchmark setup failed: {}: {} ({})\n", what, e.message, errc_name(e.code));
  std::exit(2);
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

// argv with `--benchmark_min_time=<default>` put first, so that one given on the
// command line (parsed later) still wins.
inline std::vector<char*> with_default_min_time(int argc, char** argv, const char* flag) {
  std::vector<char*> out(argv, argv + argc);
  out.insert(out.begin() + 1, const_cast<char*>(flag));
  return out;
}

}  // namespace utramp::bench
