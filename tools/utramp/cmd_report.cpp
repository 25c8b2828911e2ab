// utramp report [DIR]: per function, calls and time, as uftrace report (the numbers:
// function_stats.hpp); --html: the same with a flame graph, timelines and the
// recording's metadata in one page (html_report.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "commands.hpp"
#include "function_stats.hpp"
#include "html_report.hpp"
#include "hist_print.hpp"
#include "trace_walk.hpp"

namespace utramp::cli {

namespace {

struct Options {
  std::string dir = "utramp.data";
  std::string sort = "total";
  std::vector<uint32_t> tids, pids;
  std::string unit;
  std::string demangle = "simple";
  symbols::Style names = symbols::Style::simple;  // from `demangle`
  std::vector<std::string> hist;
  std::string hist_unit = "nsecs";
  bool html = false;
};

// Sorted as --sort says: the largest first, ties by name.
std::vector<std::pair<std::string, FunctionStat>> sorted_rows(
    const std::map<std::string, FunctionStat>& stats, const std::string& sort) {
  std::vector<std::pair<std::string, FunctionStat>> rows(stats.begin(), stats.end());
  auto key = [&](const FunctionStat& s) -> double {
    if (sort == "self") return s.self;
    if (sort == "calls") return static_cast<double>(s.calls);
    if (sort == "avg") return s.avg();
    if (sort == "max") return s.max;
    return s.total;
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) {
    if (sort == "name") return a.first < b.first;
    const double ka = key(a.second), kb = key(b.second);
    return ka != kb ? ka > kb : a.first < b.first;
  });
  return rows;
}

void print(const trace::TraceReader& r, const FunctionStats& st, const Options& o, bool flat) {
  const auto rows = sorted_rows(st.stats(), o.sort);
  if (flat) {
    // The function tracer records calls, not durations.
    fmt::print("{:>12}  {}\n{:>12}  {}\n", "Calls", "Function",
               "==========", "====================");
    for (const auto& [name, s] : rows) fmt::print(" {:>11}  {}\n", s.calls, name);
  } else {
    fmt::print("{:>12}{:>12}{:>12}{:>12}{:>12}  {}\n", "Total time", "Self time", "Average",
               "Max", "Calls", "Function");
    fmt::print("{0:>12}{0:>12}{0:>12}{0:>12}{0:>12}  {1}\n",
               "==========", "====================");
    // A space always separates columns, even when a fixed unit makes numbers wide.
    auto col = [&](double ns, const FunctionStat& s) {
      return fmt::format(" {:>11}", s.timed ? format_duration(ns, o.unit) : std::string("-"));
    };
    for (const auto& [name, s] : rows)
      fmt::print("{}{}{}{} {:>11}  {}\n", col(s.total, s), col(s.self, s), col(s.avg(), s),
                 col(s.max, s), s.calls, name);
  }

  const auto lost = st.lost();
  uint64_t total = 0;
  for (const auto& [who, n] : lost) total += n;
  if (total) {
    fmt::print("\n# lost events: {}\n", total);
    for (const auto& [who, n] : lost)
      if (n) fmt::print("#   thread {}/{}: {}\n", who.first, who.second, n);
  }
  if (st.overruns()) fmt::print("# calls below the depth limit, not recorded: {}\n", st.overruns());
  if (st.untimed()) fmt::print("# calls without a recorded exit (not timed): {}\n", st.untimed());
  if (r.info().unclaimed_threads)
    fmt::print("# threads not traced for lack of a buffer: {}\n", r.info().unclaimed_threads);
  if (st.corrupt())
    fmt::print(stderr, "utramp report: {}: {} malformed event(s) ignored (see utramp replay)\n",
               r.dir(), st.corrupt());
}

int run(const Options& o) {
  static const std::set<std::string> sorts{"total", "self", "calls", "avg", "max", "name"};
  if (!sorts.count(o.sort)) {
    fmt::print(stderr,
               "utramp report: unknown sort key '{}' (total, self, calls, avg, max, name)\n",
               o.sort);
    return 2;
  }
  if (!valid_unit(o.unit)) {
    fmt::print(stderr, "utramp report: unknown unit '{}' (auto, ns, us, ms, s)\n", o.unit);
    return 2;
  }
  if (o.hist_unit != "nsecs" && o.hist_unit != "usecs" && o.hist_unit != "msecs") {
    fmt::print(stderr, "utramp report: unknown histogram unit '{}' (nsecs, usecs, msecs)\n",
               o.hist_unit);
    return 2;
  }
  if (o.html && !o.hist.empty()) {
    fmt::print(stderr, "utramp report: --html and --hist exclude each other\n");
    return 2;
  }
  auto r = open_trace("report", o.dir);
  if (!r) return 1;
  if (o.html) {
    const std::string page = html_report(*r, ThreadSelection(o.tids, o.pids), o.names);
    std::fwrite(page.data(), 1, page.size(), stdout);
    return 0;
  }
  if (!o.hist.empty()) {
    const auto durations = function_durations(*r, symbols::Globs(o.hist));
    if (durations.empty()) {
      fmt::print(stderr, "utramp report: no completed call of {} in {}\n", fmt::join(o.hist, ", "),
                 o.dir);
      return 1;
    }
    print_latency_hist(std::cout, durations, o.hist_unit);
    return 0;
  }
  const bool flat = r->info().tracer == "function";
  if (flat && o.sort != "calls" && o.sort != "name" && o.sort != "total") {
    fmt::print(
        stderr,
        "utramp report: a `function` tracer trace has no durations: sort by calls or name\n");
    return 2;
  }
  Names names(*r, o.names);
  const ThreadSelection selection(o.tids, o.pids);
  FunctionStats st(*r, names, selection);
  Walker w(st, flat);
  w.run(*r, false);
  Options shown = o;
  if (flat && shown.sort == "total") shown.sort = "calls";
  print(*r, st, shown, flat);
  return 0;
}

}  // namespace

void add_report(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "report", "Per function: calls, total and self time, average and maximum of a call");
  sub->add_option("dir", o->dir, "trace directory")->capture_default_str();
  sub->add_option("-s,--sort", o->sort, "sort by total (default), self, calls, avg, max or name");
  sub->add_option("--tid", o->tids, "only these threads, by id")
      ->delimiter(',')
      ->allow_extra_args(false);
  sub->add_option("--pid", o->pids, "only the threads of these processes, by id")
      ->delimiter(',')
      ->allow_extra_args(false);
  sub->add_option("--unit", o->unit, "duration unit: auto (default), ns, us, ms, s");
  add_name_options(sub, &o->demangle);
  sub->add_option("--hist", o->hist,
                  "instead: a log2 histogram of the durations of these functions (glob)")
      ->allow_extra_args(false);
  sub->add_option("--hist-unit", o->hist_unit, "histogram unit: nsecs (default), usecs, msecs");
  sub->add_flag("--html", o->html,
                "instead: one self-contained HTML page with this table (sortable), a flame "
                "graph, per-thread timelines, losses and the recording's metadata");
  sub->callback([o] {
    if (!name_style("report", o->demangle, &o->names)) std::exit(2);
    std::exit(run(*o));
  });
}

}  // namespace utramp::cli
