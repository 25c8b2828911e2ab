// Interposed: swapcontext, setcontext and makecontext, so that the tracer keeps one
// shadow stack per execution stack (ftrace/graph.hpp: switch_context; docs/tracing.md,
// "Stack switches"). The program's calls reach these through its PLT (the agent is
// preloaded, so its definitions come first); libc's own internal switch (a context
// whose function returns goes to its uc_link) calls none of them, and is seen when the
// swapcontext that left the stack returns.
#include <dlfcn.h>
#include <ucontext.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "common/init.hpp"
#include "ftrace/graph.hpp"

namespace utramp::agent::contexts {

using SwapFn = int (*)(ucontext_t*, const ucontext_t*);
using SetFn = int (*)(const ucontext_t*);

constexpr const char* kNames[] = {"swapcontext", "setcontext", "makecontext"};
std::atomic<void*> g_real[3];

__attribute__((constructor(UTRAMP_INIT_GLUE))) void resolve() {
  for (int i = 0; i < 3; ++i) g_real[i].store(dlsym(RTLD_NEXT, kNames[i]), std::memory_order_relaxed);
}

// The real function (a call before our constructor ran asks the loader then).
void* real(int which) {
  void* fn = g_real[which].load(std::memory_order_relaxed);
  if (!fn) {
    fn = dlsym(RTLD_NEXT, kNames[which]);
    if (!fn) abort();  // called, so libc defines it
    g_real[which].store(fn, std::memory_order_relaxed);
  }
  return fn;
}

uint64_t name(const ucontext_t* ucp) { return reinterpret_cast<uint64_t>(ucp); }

}  // namespace utramp::agent::contexts

extern "C" {

// The stack left is saved to oucp: that is its name from now on. When this returns, the
// thread is back on it, whoever switched to it.
int swapcontext(ucontext_t* oucp, const ucontext_t* ucp) {
  namespace ctx = utramp::agent::contexts;
  const auto fn = reinterpret_cast<ctx::SwapFn>(ctx::real(0));
  utramp::ftrace::switch_context(ctx::name(oucp), ctx::name(ucp));
  const int r = fn(oucp, ucp);
  utramp::ftrace::switch_context(0, ctx::name(oucp));
  return r;
}

// The stack left keeps its name (a context saved to it earlier may come back to it).
int setcontext(const ucontext_t* ucp) {
  namespace ctx = utramp::agent::contexts;
  const auto fn = reinterpret_cast<ctx::SetFn>(ctx::real(1));
  const uint64_t left = utramp::ftrace::switch_context(0, ctx::name(ucp));
  const int r = fn(ucp);  // returns only when it failed: still on the stack left
  utramp::ftrace::switch_context(0, left);
  return r;
}

// Called by the makecontext interposer below; returns the real function.
__attribute__((visibility("hidden"))) void* utramp_agent_makecontext(ucontext_t* ucp) {
  namespace ctx = utramp::agent::contexts;
  utramp::ftrace::new_context(ctx::name(ucp));
  return ctx::real(2);
}

}  // extern "C"

// makecontext is variadic (the function's int arguments, in registers and on the
// stack): its interposer keeps every argument register (and al) and the stack as the
// caller left them, and jumps to the real one. Seven pushes over the return address
// align the stack for the call.
asm(".text\n"
    ".globl makecontext\n"
    ".type makecontext, @function\n"
    "makecontext:\n"
    ".cfi_startproc\n"
    "push %rdi\n .cfi_adjust_cfa_offset 8\n"
    "push %rsi\n .cfi_adjust_cfa_offset 8\n"
    "push %rdx\n .cfi_adjust_cfa_offset 8\n"
    "push %rcx\n .cfi_adjust_cfa_offset 8\n"
    "push %r8\n .cfi_adjust_cfa_offset 8\n"
    "push %r9\n .cfi_adjust_cfa_offset 8\n"
    "push %rax\n .cfi_adjust_cfa_offset 8\n"
    "call utramp_agent_makecontext\n"
    "mov %rax, %r11\n"
    "pop %rax\n .cfi_adjust_cfa_offset -8\n"
    "pop %r9\n .cfi_adjust_cfa_offset -8\n"
    "pop %r8\n .cfi_adjust_cfa_offset -8\n"
    "pop %rcx\n .cfi_adjust_cfa_offset -8\n"
    "pop %rdx\n .cfi_adjust_cfa_offset -8\n"
    "pop %rsi\n .cfi_adjust_cfa_offset -8\n"
    "pop %rdi\n .cfi_adjust_cfa_offset -8\n"
    "jmp *%r11\n"
    ".cfi_endproc\n"
    ".size makecontext, .-makecontext\n");
