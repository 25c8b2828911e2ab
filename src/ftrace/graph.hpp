// The function and function_graph tracers (DESIGN §6), as native trampoline programs:
// `function` attaches an entry program to every selected function, `function_graph`
// an entry and an exit program, so exits are seen by the image's call of the original
// (no return address is rewritten), and an exception unwinding through a traced frame
// still produces its exit, marked unwound.
//
// Per-thread state (a shadow stack of open calls) lives in memory mapped for the thread
// on its first event; programs never allocate, lock or print.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "arch/image.hpp"
#include "common/result.hpp"
#include "trace/event.hpp"
#include "trace/shm_buffers.hpp"

namespace utramp::ftrace {

enum class Tracer : uint8_t { function, function_graph };

// uftrace's filters, decided per function when it is attached (record -F/-N): a call of a
// `filter` function opens a scope in which its thread's calls are recorded (down to -D
// levels below it, when -D is given), a call of a `notrace` function one in which
// nothing is (itself included). When some function is a `filter` one (Options::
// filter_scopes), calls outside every filter scope are not recorded. The scopes are the
// shadow stack's: a frame that opened one closes it when it leaves the stack, however
// it leaves (return, longjmp, exception, a repair), so each thread, and each execution
// stack, has its own. Functions with a scope always take the general code at entry
// (scope_hooks); every other call keeps the fast path, which only reads the thread's
// state (graph_state.hpp: ThreadTrace::limit, Path::outside).
enum class Scope : uint8_t { none = 0, filter = 1, notrace = 2 };

// What to record for one function (the link's cookie points to it).
struct FuncRecord {
  uint64_t addr = 0;
  // -A: arguments to record; -R: the return value. Each is read from a ctx slot (the
  // agent maps argN/fpargN to slots with the function's signature) and cut to its width
  // before it is written: `bytes` < 8 keeps the low bytes, sign-extended for a signed
  // integer (an int -1 arrives as 0x00000000ffffffff in a zero-extended slot, or with
  // whatever the caller left in the register's high half).
  struct Value {
    uint8_t slot = 0;   // ctx[slot]; for the return value, from ctx[n] (abi/ctx.hpp)
    trace::ValueFormat fmt = trace::ValueFormat::none;
    uint8_t bytes = 8;  // 1, 2, 4 or 8
    uint8_t index = 0;  // what the trace calls it: argument index (event aux)

    uint64_t narrow(uint64_t raw) const {
      if (bytes >= 8) return raw;
      const unsigned bits = 8u * bytes;
      const uint64_t low = raw & ((uint64_t{1} << bits) - 1);
      if (fmt != trace::ValueFormat::integer) return low;
      const uint64_t sign = uint64_t{1} << (bits - 1);
      return (low ^ sign) - sign;
    }
  };
  Value args[8] = {};
  uint8_t nargs = 0;
  Value ret;  // fmt none: not recorded
  Scope scope = Scope::none;  // record -F/-N (see Scope)
};

struct Options {
  Tracer tracer = Tracer::function_graph;
  uint32_t max_depth = 0;          // -D (0: unlimited)
  uint64_t min_duration_ns = 0;    // -t
  double ticks_per_ns = 1.0;       // to convert -t into time-source ticks
  std::vector<uint32_t> tids;      // thread filter (empty: all)
  // Some functions are attached with Scope::filter: calls outside their scopes are not
  // recorded, and -D counts from the innermost one.
  bool filter_scopes = false;
};

// Sets up the tracer: where events go and how they are filtered. Call before attaching,
// while no other thread traces (the calling thread's state is renewed).
void configure(trace::ShmBuffers* buffers, const Options& opts);

// The hooks a tracer link takes (tramp::AttachType::tracer): the fast path inlined in
// the image around each call. Functions whose arguments or return value are recorded
// use the programs below instead (they need the ctx an image builds for programs).
arch::TracerHooks hooks();
// The hooks of a function with a scope (Scope::filter or notrace): its entry always takes
// the general code, which opens the scope; no inline path.
arch::TracerHooks scope_hooks(Scope scope);

// The programs (utramp_prog_t shape) to attach with a FuncRecord* as cookie.
uint64_t graph_entry(uint64_t* ctx);
uint64_t graph_exit(uint64_t* ctx);

// Calls the program reports itself, with no site (-finstrument-functions: its calls of
// __cyg_profile_func_enter/exit, agent/instrument.cpp), through the general code: the
// same shadow stack, filters, -D and -t as calls seen by images. `sp` places the call
// on the shadow stack as an image's frame does (deeper calls lower): the function's
// stack pointer where it reports. An exit closes the innermost open call of `func`
// (its report's stack pointer may differ from the entry's: graph.cpp).
void reported_entry(uint64_t func, uint64_t sp, uint64_t caller, Scope scope = Scope::none);
void reported_exit(uint64_t func, uint64_t sp);

// Execution stacks (graph.cpp, "Context switches"), told by the agent's swapcontext,
// setcontext and makecontext. A stack is named by the ucontext_t it is saved to.
// new_context: `ucp` was made (makecontext) to run on a stack of its own, from its
// start. switch_context: the thread leaves its stack, which is named `from` from now on
// (0: it keeps its name), for the stack named `to`; nothing happens when `to` names no
// stack the thread knows (a context saved by getcontext on the same stack: a jump the
// longjmp detection sees). Returns the name the left stack had before.
void new_context(uint64_t ucp);
uint64_t switch_context(uint64_t from, uint64_t to);

// A library call's entry (ftrace/libcall.cpp) of a function with a scope: general code.
void scoped_entry(uint64_t func, uint64_t frame, Scope scope);

// Called by the image personality when an exception unwinds through the frame of
// `func` on this thread.
void on_unwind(uint64_t func);

// Call in a forked child before it runs on: its threads get new buffers, and the fork
// is recorded in the parent's stream by the caller of fork (see agent).
void after_fork_child();
void record_fork(uint32_t child_pid);
// Marks this thread's buffer closed (thread exit, process exit).
void close_thread();


// Marks this thread as "utramp at work" for a scope: the traced calls it makes
// meanwhile (utramp's own calls of traced library functions) are not recorded, nor
// counted lost (graph_state.hpp: kAtWork). Scopes nest. Not for tracer code itself.
class AtWork {
 public:
  AtWork() noexcept;
  ~AtWork();
  AtWork(const AtWork&) = delete;
  AtWork& operator=(const AtWork&) = delete;

 private:
  uint64_t saved_;
};

// Whether the calling thread is utramp's own now: inside an AtWork scope, or a thread
// utramp started for itself (tramp::t_utramp_thread). The one recursion rule of every
// handler that runs a user's program on a probed library function (agent/bpf.cpp): a
// hit on such a thread is utramp's own call (an allocation while attaching, say), not
// the program's, and runs nothing. Async-signal-safe: two thread-local reads.
bool at_work() noexcept;

// The time source of events (TSC ticks).
uint64_t now() noexcept;

}  // namespace utramp::ftrace
