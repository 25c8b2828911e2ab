// The calls of a trace merged by their path of names: the one tree behind `graph`,
// `dump --folded`, `dump --flamegraph` and the flame graph of `report --html`.
//
// A node is every call reached by the same path of function names from its root (main
// -> parse -> lex); it counts those calls and adds up their time. A recursive call is a
// node of its own, one level deeper, so a node's total never counts a call twice.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "trace_walk.hpp"

namespace utramp::cli {

struct CallNode {
  std::string name;
  uint64_t calls = 0;   // calls reached by this path (an exit with no entry is none)
  double total_ns = 0;  // time of its timed calls, callees included
  double self_ns = 0;   // the same less the time of their traced callees
  bool timed = true;    // every call's exit was recorded (else the times are lower bounds)
  // In the order first seen (graph shows them so); sorted() gives them by name.
  std::vector<std::unique_ptr<CallNode>> children;

  CallNode* child(const std::string& n);
  std::vector<const CallNode*> sorted() const;

 private:
  std::unordered_map<std::string, CallNode*> index_;
};

// Builds a CallNode tree from a Walker's calls.
//
// root_of(thread) chooses the node under which a thread's outermost calls go (the tree's
// root, or a node per thread or process), or nullptr to leave the thread out. A call with
// no node above it starts a new path only when starts_path() says so (graph: a call of
// FUNC not inside another); the calls below a call left out are left out too unless
// they start a path of their own. The `function` tracer's calls (Handler::call) become
// the two-node path caller -> callee.
class CallTreeBuilder final : public Walker::Handler {
 public:
  using RootOf = std::function<CallNode*(const WalkThread&)>;
  using StartsPath = std::function<bool(const WalkThread&, const Frame&)>;
  CallTreeBuilder(const trace::TraceReader& r, Names& names, RootOf root_of,
                  StartsPath starts_path = nullptr)
      : r_(r), names_(names), root_of_(std::move(root_of)), starts_(std::move(starts_path)) {}

  void enter(WalkThread& t, const Frame& f) override;
  void exit(WalkThread& t, const Frame& f, const Exit& x) override;
  void call(WalkThread& t, const Frame& f) override;
  void marker(WalkThread&, const trace::Event&) override {}
  void corrupt(WalkThread&, const std::string&) override {}

 private:
  const trace::TraceReader& r_;
  Names& names_;
  RootOf root_of_;
  StartsPath starts_;
  std::map<const WalkThread*, std::vector<CallNode*>> stacks_;  // parallel to t.stack
};

// What the outermost nodes under a tree's root are: the calls of every thread merged, or
// one node per process ("pid 12 (prog)") or per thread ("12/13 (prog)") with its
// calls below it.
enum class Grouping : uint8_t { none, process, thread };
// A root_of for CallTreeBuilder: ROOT, or its child for the thread's process or the
// thread; nullptr for a thread SELECTION leaves out.
CallTreeBuilder::RootOf grouped_root(CallNode& root, const trace::TraceReader& r,
                                     const ThreadSelection& selection, Grouping g);

// Where the time was spent, by whom it was called: a tree whose outermost nodes are the
// functions with self time, each with its callers above it (the path read backwards),
// down to the outermost call. A node's self_ns is the self time of the bottom function
// reached through exactly that path of callers (so widths add up as in the normal tree),
// its calls the number of such calls; total_ns is not meaningful and stays 0.
std::unique_ptr<CallNode> inverted(const CallNode& root);

}  // namespace utramp::cli
