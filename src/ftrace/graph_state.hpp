// The tracers' per-thread state, shared by the general code (graph.cpp) and the fast
// path (graph_fast.cpp: no calls, general registers only). Internal to src/ftrace.
#pragma once

#include <cstdint>

#include "ftrace/graph.hpp"
#include "trace/shm_buffers.hpp"

namespace utramp::ftrace::detail {

// Calls deeper than this are counted, not recorded (the -D limit is usually lower).
inline constexpr uint32_t kMaxStack = 2048;

struct Frame {
  uint64_t sp;      // the image frame of the call: deeper calls have lower addresses
  uint64_t func;
  uint64_t time;
  // kWritten: its entry event is in the buffer (with -t, written lazily); kHidden:
  // deeper than -D, never written.
  uint8_t flags;
  static constexpr uint8_t kWritten = 1, kHidden = 2;
  bool written() const { return flags & kWritten; }
  bool hidden() const { return flags & kHidden; }
};

// What the fast path may do on this thread: the general code decides, on every event
// it handles, and a fork resets it.
enum class Path : uint8_t {
  general = 0,  // call the general code (no state yet, a fork, -t, arguments...)
  fast = 1,     // state valid, buffer claimed: the fast path handles ordinary events
  ignore = 2,   // this thread is not traced (thread filter, no buffer left)
};

struct ThreadTrace {
  Path path = Path::general;
  uint32_t pid = 0, tid = 0;
  uint32_t fork_gen = 0;    // g_fork_gen when this state was set up for this process
  trace::Producer producer;
  uint32_t depth = 0;       // frames on the stack
  uint64_t overflow = 0;    // calls beyond kMaxStack not on the stack
  uint64_t overruns = 0;    // calls not recorded for the depth limit
  Frame stack[kMaxStack];
};

// Read by the fast path; set by configure() before any site is attached.
struct FastConfig {
  bool function_tracer = false;  // entries only, data = caller
  uint32_t max_depth = 0;        // -D (0: unlimited)
};
extern FastConfig g_fast __attribute__((visibility("hidden")));

// __thread, not thread_local: no TLS wrapper function to call on access.
extern __thread ThreadTrace* t_trace __attribute__((tls_model("initial-exec"), visibility("hidden")));

}  // namespace utramp::ftrace::detail

// The fast path and the general code behind it, as the image calls them: `frame` is the
// image's frame address (rbp), the call's identity on the shadow stack. The fast hooks
// preserve every register but rax and return non-zero when the general code must run;
// the *_general thunks preserve every register (argument and return registers
// included) and call utramp_graph_{entry,exit}_general.
extern "C" {
uint64_t utramp_graph_fast_entry(uint64_t func, uint64_t frame);
uint64_t utramp_graph_fast_exit(uint64_t func, uint64_t frame);
void utramp_graph_entry_thunk(uint64_t func, uint64_t frame);
void utramp_graph_exit_thunk(uint64_t func, uint64_t frame);
void utramp_graph_entry_general(uint64_t func, uint64_t frame);
void utramp_graph_exit_general(uint64_t func, uint64_t frame);
}
