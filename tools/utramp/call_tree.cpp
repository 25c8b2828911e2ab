#include "call_tree.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace utramp::cli {

CallNode* CallNode::child(const std::string& n) {
  auto it = index_.find(n);
  if (it != index_.end()) return it->second;
  children.push_back(std::make_unique<CallNode>());
  children.back()->name = n;
  return index_[n] = children.back().get();
}

std::vector<const CallNode*> CallNode::sorted() const {
  std::vector<const CallNode*> v;
  v.reserve(children.size());
  for (const auto& c : children) v.push_back(c.get());
  std::sort(v.begin(), v.end(), [](const CallNode* a, const CallNode* b) { return a->name < b->name; });
  return v;
}

void CallTreeBuilder::enter(WalkThread& t, const Frame& f) {
  auto& stack = stacks_[&t];
  CallNode* parent = stack.empty() ? nullptr : stack.back();
  CallNode* n = nullptr;
  if (parent) {
    n = parent->child(names_.get(t.pid, f.addr, f.entry));
  } else if (!starts_ || starts_(t, f)) {
    if (CallNode* root = root_of_(t)) n = root->child(names_.get(t.pid, f.addr, f.entry));
  }
  if (n) ++n->calls;
  stack.push_back(n);
}

void CallTreeBuilder::exit(WalkThread& t, const Frame& f, const Exit& x) {
  if (f.synthetic) return;  // never entered: nothing was pushed for it
  auto& stack = stacks_[&t];
  CallNode* n = stack.back();
  stack.pop_back();
  if (!n) return;
  if (!x.timed || x.time < f.entry) {
    n->timed = false;
    return;
  }
  const uint64_t ticks = x.time - f.entry;
  n->total_ns += r_.to_ns(ticks);
  n->self_ns += r_.to_ns(ticks > f.child_ticks ? ticks - f.child_ticks : 0);
}

void CallTreeBuilder::call(WalkThread& t, const Frame& f) {
  CallNode* root = root_of_(t);
  if (!root) return;
  if (f.caller) root = root->child(names_.containing(t.pid, f.caller, f.entry));
  CallNode* n = root->child(names_.get(t.pid, f.addr, f.entry));
  ++n->calls;
  n->timed = false;  // the function tracer records no exits
}

CallTreeBuilder::RootOf grouped_root(CallNode& root, const trace::TraceReader& r,
                                     const ThreadSelection& selection, Grouping g) {
  // The program a process ran (its own process file's command, else the recording's).
  auto program = [&r](uint32_t pid) {
    std::vector<std::string> cmd = r.info().command;
    if (auto it = r.processes().find(pid); it != r.processes().end() && !it->second.command.empty())
      cmd = it->second.command;
    if (cmd.empty()) return std::string();
    const std::string& path = cmd[0];
    return " (" + path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1) + ")";
  };
  return [&root, &selection, g, program](const WalkThread& t) -> CallNode* {
    if (!selection(t.pid, t.tid)) return nullptr;
    switch (g) {
      case Grouping::none:
        return &root;
      case Grouping::process:
        return root.child(fmt::format("pid {}{}", t.pid, program(t.pid)));
      case Grouping::thread:
        return root.child(fmt::format("{}/{}{}", t.pid, t.tid, program(t.pid)));
    }
    return nullptr;
  };
}

namespace {

void invert_into(CallNode& out, std::vector<const CallNode*>& path) {
  const CallNode* bottom = path.back();
  if (bottom->self_ns > 0) {
    CallNode* n = &out;
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      n = n->child((*it)->name);
      n->calls += bottom->calls;
      n->timed = n->timed && bottom->timed;
    }
    n->self_ns += bottom->self_ns;
  }
  for (const auto& c : bottom->children) {
    path.push_back(c.get());
    invert_into(out, path);
    path.pop_back();
  }
}

}  // namespace

std::unique_ptr<CallNode> inverted(const CallNode& root) {
  auto out = std::make_unique<CallNode>();
  out->name = root.name;
  std::vector<const CallNode*> path;
  for (const auto& c : root.children) {
    path.push_back(c.get());
    invert_into(*out, path);
    path.pop_back();
  }
  return out;
}

}  // namespace utramp::cli
