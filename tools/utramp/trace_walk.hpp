// What replay, report, dump and hist share: opening a trace directory with its
// diagnostics, rebuilding each thread's call stack from the event stream, and the text
// conventions (names, durations, values).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "symbols/glob.hpp"
#include "symbols/names.hpp"
#include "trace/event.hpp"
#include "trace/trace_dir.hpp"

namespace utramp::cli {

// Opens DIR for subcommand `cmd`; prints the reader's warnings to stderr. On failure
// prints the error and returns nullopt (the caller exits non-zero).
std::optional<trace::TraceReader> open_trace(const std::string& cmd, const std::string& dir);

// A captured argument or return value.
struct Value {
  trace::ValueFormat format = trace::ValueFormat::none;
  uint64_t raw = 0;         // integer, pointer, double's bits; string: the pointer
  std::string str;          // string: the bytes recorded
  uint32_t str_len = 0;     // string: the length announced
  bool unreadable = false;  // string: the pointer could not be read
  bool has() const { return format != trace::ValueFormat::none; }
};
// `42`, `-1`, `0x7ffd1234`, `1.5`, `"text"`, `NULL`.
std::string format_value(const Value& v);

struct Frame {
  uint64_t addr = 0;
  uint16_t depth = 0;
  uint64_t entry = 0;  // ticks
  uint64_t caller = 0;
  std::vector<std::pair<uint8_t, Value>> args;  // (index, value), in recorded order
  uint64_t child_ticks = 0;                     // time of completed direct children
  bool synthetic = false;  // made up for an exit whose entry is not in the trace
};

enum class ExitKind : uint8_t {
  normal,
  unwound,       // an exception went through it
  longjmp,       // a longjmp went over it
  not_recorded,  // a later event showed it gone, its exit is not in the trace
  trace_end,     // still open when the thread's events end
};

struct Exit {
  ExitKind kind = ExitKind::normal;
  uint64_t time = 0;   // ticks; for not_recorded/trace_end, when it was found gone
  bool timed = false;  // `time` is the real end (duration known)
  Value ret;
};

struct WalkThread {
  uint32_t pid = 0, tid = 0;
  std::vector<Frame> stack;  // outermost first; enter/exit see the frame on top
  uint64_t events = 0;       // events seen (for diagnostics)
  uint64_t last_time = 0;
  uint64_t index = 0;       // order of first appearance
  bool after_loss = false;  // the last event was a loss: orphan args are expected
  // Which execution stack of its thread this is (`context` events: swapcontext): 0 the
  // thread's first, then 1, 2... in order of appearance. Each stack is a WalkThread of
  // its own (its own call stack) with the thread's pid and tid.
  uint32_t context = 0;
};

// Rebuilds call stacks from a stream of events of any number of threads (merged or one
// after the other) and reports calls in order. An entry is reported once its arguments
// are known, an exit once its string return value is. Inconsistent input (lost events,
// a ring that overwrote its start) is repaired visibly: frames whose exit is missing are
// closed as not_recorded, exits without an entry get a synthetic frame.
// --tid and --pid of replay and report: with neither, every thread; else the threads
// named by id and every thread of the processes named. A process's main thread has the
// process's id as its own: --tid shows that thread only.
struct ThreadSelection {
  std::set<uint32_t> tids, pids;
  ThreadSelection(const std::vector<uint32_t>& t, const std::vector<uint32_t>& p)
      : tids(t.begin(), t.end()), pids(p.begin(), p.end()) {}
  bool operator()(uint32_t pid, uint32_t tid) const {
    return (tids.empty() && pids.empty()) || tids.count(tid) || pids.count(pid);
  }
};

class Walker {
 public:
  struct Handler {
    virtual ~Handler() = default;
    virtual void enter(WalkThread& t, const Frame& f) = 0;
    virtual void exit(WalkThread& t, const Frame& f, const Exit& x) = 0;
    // lost, fork, depth_overrun
    virtual void marker(WalkThread& t, const trace::Event& e) = 0;
    virtual void corrupt(WalkThread& t, const std::string& what) = 0;
    // The `function` tracer's calls (entries only; f.caller is the return address).
    virtual void call(WalkThread& t, const Frame& f) { (void)t, (void)f; }
  };
  // flat: the trace is the `function` tracer's (info.tracer): entries are calls that
  // never get an exit, passed to Handler::call.
  explicit Walker(Handler& h, bool flat = false) : h_(h), flat_(flat) {}
  void feed(uint32_t pid, uint32_t tid, const trace::Event& e);
  // Closes what is still open (trace_end), thread by thread in order of appearance.
  void finish();
  void finish_thread(WalkThread& t);
  // Feeds a whole reader: merged by time, or thread after thread.
  void run(const trace::TraceReader& r, bool merge);

 private:
  void flush();
  void close_to(WalkThread& t, size_t keep, uint64_t time);
  WalkThread& thread(uint32_t pid, uint32_t tid);
  WalkThread& switch_stack(WalkThread& t, const trace::Event& e);

  Handler& h_;
  bool flat_;
  // Every thread's execution stacks, by (pid << 32 | tid, the stack's name: the
  // ucontext_t it is saved to, 0 before the first switch), and the one each thread runs
  // on. A stack replaced by another of its name is kept in `retired_` (handlers hold
  // its address).
  std::map<std::pair<uint64_t, uint64_t>, std::unique_ptr<WalkThread>> stacks_;
  std::map<uint64_t, uint64_t> current_;
  std::map<uint64_t, uint32_t> contexts_;  // stacks seen per thread
  std::vector<std::unique_ptr<WalkThread>> retired_;
  uint64_t next_index_ = 0;
  // An entry or exit waiting for the arg/string events that follow it.
  enum class Pending { none, entry, exit, call } pending_ = Pending::none;
  WalkThread* pending_thread_ = nullptr;
  Frame pending_frame_;
  Exit pending_exit_;
  Value* filling_ = nullptr;  // the string value the next `string` events extend
};

// The names of the functions at traced addresses, in the style asked for (simple by
// default: symbols/names.hpp), cached per symbol table. An address inside a function
// is "name+0x10"; one in no function, "0x401000". TIME (an event's, in the trace's
// time base) chooses the program when the process exec'd (--follow-exec); without it,
// the last program it ran.
class Names {
 public:
  Names(const trace::TraceReader& r, symbols::Style style) : r_(r), style_(style) {}
  const std::string& get(uint32_t pid, uint64_t addr, uint64_t time = UINT64_MAX);
  // The function containing a code address (a caller's return address), no offset.
  std::string containing(uint32_t pid, uint64_t addr, uint64_t time = UINT64_MAX);
  // Whether the function at ADDR is one GLOBS name (symbols/glob.hpp: whatever the style).
  bool matches(uint32_t pid, uint64_t addr, const symbols::Globs& globs, uint64_t time = UINT64_MAX);

 private:
  struct Entry {
    symbols::Name name;  // the function's symbol
    std::string shown;
  };
  const Entry& entry(uint32_t pid, uint64_t addr, uint64_t time);
  const trace::TraceReader& r_;
  symbols::Style style_;
  std::map<std::pair<const trace::SymbolTable*, uint64_t>, Entry> cache_;
};

// What a `context` event says, on the stack T the thread runs on after it: "switch to
// context 1"; "... (the stack left was not kept: too many)"; "context at 0x5610... not
// followed: too many".
std::string context_text(const WalkThread& t, const trace::Event& e);

// Durations: "  1.234 us" (10 columns), unit chosen so the number is below 1000, or the
// fixed one ("ns", "us", "ms", "s"). Empty unit means auto.
std::string format_duration(double ns, const std::string& unit = "");
bool valid_unit(const std::string& unit);

// Why a call still open at the end of a thread's events has no exit: "not returned:
// the target was killed by SIGSEGV", "... exited 3" (from the process's
// process-PID.json, or for a trace without one, info.json's for the first process), or
// "not returned by the end of the trace" when how the process ended is unknown or the
// thread's file was cut short (its exit may be in what is missing).
std::string end_note(const trace::TraceReader& r, uint32_t pid, uint32_t tid);

// What `utramp info` shows of a recording, as (what, value) rows: the command line,
// binary, build id, date, tracer, state, exit status, elapsed time, events, processes
// and the number of threads.
std::vector<std::pair<std::string, std::string>> recording_summary(const trace::TraceReader& r);

// Durations in ns of every completed call of a function the globs name (the data of
// `utramp hist` and `report --hist`).
std::vector<uint64_t> function_durations(const trace::TraceReader& r, const symbols::Globs& globs);

}  // namespace utramp::cli
