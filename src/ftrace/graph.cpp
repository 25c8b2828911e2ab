#include "ftrace/graph.hpp"

#include "abi/ctx.hpp"
#include "arch/cpu.hpp"
#include "ftrace/graph_state.hpp"
#include "os/signal_stack.hpp"
#include "tramp/threads.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace utramp::ftrace {

namespace detail {
FastConfig g_fast;
__thread ThreadTrace* t_trace = nullptr;
__thread uint64_t t_in_tracer = 0;
}  // namespace detail

namespace {

using detail::Frame;
using detail::InTracer;
using detail::kMaxStack;
using detail::Path;
using detail::t_in_tracer;
using detail::t_trace;
using detail::ThreadTrace;

trace::ShmBuffers* g_buffers = nullptr;
// Set once by configure() and never freed: traced threads read it until the process ends
// (a namespace-scope Options would be destroyed at exit while they still do).
const Options* g_opts = nullptr;
// Read on hit paths: no allocation, no static initialisation guard.
Tracer tracer_kind() { return g_opts ? g_opts->tracer : Tracer::function_graph; }
uint32_t max_depth() { return g_opts ? g_opts->max_depth : 0; }
// The depth limit from the root (-D, at most the stack's size).
uint32_t root_limit() { return max_depth() ? std::min(max_depth(), kMaxStack) : kMaxStack; }
// Some function opens a -F scope: calls outside every one are not recorded.
bool g_filter_scopes = false;
uint64_t g_min_ticks = 0;
// Bumped by after_fork_child() in a forked child (its only thread runs the atfork
// handler), so that the state of that thread is renewed on its next event. Comparing
// it is what tells a child from its parent on the hit path: getpid() is a system call
// (glibc no longer caches it) and cost more than the rest of an event.
uint32_t g_fork_gen = 0;
// Every state made in this process (ThreadTrace::next_state), the newest first.
std::atomic<ThreadTrace*> g_states{nullptr};

// getpid from the kernel, not libc's (a traced function under `record --libs`).
uint32_t own_pid() { return static_cast<uint32_t>(arch::raw_syscall6(SYS_getpid)); }

bool tid_selected(uint32_t tid) {
  if (!g_opts || g_opts->tids.empty()) return true;
  for (uint32_t t : g_opts->tids)
    if (t == tid) return true;
  return false;
}

void emit(ThreadTrace* ts, trace::EventType type, uint64_t time, uint64_t addr, uint64_t data,
          uint16_t depth, uint8_t flags = 0, uint32_t aux = 0);

// Whether the thread records its calls here, as its scopes say (ftrace::Scope): inside a
// -F scope (when there are -F functions), and in no -N scope.
bool recording(uint32_t in_filter, uint32_t in_notrace) {
  return (in_filter || !g_filter_scopes) && !in_notrace;
}

// What the fast path may do on a thread with a ring: ordinary events, unless -t defers
// entries or a signal handler runs on its alternate stack (ThreadTrace::switched); while
// the thread records nothing, it ignores them (Path::outside).
Path fast_or_general(const ThreadTrace* ts) {
  if (g_min_ticks || ts->switched) return Path::general;
  return recording(ts->in_filter, ts->in_notrace) ? Path::fast : Path::outside;
}

// After a scope opened or closed: fast and outside follow it, other paths stay.
void scope_changed(ThreadTrace* ts) {
  if (ts->path == Path::fast || ts->path == Path::outside) ts->path = fast_or_general(ts);
}

// The top frame leaves the shadow stack. `switched` is counted down before depth: cut
// short in between (a handler's longjmp), it is one less than the marked frames, never
// more (close_left_handler() pops while it is non-zero).
void pop_frame(ThreadTrace* ts) {
  const Frame& f = ts->stack[ts->depth - 1];
  if ((f.flags & Frame::kSwitched) && ts->switched && --ts->switched == 0 &&
      ts->path == Path::general)
    ts->path = fast_or_general(ts);
  if (f.flags & (Frame::kFilter | Frame::kNotrace)) {
    // Its scope closes, however the frame leaves (return, longjmp, exception, repair).
    ts->in_filter = f.saved_filter;
    ts->in_notrace = f.saved_notrace;
    ts->limit = f.saved_limit;
    scope_changed(ts);
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  --ts->depth;
}

// An entry at `sp`, at or above the top frame `top`: a longjmp left that frame, unless
// `sp` is on this thread's alternate signal stack and `top` is not — a handler's first
// call there (the stack may lie anywhere, above the thread's included).
bool onto_alt_stack(uint64_t sp, uint64_t top) {
  const os::SignalStack s = os::signal_stack();
  return s.holds(sp) && !s.holds(top);
}

// This thread's state, made on its first event (mmap: async-signal-safe, no malloc),
// and renewed on its first event in a forked child. Also decides what the fast path may
// do on this thread (ThreadTrace::path).
ThreadTrace* state() {
  ThreadTrace* ts = t_trace;
  if (ts && ts->fork_gen == g_fork_gen) return ts->producer.valid() ? ts : nullptr;
  if (!g_buffers) return nullptr;
  // System calls made here, not through libc (arch::raw_syscall6): with `record --libs`
  // getpid, mmap and syscall are traced functions, and their calls from inside the
  // tracer would be dropped and counted as lost events.
  const uint32_t pid = own_pid();
  const bool forked = ts != nullptr;
  if (!ts) {
    const long p = arch::raw_syscall6(SYS_mmap, 0, sizeof(ThreadTrace), PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p < 0 && p > -4096) return nullptr;
    // Default-initialised: the frames and returns are the mapping's zero pages, touched
    // as calls reach them (value-initialising zeroed all 70 KB, a page fault per 4 KiB).
    ts = new (reinterpret_cast<void*>(p)) ThreadTrace;
    t_trace = ts;
    ThreadTrace* head = g_states.load(std::memory_order_relaxed);
    do ts->next_state = head;
    while (!g_states.compare_exchange_weak(head, ts, std::memory_order_release, std::memory_order_relaxed));
  }
  // No ring until one is claimed: a nested_drop() meanwhile must not count into the
  // parent's ring. The generation, which says the state is this process's, is set
  // last: set-up cut short by a signal handler's longjmp is done again at the next
  // event instead of leaving the thread untraced for good.
  ts->producer = trace::Producer();
  ts->path = Path::ignore;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  ts->pid = pid;
  ts->tid = static_cast<uint32_t>(arch::raw_syscall6(SYS_gettid));
  if (!forked) {
    ts->depth = 0;
    ts->overflow = 0;
    ts->switched = 0;
    ts->in_filter = ts->in_notrace = 0;
    ts->limit = root_limit();
  } else {
    // The frames kept decide the limit (the same as before in a forked child; after a
    // new configure(), -D may have changed): the innermost -F frame's, or the root's.
    uint32_t limit = root_limit();
    for (uint32_t i = ts->depth; i; --i)
      if (ts->stack[i - 1].flags & Frame::kFilter) {
        if (max_depth()) limit = std::min(i - 1 + max_depth(), kMaxStack);
        break;
      }
    ts->limit = limit;
  }
  if (!tid_selected(ts->tid) || tramp::t_utramp_thread) {
    ts->depth = 0;
    ts->overflow = 0;
    ts->switched = 0;
    ts->in_filter = ts->in_notrace = 0;
    ts->limit = root_limit();
    ts->fork_gen = g_fork_gen;
    return nullptr;
  }
  ts->producer = g_buffers->claim(ts->pid, ts->tid);
  if (!ts->producer.valid()) {
    ts->fork_gen = g_fork_gen;
    return nullptr;
  }
  ts->path = fast_or_general(ts);
  // A forked child returns through the calls its parent had open: its own stream
  // starts with their entries again (times from before the fork), so that its calls
  // nest under them and their exits have a match.
  if (forked)
    for (uint32_t i = 0; i < ts->depth; ++i) {
      const Frame& f = ts->stack[i];
      if (f.written() && !f.hidden())
        emit(ts, trace::EventType::entry, f.time, f.func, 0, static_cast<uint16_t>(i));
    }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  ts->fork_gen = g_fork_gen;
  return ts;
}

void emit(ThreadTrace* ts, trace::EventType type, uint64_t time, uint64_t addr, uint64_t data,
          uint16_t depth, uint8_t flags, uint32_t aux) {
  trace::Event e{time, addr, data, depth, static_cast<uint8_t>(type), flags, aux};
  ts->producer.write(e);
}

// An event of a call made inside the tracer (t_in_tracer): dropped, and counted lost
// in this thread's ring when it has one. Both events of such a call are (its exit comes
// before the interrupted tracer code resumes), so what is recorded stays nested.
void nested_drop() {
  if (t_in_tracer == detail::kAtWork) return;  // utramp's own call: not the program's
  ThreadTrace* ts = t_trace;
  if (ts && ts->fork_gen == g_fork_gen && ts->path != Path::ignore) ts->producer.drop();
}

// A signal handler left tracer code by longjmp (tracer_held): the ring and the shadow
// stack as that code left them, made consistent again. Every writer publishes an event
// before it pops or after it pushes the frame the event is about, so what can be half
// done is: a write (busy held, the staged flag stale or its slot half written), a frame
// whose exit is published but which is still on the stack, a frame whose entry is
// published but which is not marked written, a frame pushed for a call that never ran.
void repair_abandoned(ThreadTrace* ts) {
  trace::Producer& p = ts->producer;
  Frame* top = ts->depth ? &ts->stack[ts->depth - 1] : nullptr;
  const uint16_t top_depth = static_cast<uint16_t>(ts->depth - 1);
  trace::Event e{};
  // The staged slot is kept when it is the entry of an open call — the top one (perhaps
  // half turned into its leaf), or one below it when the frames above were pushed by
  // the general code without writing (hidden by -D, or cut short before their entry);
  // else it belongs to a call that never ran (an entry left before its frame was
  // pushed), or the flag outlived a leaf already published.
  bool keep = false;
  if (p.staged_event(&e) && e.depth < ts->depth) {
    const Frame& f = ts->stack[e.depth];
    keep = f.written() && e.time == f.time && e.addr == f.func;
  }
  p.release_abandoned(keep);
  if (!top || top->hidden()) return;
  if (keep && e.depth == top_depth) return;  // the top call's entry: it is running
  const bool last = p.last_published(&e) && e.addr == top->func && e.depth == top_depth;
  const auto type = static_cast<trace::EventType>(e.type);
  if (top->written()) {
    // Its exit published, the frame not popped yet.
    const bool closed = last && (type == trace::EventType::leaf
                                     ? e.time == top->time
                                     : (type == trace::EventType::exit ||
                                        type == trace::EventType::exit_longjmp ||
                                        type == trace::EventType::exit_unwound) &&
                                           e.time >= top->time);
    if (closed) pop_frame(ts);
  } else if (last && type == trace::EventType::entry && e.time == top->time) {
    top->flags |= Frame::kWritten;  // its entry published, the frame not marked yet
  } else if (!g_min_ticks) {
    // Pushed by the general code, its entry never written (without -t it is written at
    // once): the hook was left before the call ran.
    pop_frame(ts);
  }
}

// The holder of t_in_tracer was left: repairs what it left half done and releases it.
void take_over() {
  ThreadTrace* ts = t_trace;
  if (ts && ts->fork_gen == g_fork_gen && ts->producer.valid() && ts->path != Path::ignore) {
    InTracer in;
    repair_abandoned(ts);
  }
  t_in_tracer = 0;
}

// Whether tracer code holds this thread (t_in_tracer), seen from a traced call whose
// frame is `frame`: true when the holder still runs (a signal handler interrupted it,
// or it calls a traced function itself: the event is dropped); false when nothing
// holds it, or when a handler left the holder by longjmp (os::holder_still_runs), after
// which what the holder left half done is repaired and the word released for the
// caller to take.
bool tracer_held(uint64_t frame) {
  const uint64_t holder = t_in_tracer;
  if (holder == 0) return false;
  if (holder == detail::kAtWork) return true;  // utramp at work: never left by a longjmp
  if (os::holder_still_runs(holder, frame)) return true;
  take_over();
  return false;
}

// Strings are copied with a fault-safe read: a bad pointer gives "<bad pointer>".
void emit_string(ThreadTrace* ts, uint64_t time, uint64_t /*func*/, uint16_t depth, uint64_t ptr) {
  char buf[64];
  iovec local{buf, sizeof buf};
  iovec remote{reinterpret_cast<void*>(ptr), sizeof buf};
  ssize_t n = ptr ? process_vm_readv(static_cast<pid_t>(ts->pid), &local, 1, &remote, 1, 0) : -1;
  if (n <= 0) {
    // The string may end before a page boundary the 64 bytes cross: retry shorter.
    const uint64_t to_page = 4096 - (ptr & 4095);
    if (ptr && to_page < sizeof buf) {
      local.iov_len = remote.iov_len = to_page;
      n = process_vm_readv(static_cast<pid_t>(ts->pid), &local, 1, &remote, 1, 0);
    }
  }
  size_t len = n > 0 ? strnlen(buf, static_cast<size_t>(n)) : 0;
  const bool bad = n <= 0;
  // One `string` event carries 24 bytes in time/addr/data... keep time for ordering:
  // payload in addr+data (16 bytes) per event, length in aux.
  // An unreadable pointer: one empty string event flagged so (replay shows the
  // pointer); a readable string: 16 bytes per event in addr+data.
  if (bad) {
    emit(ts, trace::EventType::string, time, 0, 0, depth, 1, 0);
    return;
  }
  for (size_t off = 0; off < len || off == 0; off += 16) {
    uint64_t w[2] = {0, 0};
    memcpy(w, buf + off, len - off < 16 ? len - off : 16);
    emit(ts, trace::EventType::string, time, w[0], w[1], depth, 0,
         static_cast<uint32_t>((len << 8) | (off / 16 & 0xff)));
    if (len == 0) break;
  }
}

void write_entry(ThreadTrace* ts, uint32_t i) {
  Frame& f = ts->stack[i];
  if (f.written() || f.hidden()) return;
  emit(ts, trace::EventType::entry, f.time, f.func, 0, static_cast<uint16_t>(i));
  f.flags |= Frame::kWritten;
}

// With -t, entries are written when their call turns out long enough, or when a call
// inside them is written: ancestors first.
void flush_pending(ThreadTrace* ts, uint32_t upto) {
  for (uint32_t i = 0; i <= upto && i < ts->depth; ++i) write_entry(ts, i);
}

// Frames left open by a longjmp over them. `sp` is the frame of the event: an exit's
// own frame is on the stack (stale: everything deeper), a new call's is not, and since
// a call's frame is strictly below its caller's, a frame at the same address is stale
// too (the function longjmp returned to calling again from where it called the frame
// that was left).
void close_stale(ThreadTrace* ts, uint64_t sp, uint64_t time, bool entry) {
  while (ts->depth && (ts->stack[ts->depth - 1].sp < sp ||
                       (entry && ts->stack[ts->depth - 1].sp == sp))) {
    Frame& f = ts->stack[ts->depth - 1];
    if (f.written())
      emit(ts, trace::EventType::exit_longjmp, time, f.func, 0, static_cast<uint16_t>(ts->depth - 1));
    pop_frame(ts);
  }
}

// An event at `sp`, off the alternate signal stack, while handler frames on it are open:
// the handler was left by longjmp (a handler that returns closes its frames first).
void close_left_handler(ThreadTrace* ts, uint64_t sp, uint64_t time) {
  if (!ts->switched || os::signal_stack().holds(sp)) return;
  while (ts->depth && ts->switched) {
    Frame& f = ts->stack[ts->depth - 1];
    if (f.written())
      emit(ts, trace::EventType::exit_longjmp, time, f.func, 0, static_cast<uint16_t>(ts->depth - 1));
    pop_frame(ts);
  }
}

}  // namespace

uint64_t now() noexcept { return arch::cycles(); }

bool at_work() noexcept { return t_in_tracer == detail::kAtWork || tramp::t_utramp_thread; }

AtWork::AtWork() noexcept : saved_(t_in_tracer) {
  t_in_tracer = detail::kAtWork;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // before any call it covers
}

AtWork::~AtWork() {
  std::atomic_signal_fence(std::memory_order_seq_cst);  // after the last call it covers
  t_in_tracer = saved_;
}

void configure(trace::ShmBuffers* buffers, const Options& opts) {
  g_buffers = buffers;
  g_opts = new Options(opts);
  g_min_ticks = static_cast<uint64_t>(static_cast<double>(opts.min_duration_ns) * opts.ticks_per_ns);
  detail::g_fast.function_tracer = opts.tracer == Tracer::function;
  g_filter_scopes = opts.filter_scopes;
  // Every thread's state is renewed on its next event, as after a fork: its fast path
  // no longer writes to the rings it had (those of an earlier configuration, in an
  // agent configured again: docs/attach.md). A thread already past its path check
  // finishes that one write there (the agent keeps old rings mapped: retire()).
  ++g_fork_gen;
  for (ThreadTrace* ts = g_states.load(std::memory_order_acquire); ts; ts = ts->next_state)
    ts->path = Path::general;
}

arch::TracerHooks hooks() {
  arch::TracerHooks h;
  h.entry = reinterpret_cast<uint64_t>(&utramp_graph_fast_entry);
  h.exit = tracer_kind() == Tracer::function ? 0 : reinterpret_cast<uint64_t>(&utramp_graph_fast_exit);
  h.entry_general = reinterpret_cast<uint64_t>(&utramp_graph_entry_thunk);
  h.exit_general = reinterpret_cast<uint64_t>(&utramp_graph_exit_thunk);
  // The images do the hooks' common case themselves: function_graph into discard- or
  // block-mode rings (leaves are made in those modes only; see put_fast()). A ring that
  // looks full sends the event to the general code, where block mode waits.
  h.inline_path = tracer_kind() == Tracer::function_graph && g_buffers &&
                  g_buffers->mode() != trace::BufferMode::overwrite &&
                  !std::getenv("UTRAMP_NO_INLINE_TRACER");
  // The inline path compares the depth with a constant: -D counted from each -F frame
  // varies per thread, which the C hooks read (ThreadTrace::limit).
  if (g_filter_scopes && max_depth()) h.inline_path = false;
  if (h.inline_path) h.fast = detail::inline_layout(max_depth());
  return h;
}

arch::TracerHooks scope_hooks(Scope scope) {
  arch::TracerHooks h = hooks();
  h.inline_path = false;
  h.entry = reinterpret_cast<uint64_t>(&utramp_graph_scope_entry);
  h.entry_general = scope == Scope::filter ? reinterpret_cast<uint64_t>(&utramp_graph_filter_entry_thunk)
                                           : reinterpret_cast<uint64_t>(&utramp_graph_notrace_entry_thunk);
  return h;
}

namespace {

// One call entered: `sp` identifies its frame (deeper calls have lower addresses);
// `rec` and `ctx` (arguments to record) only from programs run by a general image.
void do_entry(ThreadTrace* ts, uint64_t func, uint64_t sp, uint64_t caller,
              const FuncRecord* rec, const uint64_t* ctx, Scope scope = Scope::none) {
  const uint64_t time = now();
  if (tracer_kind() == Tracer::function) {
    // One event per call: who called whom.
    emit(ts, trace::EventType::entry, time, func, caller, 0);
    return;
  }
  close_left_handler(ts, sp, time);
  const bool switching =
      ts->depth && ts->stack[ts->depth - 1].sp <= sp && onto_alt_stack(sp, ts->stack[ts->depth - 1].sp);
  if (!switching) close_stale(ts, sp, time, true);
  // Not recording here (outside every -F scope, inside a -N one): the call is not even
  // pushed, unless it opens a scope.
  if (scope == Scope::none && !recording(ts->in_filter, ts->in_notrace)) return;
  if (ts->depth >= kMaxStack) {
    ++ts->overflow;
    ++ts->overruns;
    return;
  }
  // The frame is filled in before depth makes it part of the stack: code left by a
  // signal handler's longjmp in between must not leave a frame with a stale field.
  const uint32_t d = ts->depth;
  Frame& f = ts->stack[d];
  f.sp = sp;
  f.func = func;
  f.time = time;
  // The scope this call runs in: a -F call opens one (-D counts from it), a -N call one
  // that records nothing.
  uint32_t in_filter = ts->in_filter, in_notrace = ts->in_notrace, limit = ts->limit;
  uint8_t flags = 0;
  if (scope != Scope::none) {
    f.saved_filter = static_cast<uint16_t>(in_filter);
    f.saved_notrace = static_cast<uint16_t>(in_notrace);
    f.saved_limit = static_cast<uint16_t>(limit);
    if (scope == Scope::filter) {
      ++in_filter;
      if (max_depth()) limit = std::min(d + max_depth(), kMaxStack);
      flags = Frame::kFilter;
    } else {
      ++in_notrace;
      flags = Frame::kNotrace;
    }
  }
  const bool shown = recording(in_filter, in_notrace);
  const bool too_deep = shown && d >= limit;
  if (!shown || too_deep) flags |= Frame::kHidden;
  if (switching) flags |= Frame::kSwitched;
  f.flags = flags;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  ts->depth = d + 1;
  // Opened once the frame that closes it is pushed: cut short in between (a signal
  // handler's longjmp), the frame's pop restores what was there.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (scope != Scope::none) {
    ts->in_filter = in_filter;
    ts->in_notrace = in_notrace;
    ts->limit = limit;
    scope_changed(ts);
  }
  if (switching) {
    ++ts->switched;
    ts->path = fast_or_general(ts);
  }
  if (f.hidden()) {
    if (too_deep) ++ts->overruns;  // below the depth limit: counted, as replay says
    return;
  }
  const bool args = rec && rec->nargs && ctx;
  if (!g_min_ticks) {
    // Without -t every open ancestor was written at its entry (or is hidden): write
    // this one only. flush_pending() here made each call cost O(depth).
    write_entry(ts, d);
  } else if (args) {
    flush_pending(ts, d);  // arguments follow their entry, so -t cannot defer it
  }
  if (args) {
    const uint64_t n = abi::ctx_arg_count(ctx);
    for (uint8_t k = 0; k < rec->nargs; ++k) {
      const auto& a = rec->args[k];
      const uint64_t v = a.slot < n ? a.narrow(ctx[a.slot]) : 0;
      emit(ts, trace::EventType::arg, time, func, v, static_cast<uint16_t>(d),
           static_cast<uint8_t>(a.fmt), a.index);
      if (a.fmt == trace::ValueFormat::string) emit_string(ts, time, func, static_cast<uint16_t>(d), v);
    }
  }
}

void do_exit(ThreadTrace* ts, uint64_t sp, const FuncRecord* rec, const uint64_t* ctx) {
  const uint64_t time = now();
  if (ts->overflow) {
    --ts->overflow;
    return;
  }
  close_left_handler(ts, sp, time);
  close_stale(ts, sp, time, false);
  if (!ts->depth) return;  // entered before tracing started on this thread
  const uint32_t d = ts->depth - 1;
  Frame& f = ts->stack[d];
  if (f.sp != sp) return;  // not ours (should not happen)
  // The frame is popped after its exit is written, as everywhere (see tracer_held).
  if (f.hidden()) return pop_frame(ts);
  if (!f.written()) {
    if (time - f.time < g_min_ticks) return pop_frame(ts);  // shorter than -t: dropped whole
    flush_pending(ts, d);  // the ancestors' entries and its own
  }
  const trace::ValueFormat rf = rec && ctx ? rec->ret.fmt : trace::ValueFormat::none;
  const uint64_t ret = rf != trace::ValueFormat::none ? rec->ret.narrow(ctx[abi::ctx_arg_count(ctx) + rec->ret.slot]) : 0;
  emit(ts, trace::EventType::exit, time, f.func, ret, static_cast<uint16_t>(d),
       static_cast<uint8_t>(rf));
  if (rf == trace::ValueFormat::string) emit_string(ts, time, f.func, static_cast<uint16_t>(d), ret);
  pop_frame(ts);
}

}  // namespace

uint64_t graph_entry(uint64_t* ctx) {
  if (tracer_held(reinterpret_cast<uint64_t>(ctx))) {
    nested_drop();
    return 0;
  }
  InTracer in;
  const auto* rec = reinterpret_cast<const FuncRecord*>(ctx[abi::kCtxCookie]);
  if (ThreadTrace* ts = state())
    do_entry(ts, ctx[abi::kCtxFuncIp], reinterpret_cast<uint64_t>(ctx), ctx[abi::kCtxCaller], rec, ctx,
             rec ? rec->scope : Scope::none);
  return 0;
}

uint64_t graph_exit(uint64_t* ctx) {
  if (tracer_held(reinterpret_cast<uint64_t>(ctx))) {
    nested_drop();
    return 0;
  }
  InTracer in;
  if (ThreadTrace* ts = state())
    do_exit(ts, reinterpret_cast<uint64_t>(ctx), reinterpret_cast<const FuncRecord*>(ctx[abi::kCtxCookie]), ctx);
  return 0;
}

void reported_entry(uint64_t func, uint64_t sp, uint64_t caller, Scope scope) {
  if (tracer_held(sp)) {
    nested_drop();
    return;
  }
  InTracer in;
  if (ThreadTrace* ts = state()) do_entry(ts, func, sp, caller, nullptr, nullptr, scope);
}

void scoped_entry(uint64_t func, uint64_t frame, Scope scope) {
  if (tracer_held(frame)) {
    nested_drop();
    return;
  }
  InTracer in;
  if (ThreadTrace* ts = state())
    do_entry(ts, func, frame, *reinterpret_cast<const uint64_t*>(frame + 8), nullptr, nullptr, scope);
}

void reported_exit(uint64_t func, uint64_t sp) {
  if (tracer_held(sp)) {
    nested_drop();
    return;
  }
  InTracer in;
  ThreadTrace* ts = state();
  if (!ts) return;
  // The stack pointer of an exit report is not its entry's: lower after an alloca,
  // higher when the compiler made the report a tail call (gcc -O2 reports the exit by
  // `jmp` after the epilogue). So the exit closes the innermost open call of `func`,
  // and do_exit closes the calls above it as left by longjmp; an exit of a function
  // with no open call is ignored. While the thread records nothing, calls are not pushed
  // (a -N scope, outside every -F one): an exit there is the top scope frame's or none.
  if (!recording(ts->in_filter, ts->in_notrace)) {
    if (ts->depth && ts->stack[ts->depth - 1].func == func) do_exit(ts, ts->stack[ts->depth - 1].sp, nullptr, nullptr);
    return;
  }
  for (uint32_t d = ts->depth; d; --d)
    if (ts->stack[d - 1].func == func) {
      do_exit(ts, ts->stack[d - 1].sp, nullptr, nullptr);
      return;
    }
}

// ---- Context switches ----------------------------------------------------------------
//
// A thread that switches execution stacks (swapcontext coroutines) has one shadow stack
// per execution stack: the one it runs on in ThreadTrace::stack, named
// ThreadTrace::context, the others parked in ThreadTrace::contexts by name. The agent
// tells of each switch from its swapcontext and setcontext (and of each stack made by
// makecontext), before the switch is made, and again when swapcontext returns: the
// thread is back on the stack it left, whoever switched to it (another swapcontext, a
// setcontext, or the uc_link of a context whose function returned, which libc switches
// to without a call of its exported setcontext). A switch parks the stack left under
// its name and takes the one named `to` out of its slot; a name that is not parked is
// not a stack of its own (getcontext saved it on this stack: a jump, which the longjmp
// detection sees). Each switch is recorded (a `context` event), so that readers keep
// the same stacks. Slots are mapped on the thread's first switch and never freed; with
// all of them taken, a stack left with calls open takes the slot of a parked stack with
// none, which is not followed from then on (an event with flags bit 1, as for a stack
// made then); with none such, the stack left is not kept: its calls end there, and the
// event says so (flags bit 0). A switch takes the tracer word: a signal handler's traced call
// meanwhile is dropped and counted lost, as inside any tracer code.

namespace {

detail::Contexts* contexts(ThreadTrace* ts) {
  if (ts->contexts) return ts->contexts;
  const long p = arch::raw_syscall6(SYS_mmap, 0, sizeof(detail::Contexts), PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p < 0 && p > -4096) return nullptr;
  ts->contexts = reinterpret_cast<detail::Contexts*>(p);
  return ts->contexts;
}

detail::Contexts::Parked* parked(detail::Contexts* c, uint64_t key) {
  if (!c) return nullptr;
  for (auto& p : c->slot)
    if (p.used && p.key == key) return &p;
  return nullptr;
}

detail::Contexts::Parked* free_slot(detail::Contexts* c) {
  if (!c) return nullptr;
  for (auto& p : c->slot)
    if (!p.used) return &p;
  return nullptr;
}

// The state of a thread that may switch: none for the function tracer (no stacks).
ThreadTrace* switching_state() {
  if (tracer_kind() == Tracer::function) return nullptr;
  return state();
}

}  // namespace

void new_context(uint64_t ucp) {
  if (tracer_held(detail::stack_pointer())) return;
  InTracer in;
  ThreadTrace* ts = switching_state();
  if (!ts) return;
  detail::Contexts* c = contexts(ts);
  // A stack made anew: whatever was parked under the name (a coroutine that never
  // finished) is gone with it. The thread's own stack may have that name too (it was
  // saved to this ucontext_t before): it is renamed at its next switch.
  detail::Contexts::Parked* p = parked(c, ucp);
  if (!p) p = free_slot(c);
  if (!p) {
    // Switches to it will not be followed: said where it happened (flags bit 1).
    emit(ts, trace::EventType::context, now(), ucp, ucp, static_cast<uint16_t>(ts->depth), 2);
    return;
  }
  p->depth = 0;
  p->overflow = 0;
  p->switched = 0;
  p->in_filter = p->in_notrace = 0;  // a stack of its own: in no scope yet
  p->limit = root_limit();
  p->key = ucp;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // filled in before it is used
  p->used = 1;
}

uint64_t switch_context(uint64_t from, uint64_t to) {
  if (tracer_held(detail::stack_pointer())) return 0;
  InTracer in;
  ThreadTrace* ts = switching_state();
  if (!ts) return 0;
  const uint64_t before = ts->context;
  if (from) ts->context = from;
  if (ts->context == to) return before;
  detail::Contexts* c = contexts(ts);
  detail::Contexts::Parked* next = parked(c, to);
  if (!next) return before;  // not a stack of its own
  const uint64_t time = now();
  // The stack left: parked under its name (replacing a stale stack of that name). With
  // every slot taken, a stack with calls open takes the slot of one with none (made and
  // not started, or finished), which is then not followed, and said so.
  detail::Contexts::Parked* left = parked(c, ts->context);
  if (!left) left = free_slot(c);
  if (!left && ts->depth) {
    for (auto& p : c->slot)
      if (p.used && p.depth == 0 && &p != next) {
        left = &p;
        emit(ts, trace::EventType::context, time, p.key, p.key, static_cast<uint16_t>(ts->depth), 2);
        break;
      }
  }
  if (left) {
    left->used = 0;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    left->key = ts->context;
    left->depth = ts->depth;
    left->overflow = ts->overflow;
    left->switched = ts->switched;
    left->in_filter = ts->in_filter;
    left->in_notrace = ts->in_notrace;
    left->limit = ts->limit;
    std::memcpy(left->stack, ts->stack, sizeof(Frame) * ts->depth);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    left->used = 1;
  }
  // The stack run now: taken out of its slot (it is the thread's until it is left).
  const uint32_t depth = next->depth;
  ts->depth = 0;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(ts->stack, next->stack, sizeof(Frame) * depth);
  ts->overflow = next->overflow;
  ts->switched = next->switched;
  ts->in_filter = next->in_filter;
  ts->in_notrace = next->in_notrace;
  ts->limit = next->limit;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  ts->depth = depth;
  next->used = 0;
  emit(ts, trace::EventType::context, time, ts->context, to, static_cast<uint16_t>(depth),
       left ? 0 : 1);
  ts->context = to;
  ts->path = ts->path == Path::ignore ? Path::ignore : fast_or_general(ts);
  return before;
}

void on_unwind(uint64_t func) {
  // An exception out of a handler that interrupted the tracer.
  if (tracer_held(detail::stack_pointer())) return;
  InTracer in;
  ThreadTrace* ts = t_trace;
  if (!ts || !ts->producer.valid() || ts->pid != own_pid()) return;
  const uint64_t time = now();
  // Frames deeper than the unwound one have their own images (and calls here) unless
  // they were not traced; close down to the first frame of `func`.
  while (ts->depth) {
    const Frame f = ts->stack[ts->depth - 1];
    if (f.written())
      emit(ts, trace::EventType::exit_unwound, time, f.func, 0, static_cast<uint16_t>(ts->depth - 1));
    pop_frame(ts);
    if (f.func == func) break;
  }
}

void after_fork_child() {
  // The next event of this thread (the child's only one) claims a new buffer.
  ++g_fork_gen;
  if (t_trace) t_trace->path = Path::general;
}

void record_fork(uint32_t child_pid) {
  if (tracer_held(detail::stack_pointer())) {
    nested_drop();
    return;
  }
  InTracer in;
  ThreadTrace* ts = state();
  if (!ts) return;
  emit(ts, trace::EventType::fork, now(), 0, child_pid, static_cast<uint16_t>(ts->depth));
}

void close_thread() {
  // At its end no tracer code of this thread can resume: a holder was left by longjmp
  // (or by a signal handler that ends the thread).
  if (t_in_tracer && t_in_tracer != detail::kAtWork) take_over();
  InTracer in;
  ThreadTrace* ts = t_trace;
  if (!ts || ts->pid != own_pid() || !ts->producer.valid()) return;
  if (ts->overruns)
    emit(ts, trace::EventType::depth_overrun, now(), 0, ts->overruns, 0);
  ts->producer.close();
  ts->path = Path::ignore;
}

}  // namespace utramp::ftrace

using utramp::ftrace::detail::InTracer;
using utramp::ftrace::detail::t_in_tracer;
using utramp::ftrace::detail::t_trace;
using utramp::ftrace::detail::ThreadTrace;

extern "C" __attribute__((visibility("hidden"))) void utramp_graph_entry_general(uint64_t func,
                                                                                  uint64_t frame) {
  if (utramp::ftrace::tracer_held(frame)) {
    utramp::ftrace::nested_drop();
    return;
  }
  InTracer in;
  if (ThreadTrace* ts = utramp::ftrace::state())
    utramp::ftrace::do_entry(ts, func, frame, *reinterpret_cast<const uint64_t*>(frame + 8),
                             nullptr, nullptr);
}

extern "C" __attribute__((visibility("hidden"))) void utramp_graph_filter_entry_general(uint64_t func,
                                                                                         uint64_t frame) {
  utramp::ftrace::scoped_entry(func, frame, utramp::ftrace::Scope::filter);
}

extern "C" __attribute__((visibility("hidden"))) void utramp_graph_notrace_entry_general(uint64_t func,
                                                                                          uint64_t frame) {
  utramp::ftrace::scoped_entry(func, frame, utramp::ftrace::Scope::notrace);
}

extern "C" __attribute__((visibility("hidden"))) void utramp_graph_exit_general(uint64_t,
                                                                                 uint64_t frame) {
  if (utramp::ftrace::tracer_held(frame)) {
    utramp::ftrace::nested_drop();
    return;
  }
  InTracer in;
  if (ThreadTrace* ts = utramp::ftrace::state()) utramp::ftrace::do_exit(ts, frame, nullptr, nullptr);
}
