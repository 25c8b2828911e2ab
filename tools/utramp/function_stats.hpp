// Per function: calls and time (the numbers of `report` and of `report --html`), and the
// losses of the threads chosen.
//
//   Total time: wall time inside the function, a recursive function counted once per
//   outermost call. Self time: minus the time of the traced calls it made. Average and
//   Max: of one call, callees included. Calls whose exit is not in the trace count as
//   calls but have no time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "trace_walk.hpp"

namespace utramp::cli {

struct FunctionStat {
  uint64_t calls = 0, timed = 0;
  double total = 0, self = 0, sum = 0, max = 0;  // ns
  double avg() const { return timed ? sum / static_cast<double>(timed) : 0.0; }
};

class FunctionStats final : public Walker::Handler {
 public:
  FunctionStats(const trace::TraceReader& r, Names& names, const ThreadSelection& selection)
      : r_(r), names_(names), selection_(selection) {}
  void enter(WalkThread& t, const Frame& f) override;
  void exit(WalkThread& t, const Frame& f, const Exit& x) override;
  void call(WalkThread& t, const Frame& f) override;
  void marker(WalkThread& t, const trace::Event& e) override;
  void corrupt(WalkThread&, const std::string&) override { ++corrupt_; }

  const std::map<std::string, FunctionStat>& stats() const { return stats_; }
  // Events lost per thread (pid, tid): what its events say, or the recorder's count
  // (info.json) when more (what a cut trace did not save, losses after its last event).
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> lost() const;
  uint64_t overruns() const { return overruns_; }  // calls below the depth limit
  uint64_t untimed() const { return untimed_; }    // calls without a recorded exit
  uint64_t corrupt() const { return corrupt_; }    // malformed events ignored

 private:
  const trace::TraceReader& r_;
  Names& names_;
  const ThreadSelection& selection_;
  std::map<std::string, FunctionStat> stats_;
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> lost_;  // (pid, tid): lost events marked
  uint64_t overruns_ = 0, untimed_ = 0, corrupt_ = 0;
};

}  // namespace utramp::cli
