#include "function_stats.hpp"

#include <algorithm>

namespace utramp::cli {

void FunctionStats::enter(WalkThread& t, const Frame& f) {
  if (selection_(t.pid, t.tid)) ++stats_[names_.get(t.pid, f.addr, f.entry)].calls;
}

void FunctionStats::exit(WalkThread& t, const Frame& f, const Exit& x) {
  if (!selection_(t.pid, t.tid) || f.synthetic) return;
  if (!x.timed || x.time < f.entry) {
    ++untimed_;
    return;
  }
  FunctionStat& s = stats_[names_.get(t.pid, f.addr, f.entry)];
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

void FunctionStats::call(WalkThread& t, const Frame& f) {
  if (selection_(t.pid, t.tid)) ++stats_[names_.get(t.pid, f.addr, f.entry)].calls;
}

void FunctionStats::marker(WalkThread& t, const trace::Event& e) {
  if (!selection_(t.pid, t.tid)) return;
  if (e.type == static_cast<uint8_t>(trace::EventType::lost)) lost_[{t.pid, t.tid}] += e.data;
  if (e.type == static_cast<uint8_t>(trace::EventType::depth_overrun)) overruns_ += e.data;
}

std::map<std::pair<uint32_t, uint32_t>, uint64_t> FunctionStats::lost() const {
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> lost = lost_;
  for (const auto& t : r_.info().threads)
    if (selection_(t.pid, t.tid)) lost[{t.pid, t.tid}] = std::max(lost[{t.pid, t.tid}], t.lost);
  return lost;
}

}  // namespace utramp::cli
