// The tracers' fast path: what an image runs around every traced call when nothing
// unusual is going on (state set up, no -t, no arguments, no longjmp to detect, room in
// the ring, not called from inside the tracer). Built with general registers only
// (CMake: -mgeneral-regs-only) and calling nothing, so that the hooks can keep every
// register of the traced call — arguments on entry, return values (rax:rdx, xmm0:xmm1,
// st0) on exit — by saving only the few general registers they use
// (no_caller_saved_registers). A test decodes these functions and fails on any call,
// indirect jump or vector register.
//
// Anything else returns non-zero, and the image calls the general code through a thunk
// that saves the whole register file (utramp_graph_*_thunk below). Each hook holds
// t_in_tracer (graph_state.hpp) from before it reads the thread's state until it has
// updated it: a signal handler's traced call in between goes to the general code, which
// drops it and counts it lost.

#include <algorithm>
#include <cstddef>

#include "arch/cpu.hpp"
#include "ftrace/graph_state.hpp"

#ifndef __GCC_HAVE_DWARF2_CFI_ASM
#error "graph_fast.cpp needs the compiler's CFI directives"
#endif
#if defined(__SSE__) && !defined(UTRAMP_FAST_PATH_ALLOW_SSE)
#error "graph_fast.cpp must be built with -mgeneral-regs-only"
#endif

namespace utramp::ftrace::detail {

namespace {


// Non-zero: the general code must handle this event. Zero with `ts` null: ignored.
// 3: not recording here (Path::outside), see outside().
UTRAMP_ALWAYS_INLINE uint64_t check(ThreadTrace* ts) {
  if (__builtin_expect(ts == nullptr, 0)) return 1;
  return ts->path == Path::fast ? 0 : ts->path == Path::ignore ? 2 : ts->path == Path::outside ? 3 : 1;
}

// An event while the thread records nothing (outside every -F scope, or inside a -N
// one): ignored, the call not pushed, unless the top frame is this call's own (a scope
// frame's exit) or was left by a longjmp (at this address or deeper on the machine
// stack): the general code then pops it and closes its scope. Only reads: a signal
// handler that runs in between leaves the state as it found it.
UTRAMP_ALWAYS_INLINE uint64_t outside(const ThreadTrace* ts, uint64_t frame) {
  const uint32_t d = ts->depth;
  return d && ts->stack[d - 1].sp <= frame ? 1 : 0;
}

}  // namespace

// What the images' inline path (arch/x86_64/image.cpp: inline_entry, inline_exit)
// assumes of the types it reads and writes, beyond their offsets: the width of each
// access it makes, and the shapes it computes with.
template <class T, class M>
constexpr size_t width(M T::*) { return sizeof(M); }
static_assert(sizeof(t_trace) == 8 && sizeof(t_in_tracer) == 8, "loaded/stored as qwords");
static_assert(width(&ThreadTrace::path) == 1 && sizeof(Path) == 1, "cmp byte");
static_assert(width(&ThreadTrace::depth) == 4, "depth in edi: mov/imul/inc dword");
static_assert(width(&ThreadTrace::overflow) == 8, "cmp qword");
static_assert(width(&Frame::sp) == 8 && width(&Frame::func) == 8 && width(&Frame::time) == 8,
              "frame fields stored as qwords");
static_assert(width(&Frame::flags) == 1, "mov/cmp byte");
static_assert(sizeof(trace::Control::head) == 8 && sizeof(trace::Control::pending) == 8,
              "head and pending: qwords");
static_assert(sizeof(trace::Control::busy) == 4 && sizeof(trace::Control::staged) == 4,
              "busy and staged: dwords");
static_assert((sizeof(trace::Event) & (sizeof(trace::Event) - 1)) == 0,
              "slots are indexed with a shift");
static_assert(width(&trace::Event::time) == 8 && width(&trace::Event::addr) == 8 &&
                  width(&trace::Event::data) == 8,
              "time, addr, data: qwords");
static_assert(width(&trace::Event::depth) == 2 && width(&trace::Event::type) == 1 &&
                  width(&trace::Event::flags) == 1 && width(&trace::Event::aux) == 4,
              "the fourth word: depth, type, flags, aux");
static_assert(offsetof(trace::Event, type) == offsetof(trace::Event, depth) + 2 &&
                  offsetof(trace::Event, flags) == offsetof(trace::Event, type) + 1 &&
                  offsetof(trace::Event, aux) == offsetof(trace::Event, flags) + 1 &&
                  offsetof(trace::Event, depth) % 8 == 0,
              "the fourth word is written whole: depth | type << 16, flags and aux 0");
static_assert(kMaxStack <= UINT16_MAX, "a depth below the limit fits the event's u16");

arch::TracerInline inline_layout(uint32_t max_depth) noexcept {
  arch::TracerInline f;
  // t_trace is initial-exec TLS: the same offset from every thread's pointer.
  f.tls_state = static_cast<int64_t>(reinterpret_cast<uintptr_t>(&t_trace) -
                                     reinterpret_cast<uintptr_t>(__builtin_thread_pointer()));
  f.tls_in_tracer = static_cast<int64_t>(reinterpret_cast<uintptr_t>(&t_in_tracer) -
                                         reinterpret_cast<uintptr_t>(__builtin_thread_pointer()));
  f.path = offsetof(ThreadTrace, path);
  f.depth = offsetof(ThreadTrace, depth);
  f.overflow = offsetof(ThreadTrace, overflow);
  f.producer = offsetof(ThreadTrace, producer);
  f.stack = offsetof(ThreadTrace, stack);
  f.path_fast = static_cast<uint8_t>(Path::fast);
  f.frame_size = sizeof(Frame);
  f.f_sp = offsetof(Frame, sp);
  f.f_func = offsetof(Frame, func);
  f.f_time = offsetof(Frame, time);
  f.f_flags = offsetof(Frame, flags);
  f.written = Frame::kWritten;
  const trace::Producer::Layout pl = trace::Producer::layout();
  f.p_ctl = pl.ctl;
  f.p_ring = pl.ring;
  f.p_mask = pl.mask;
  f.p_tail_seen = pl.tail_seen;
  f.c_head = pl.head;
  f.c_busy = pl.busy;
  f.c_pending = pl.pending;
  f.c_staged = pl.staged;
  f.e_time = offsetof(trace::Event, time);
  f.e_addr = offsetof(trace::Event, addr);
  f.e_data = offsetof(trace::Event, data);
  f.e_word3 = offsetof(trace::Event, depth);
  f.e_type = offsetof(trace::Event, type);
  f.event_shift = static_cast<uint8_t>(__builtin_ctz(sizeof(trace::Event)));
  f.type_shift = 8 * (offsetof(trace::Event, type) - offsetof(trace::Event, depth));
  f.type_entry = static_cast<uint8_t>(trace::EventType::entry);
  f.type_exit = static_cast<uint8_t>(trace::EventType::exit);
  f.type_leaf = static_cast<uint8_t>(trace::EventType::leaf);
  f.depth_limit = max_depth ? std::min(max_depth, kMaxStack) : kMaxStack;
  return f;
}

}  // namespace utramp::ftrace::detail

using namespace utramp::ftrace::detail;
using utramp::trace::EventType;

extern "C" __attribute__((no_caller_saved_registers, visibility("hidden"))) uint64_t
utramp_graph_fast_entry(uint64_t func, uint64_t frame) {
  ThreadTrace* ts = t_trace;
  if (const uint64_t c = check(ts)) return c == 3 ? outside(ts, frame) : c == 2 ? 0 : 1;
  if (t_in_tracer) return 1;  // inside the tracer: the general code counts it lost
  InTracer in;
  if (g_fast.function_tracer) {
    // One event per call: who called whom ([frame+8]: the caller's return address, the
    // image being entered by jmp).
    const uint64_t caller = *reinterpret_cast<const uint64_t*>(frame + 8);
    return ts->producer.put_fast(utramp::arch::cycles(), func, caller, 0, EventType::entry, false) ? 0 : 1;
  }
  const uint32_t d = ts->depth;
  // A call's frame is strictly below its caller's: a frame on the shadow stack at this
  // address or deeper on the machine stack was left by a longjmp (at the same address
  // when the function longjmp returned to calls again from where it called the frame
  // left); the depth limits and overflow are counted: all general work.
  if (d && ts->stack[d - 1].sp <= frame) return 1;
  // The depth limit (kMaxStack, -D, or -D below the innermost -F frame): hidden calls.
  if (d >= ts->limit || ts->overflow) return 1;
  const uint64_t t = utramp::arch::cycles();
  // Staged: if the exit comes next, the two become one `leaf` event (half the bytes).
  if (!ts->producer.put_fast(t, func, 0, static_cast<uint16_t>(d), EventType::entry, true)) return 1;
  Frame& f = ts->stack[d];
  f.sp = frame;
  f.func = func;
  f.time = t;
  f.flags = Frame::kWritten;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // filled in before it is pushed
  ts->depth = d + 1;
  return 0;
}

extern "C" __attribute__((no_caller_saved_registers, visibility("hidden"))) uint64_t
utramp_graph_fast_exit(uint64_t func, uint64_t frame) {
  (void)func;
  ThreadTrace* ts = t_trace;
  if (const uint64_t c = check(ts)) return c == 3 ? outside(ts, frame) : c == 2 ? 0 : 1;
  if (t_in_tracer) return 1;  // inside the tracer: the general code counts it lost
  InTracer in;
  const uint32_t d = ts->depth;
  if (ts->overflow || d == 0) return 1;
  Frame& f = ts->stack[d - 1];
  if (f.sp != frame || f.flags != Frame::kWritten) return 1;
  const uint64_t t = utramp::arch::cycles();
  if (!ts->producer.complete_leaf(f.func, f.time, t) &&
      !ts->producer.put_fast(t, f.func, 0, static_cast<uint16_t>(d - 1), EventType::exit, false))
    return 1;
  ts->depth = d - 1;  // popped after its exit is published (graph.cpp: repair_abandoned)
  return 0;
}

// The thunks to the general code: entered by call from an image with rdi = function,
// rsi = frame; save rax, rcx, rdx, rsi, rdi, r8-r11 and xmm0-15 (arguments on entry,
// return values on exit), realign, call, restore. st0 (a long double return) is left
// alone: the general code uses no x87 register.
#define UTRAMP_THUNK(name, target)                                      \
  ".globl " #name "\n"                                                  \
  ".hidden " #name "\n"                                                 \
  ".type " #name ", @function\n"                                        \
  #name ":\n"                                                           \
  ".cfi_startproc\n"                                                    \
  "push %rbp\n"                                                         \
  ".cfi_def_cfa_offset 16\n"                                            \
  ".cfi_offset %rbp, -16\n"                                             \
  "mov %rsp, %rbp\n"                                                    \
  ".cfi_def_cfa_register %rbp\n"                                        \
  "and $-16, %rsp\n"                                                    \
  "push %rax\n push %rcx\n push %rdx\n push %rsi\n push %rdi\n"          \
  "push %r8\n push %r9\n push %r10\n push %r11\n"                       \
  "sub $264, %rsp\n"                                                    \
  "movdqu %xmm0, 0(%rsp)\n movdqu %xmm1, 16(%rsp)\n"                    \
  "movdqu %xmm2, 32(%rsp)\n movdqu %xmm3, 48(%rsp)\n"                   \
  "movdqu %xmm4, 64(%rsp)\n movdqu %xmm5, 80(%rsp)\n"                   \
  "movdqu %xmm6, 96(%rsp)\n movdqu %xmm7, 112(%rsp)\n"                  \
  "movdqu %xmm8, 128(%rsp)\n movdqu %xmm9, 144(%rsp)\n"                 \
  "movdqu %xmm10, 160(%rsp)\n movdqu %xmm11, 176(%rsp)\n"               \
  "movdqu %xmm12, 192(%rsp)\n movdqu %xmm13, 208(%rsp)\n"               \
  "movdqu %xmm14, 224(%rsp)\n movdqu %xmm15, 240(%rsp)\n"               \
  "call " #target "\n"                                                  \
  "movdqu 0(%rsp), %xmm0\n movdqu 16(%rsp), %xmm1\n"                    \
  "movdqu 32(%rsp), %xmm2\n movdqu 48(%rsp), %xmm3\n"                   \
  "movdqu 64(%rsp), %xmm4\n movdqu 80(%rsp), %xmm5\n"                   \
  "movdqu 96(%rsp), %xmm6\n movdqu 112(%rsp), %xmm7\n"                  \
  "movdqu 128(%rsp), %xmm8\n movdqu 144(%rsp), %xmm9\n"                 \
  "movdqu 160(%rsp), %xmm10\n movdqu 176(%rsp), %xmm11\n"               \
  "movdqu 192(%rsp), %xmm12\n movdqu 208(%rsp), %xmm13\n"               \
  "movdqu 224(%rsp), %xmm14\n movdqu 240(%rsp), %xmm15\n"               \
  "add $264, %rsp\n"                                                    \
  "pop %r11\n pop %r10\n pop %r9\n pop %r8\n"                           \
  "pop %rdi\n pop %rsi\n pop %rdx\n pop %rcx\n pop %rax\n"              \
  "leave\n"                                                             \
  ".cfi_def_cfa %rsp, 8\n"                                              \
  "ret\n"                                                               \
  ".cfi_endproc\n"                                                      \
  ".size " #name ", .-" #name "\n"

asm(".text\n"
    UTRAMP_THUNK(utramp_graph_entry_thunk, utramp_graph_entry_general)
    UTRAMP_THUNK(utramp_graph_exit_thunk, utramp_graph_exit_general)
    UTRAMP_THUNK(utramp_graph_filter_entry_thunk, utramp_graph_filter_entry_general)
    UTRAMP_THUNK(utramp_graph_notrace_entry_thunk, utramp_graph_notrace_entry_general));

// The entry hook of a function with a scope (ftrace::scope_hooks): always the general
// code, which opens the scope.
extern "C" __attribute__((no_caller_saved_registers, visibility("hidden"))) uint64_t
utramp_graph_scope_entry(uint64_t, uint64_t) {
  return 1;
}
