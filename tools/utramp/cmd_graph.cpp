// utramp graph FUNC [DIR]: the calls below FUNC, merged (uftrace graph): every call of a
// function FUNC names (a glob, as everywhere) that is not inside another one is a root,
// and the calls below the roots are merged by their path of names, with how many there
// were and their total time:
//
//   # TOTAL TIME     CALLS  FUNCTION
//     10.520 us          2  parse
//      6.210 us          6    lex
//      1.004 us          2    lookup
//      0.310 us          2      hash
//
// Children are in the order they were first seen.
#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "call_tree.hpp"
#include "commands.hpp"
#include "symbols/glob.hpp"
#include "trace_walk.hpp"

namespace utramp::cli {

namespace {

// The calls of FUNC not inside another, and everything below them (call_tree.hpp).
class Graph {
 public:
  Graph(const trace::TraceReader& r, const std::string& glob, symbols::Style style)
      : r_(r), names_(r, style), globs_({glob}) {}

  void run() {
    CallTreeBuilder b(
        r_, names_, [this](const WalkThread&) { return &root_; },
        [this](const WalkThread& t, const Frame& f) {
          return names_.matches(t.pid, f.addr, globs_, f.entry);
        });
    Walker w(b);
    w.run(r_, true);
  }

  bool empty() const { return root_.children.empty(); }

  void print(const std::string& unit) const {
    fmt::print("# TOTAL TIME     CALLS  FUNCTION\n");
    for (const auto& c : root_.children) print(*c, 0, unit);
  }

 private:
  void print(const CallNode& n, int depth, const std::string& unit) const {
    // A call whose exit is missing (longjmp, a crash, the end of the trace) adds no
    // time: the total is marked as a lower bound.
    fmt::print("{:>10}{} {:>9}  {:{}}{}\n", format_duration(n.total_ns, unit), n.timed ? " " : "+",
               n.calls, "", 2 * depth, n.name);
    for (const auto& c : n.children) print(*c, depth + 1, unit);
  }

  const trace::TraceReader& r_;
  Names names_;
  symbols::Globs globs_;
  CallNode root_;
};

struct Options {
  std::string func;
  std::string dir = "utramp.data";
  std::string demangle = "simple";
  std::string unit;
};

int graph(const Options& o) {
  symbols::Style style;
  if (!name_style("graph", o.demangle, &style)) return 2;
  if (!valid_unit(o.unit)) {
    fmt::print(stderr, "utramp graph: unknown unit '{}' (auto, ns, us, ms, s)\n", o.unit);
    return 2;
  }
  auto r = open_trace("graph", o.dir);
  if (!r) return 1;
  if (r->info().tracer == "function") {
    fmt::print(stderr, "utramp graph: {}: recorded with --tracer function (calls without exits): no graph\n",
               o.dir);
    return 1;
  }
  Graph g(*r, o.func, style);
  g.run();
  if (g.empty()) {
    fmt::print(stderr, "utramp graph: no call of a function matching '{}' in {}\n", o.func, o.dir);
    return 1;
  }
  g.print(o.unit);
  return 0;
}

}  // namespace

void add_graph(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("graph", "Show the calls below a function, merged, with counts and total time");
  sub->add_option("func", o->func, "function (glob: see docs/tracing.md)")->required();
  sub->add_option("dir", o->dir, "trace directory")->capture_default_str();
  add_name_options(sub, &o->demangle);
  sub->add_option("--unit", o->unit, "duration unit: auto (default), ns, us, ms, s");
  sub->callback([o] { std::exit(graph(*o)); });
}

}  // namespace utramp::cli
