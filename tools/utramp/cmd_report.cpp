// utramp report [DIR]: per function, calls and time, as uftrace report.
//
//   Total time: wall time inside the function, a recursive function counted once per
//   outermost call. Self time: minus the time of the traced calls it made. Average and
//   Max: of one call, callees included. Calls whose exit is not in the trace count as
//   calls but have no time.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "commands.hpp"
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
};

struct Stat {
  uint64_t calls = 0, timed = 0;
  double total = 0, self = 0, sum = 0, max = 0;  // ns
};

class Report final : public Walker::Handler {
 public:
  Report(const trace::TraceReader& r, const Options& o)
      : r_(r), names_(r, o.names), selection_(o.tids, o.pids) {}
  void enter(WalkThread& t, const Frame& f) override {
    if (selected(t)) ++stats_[names_.get(t.pid, f.addr, f.entry)].calls;
  }
  void exit(WalkThread& t, const Frame& f, const Exit& x) override {
    if (!selected(t) || f.synthetic) return;
    if (!x.timed || x.time < f.entry) {
      ++untimed_;
      return;
    }
    Stat& s = stats_[names_.get(t.pid, f.addr, f.entry)];
    const uint64_t ticks = x.time - f.entry;
    const double d = r_.to_ns(ticks);
    ++s.timed;
    s.sum += d;
    s.max = std::max(s.max, d);
    s.self += r_.to_ns(ticks >= f.child_ticks ? ticks - f.child_ticks : 0);
    // A recursive call's time is inside its outermost call's already.
    bool nested = false;
    for (size_t i = 0; i + 1 < t.stack.size() && !nested; ++i)
      nested = t.stack[i].addr == f.addr && !t.stack[i].synthetic;
    if (!nested) s.total += d;
  }
  void call(WalkThread& t, const Frame& f) override {
    if (selected(t)) ++stats_[names_.get(t.pid, f.addr, f.entry)].calls;
  }
  void marker(WalkThread& t, const trace::Event& e) override {
    if (!selected(t)) return;
    if (e.type == static_cast<uint8_t>(trace::EventType::lost)) lost_[{t.pid, t.tid}] += e.data;
    if (e.type == static_cast<uint8_t>(trace::EventType::depth_overrun)) overruns_ += e.data;
  }
  void corrupt(WalkThread&, const std::string&) override { ++corrupt_; }

  void print(const Options& o, bool flat) {
    std::vector<std::pair<std::string, Stat>> rows(stats_.begin(), stats_.end());
    auto avg = [](const Stat& s) { return s.timed ? s.sum / static_cast<double>(s.timed) : 0.0; };
    auto key = [&](const Stat& s) -> double {
      if (o.sort == "self") return s.self;
      if (o.sort == "calls") return static_cast<double>(s.calls);
      if (o.sort == "avg") return avg(s);
      if (o.sort == "max") return s.max;
      return s.total;
    };
    std::stable_sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) {
      if (o.sort == "name") return a.first < b.first;
      const double ka = key(a.second), kb = key(b.second);
      return ka != kb ? ka > kb : a.first < b.first;
    });
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
      auto col = [&](double ns, const Stat& s) {
        return fmt::format(" {:>11}", s.timed ? format_duration(ns, o.unit) : std::string("-"));
      };
      for (const auto& [name, s] : rows)
        fmt::print("{}{}{}{} {:>11}  {}\n", col(s.total, s), col(s.self, s), col(avg(s), s),
                   col(s.max, s), s.calls, name);
    }

    // Per thread: what its events say, or the recorder's count (info.json) when more
    // (what a cut trace did not save, losses after its last event).
    std::map<std::pair<uint32_t, uint32_t>, uint64_t> lost = lost_;
    for (const auto& t : r_.info().threads)
      if (selection_(t.pid, t.tid)) lost[{t.pid, t.tid}] = std::max(lost[{t.pid, t.tid}], t.lost);
    uint64_t total = 0;
    for (const auto& [who, n] : lost) total += n;
    if (total) {
      fmt::print("\n# lost events: {}\n", total);
      for (const auto& [who, n] : lost)
        if (n) fmt::print("#   thread {}/{}: {}\n", who.first, who.second, n);
    }
    if (overruns_) fmt::print("# calls below the depth limit, not recorded: {}\n", overruns_);
    if (untimed_) fmt::print("# calls without a recorded exit (not timed): {}\n", untimed_);
    if (r_.info().unclaimed_threads)
      fmt::print("# threads not traced for lack of a buffer: {}\n", r_.info().unclaimed_threads);
    if (corrupt_)
      fmt::print(stderr, "utramp report: {}: {} malformed event(s) ignored (see utramp replay)\n",
                 r_.dir(), corrupt_);
  }

 private:
  bool selected(const WalkThread& t) const {
    return selection_(t.pid, t.tid);
  }
  const trace::TraceReader& r_;
  Names names_;
  ThreadSelection selection_;
  std::map<std::string, Stat> stats_;
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> lost_;  // (pid, tid): lost events marked
  uint64_t overruns_ = 0, untimed_ = 0, corrupt_ = 0;
};

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
  auto r = open_trace("report", o.dir);
  if (!r) return 1;
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
  Report rep(*r, o);
  Walker w(rep, flat);
  w.run(*r, false);
  Options shown = o;
  if (flat && shown.sort == "total") shown.sort = "calls";
  rep.print(shown, flat);
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
  sub->callback([o] {
    if (!name_style("report", o->demangle, &o->names)) std::exit(2);
    std::exit(run(*o));
  });
}

}  // namespace utramp::cli
