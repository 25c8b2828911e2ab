// The tracers' per-thread state, shared by the general code (graph.cpp) and the fast
// path (graph_fast.cpp: no calls, general registers only). Internal to src/ftrace.
#pragma once

#include <atomic>
#include <cstdint>

#include "ftrace/graph.hpp"
#include "trace/shm_buffers.hpp"

namespace utramp::ftrace::detail {

// Calls deeper than this are counted, not recorded (the -D limit is usually lower).
inline constexpr uint32_t kMaxStack = 2048;
static_assert(kMaxStack <= UINT16_MAX, "a frame saves depths and scope counts as u16");

struct Frame {
  uint64_t sp;      // the image frame of the call: deeper calls have lower addresses
  uint64_t func;
  uint64_t time;
  // kWritten: its entry event is in the buffer (with -t, written lazily); kHidden:
  // deeper than -D, never written; kSwitched: the first frame of a signal handler on
  // its alternate stack, at a higher address than the frames it interrupted (the fast
  // path leaves its exit to the general code, which sees flags != kWritten).
  // kFilter, kNotrace: the call opened a scope (ftrace::Scope); popping the frame closes
  // it, putting the thread's scope state back to what it was before the call (saved_*:
  // absolute values, so that a pop repeated by a repair changes nothing more). The fast
  // path leaves such a frame's exit to the general code, which sees flags != kWritten.
  uint8_t flags;
  static constexpr uint8_t kWritten = 1, kHidden = 2, kSwitched = 4, kFilter = 8, kNotrace = 16;
  uint16_t saved_limit, saved_filter, saved_notrace;  // ThreadTrace's, before the call
  bool written() const { return flags & kWritten; }
  bool hidden() const { return flags & kHidden; }
};
static_assert(sizeof(Frame) == 32, "the saved scope lives in the padding");

// What the fast path may do on this thread: the general code decides, on every event
// it handles, and a fork resets it.
enum class Path : uint8_t {
  general = 0,  // call the general code (no state yet, a fork, -t, arguments...)
  fast = 1,     // state valid, buffer claimed: the fast path handles ordinary events
  ignore = 2,   // this thread is not traced (thread filter, no buffer left)
  // Not recording here (outside every -F scope, or inside a -N one): the fast path
  // ignores ordinary calls without pushing them, but sends to the general code any
  // event that finds the top frame left by longjmp (its scope must close).
  outside = 3,
};

struct ThreadTrace {
  Path path = Path::general;
  uint32_t pid = 0, tid = 0;
  uint32_t fork_gen = 0;    // g_fork_gen when this state was set up for this process
  trace::Producer producer;
  uint32_t depth = 0;       // frames on the stack
  uint64_t overflow = 0;    // calls beyond kMaxStack not on the stack
  uint64_t overruns = 0;    // calls not recorded for the depth limit
  // kSwitched frames on the stack. While there is one, every event goes to the general
  // code (path general): frame addresses compare only within one stack, and a handler
  // left by longjmp shows only as an event off the signal stack (os/signal_stack.hpp).
  uint32_t switched = 0;
  // The depth from which calls are hidden: -D from the root, or from the innermost -F
  // frame (ftrace::Scope); kMaxStack without -D. Read by the C hooks; changed only by the
  // general code, when a scope frame is pushed or popped. (In what was padding: the
  // inline path's offsets stay.)
  uint32_t limit = kMaxStack;
  Frame stack[kMaxStack];
  // Library calls (ftrace/libcall.hpp): the return addresses their hooks replaced, the
  // newest last. Kept apart from the frames (which a fork in the child, or the tracer's
  // repairs, may change): a call can return only through its entry here. Entries are
  // filled in before `nrets` counts them, and read before it drops them (a signal
  // handler's calls push and pop above). Past the inline path's offsets (after `stack`).
  struct Return {
    uint64_t slot;   // where the return address was on the stack
    uint64_t ret;    // the return address the hook replaced
    uint64_t hook;   // the call's ftrace::ImportHook
  };
  static constexpr uint32_t kMaxReturns = 256;
  uint32_t nrets = 0;
  Return rets[kMaxReturns];
  // Scopes (ftrace::Scope): the -F and -N frames on the stack. General code only.
  uint32_t in_filter = 0, in_notrace = 0;
  // Execution stacks (swapcontext coroutines: graph.cpp, "Context switches"). `stack`
  // holds the frames of the stack the thread runs on, named `context` (the ucontext_t
  // it will be saved to; 0 until the first switch); the others are parked in
  // `contexts`, mapped on the first switch.
  uint64_t context = 0;
  struct Contexts* contexts = nullptr;
  // Every thread's state, linked once when it is made (states are never unmapped), so
  // that configure() can send every thread to the general code: an agent configured
  // again in a running process (docs/attach.md) must not let a thread write on into the
  // rings of the recording before.
  ThreadTrace* next_state = nullptr;
};

// The frames of execution stacks the thread switched away from, by name (a ucontext_t
// address). Slots are mapped once per thread (MAP_NORESERVE: only the pages of frames
// actually parked are touched) and never freed: a switch neither allocates nor locks.
inline constexpr uint32_t kMaxContexts = 64;
struct Contexts {
  struct Parked {
    uint64_t key;        // the stack's name
    uint32_t used;       // 0: a free slot
    uint32_t depth;      // as ThreadTrace's
    uint32_t switched;
    uint32_t in_filter, in_notrace, limit;  // as ThreadTrace's
    uint64_t overflow;
    Frame stack[kMaxStack];
  };
  Parked slot[kMaxContexts];
};

// Read by the fast path; set by configure() before any site is attached.
struct FastConfig {
  bool function_tracer = false;  // entries only, data = caller
};
extern FastConfig g_fast __attribute__((visibility("hidden")));

// __thread, not thread_local: no TLS wrapper function to call on access.
extern __thread ThreadTrace* t_trace __attribute__((tls_model("initial-exec"), visibility("hidden")));

// Non-zero while this thread runs tracer code that changes its tracing state: the
// hooks, the general code, the unwind hook, the fork and thread-exit records. A traced
// call made meanwhile — by a signal handler that interrupted that code, or by the
// tracer itself (a traced library function) — would find the state half updated: an
// entry written and its frame not pushed yet, an exit written and its frame not popped,
// a time taken and not written yet. Its events would be misnested or go back in time,
// so they are dropped and counted lost instead (graph.cpp: nested_drop), like a nested
// write of the ring. The ring's own `busy` flag covers only the write itself.
//
// The value is the holder's stack pointer when it took the word: such a call has its
// frame below it (or on the signal stack). A call whose frame is above it, on the same
// stack, comes after a signal handler left the holder by longjmp; the general code then
// repairs what the holder left half done and takes the word over (graph.cpp:
// tracer_held), so that the thread is not dropped for good.
//
// One value is no stack pointer: kAtWork, "utramp at work" (ftrace::AtWork). The agent
// sets it while it works on a program's thread (attaching before main or on a dlopen,
// writing its files at a fork or at exit): the library functions it calls may be traced
// (`record --libs`), and its calls are not the program's. They take the general code
// like any call inside the tracer (so the hit path's one check covers both, inline and
// in C), which skips them silently: not recorded, not counted lost.
extern __thread uint64_t t_in_tracer __attribute__((tls_model("initial-exec"), visibility("hidden")));
inline constexpr uint64_t kAtWork = 1;

// The layout of this state, of the ring's producer and of an event, as the images'
// inline path reads and writes them (arch::TracerInline; graph_fast.cpp). `max_depth`:
// -D (0: unlimited). The TLS offsets are this thread's, the same in every thread.
arch::TracerInline inline_layout(uint32_t max_depth) noexcept;

UTRAMP_ALWAYS_INLINE uint64_t stack_pointer() {
  uint64_t sp;
  asm volatile("mov %%rsp, %0" : "=r"(sp));
  return sp;
}

// Holds t_in_tracer for a scope; the caller checked it was 0. A plain store is enough:
// only this thread and its signal handlers use it, and a handler that runs between the
// check and the store returns with it 0 again (signal handlers nest). No calls, so the
// fast path can use it.
struct InTracer {
  __attribute__((always_inline)) InTracer() {
    t_in_tracer = stack_pointer();
    std::atomic_signal_fence(std::memory_order_seq_cst);  // before any state is touched
  }
  __attribute__((always_inline)) ~InTracer() {
    std::atomic_signal_fence(std::memory_order_seq_cst);  // after the last state change
    t_in_tracer = 0;
  }
  InTracer(const InTracer&) = delete;
  InTracer& operator=(const InTracer&) = delete;
};

}  // namespace utramp::ftrace::detail

// The fast path and the general code behind it, as the image calls them: `frame` is the
// image's frame address (rbp), the call's identity on the shadow stack. The fast hooks
// preserve every register but rax and return non-zero when the general code must run;
// the *_general thunks preserve every register (argument and return registers
// included) and call utramp_graph_{entry,exit}_general. (Declared as defined: clang
// refuses a definition whose no_caller_saved_registers the declaration lacks.)
extern "C" {
__attribute__((no_caller_saved_registers)) uint64_t utramp_graph_fast_entry(uint64_t func, uint64_t frame);
__attribute__((no_caller_saved_registers)) uint64_t utramp_graph_fast_exit(uint64_t func, uint64_t frame);
void utramp_graph_entry_thunk(uint64_t func, uint64_t frame);
void utramp_graph_exit_thunk(uint64_t func, uint64_t frame);
void utramp_graph_entry_general(uint64_t func, uint64_t frame);
void utramp_graph_exit_general(uint64_t func, uint64_t frame);
// Functions with a scope (ftrace::scope_hooks): an entry hook that always asks for the
// general code, and thunks to the general entries that open each kind of scope.
__attribute__((no_caller_saved_registers)) uint64_t utramp_graph_scope_entry(uint64_t func, uint64_t frame);
void utramp_graph_filter_entry_thunk(uint64_t func, uint64_t frame);
void utramp_graph_notrace_entry_thunk(uint64_t func, uint64_t frame);
void utramp_graph_filter_entry_general(uint64_t func, uint64_t frame);
void utramp_graph_notrace_entry_general(uint64_t func, uint64_t frame);
}
