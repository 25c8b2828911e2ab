// Fixed machine code of probes, in libutramp itself (so its unwind information comes
// with the library): the return trampoline, its exception landing, the redirect trap,
// and saving the extended register state.
//
// Compiled with -mgeneral-regs-only: everything here runs where the interrupted code's
// vector registers are still live and not yet saved.
#include <unwind.h>

#include <cstdint>
#include <exception>

#include "arch/probe.hpp"
#include "arch/xstate.hpp"
#include "common/init.hpp"

extern "C" {
// Set by set_retprobe_callbacks(); read by the assembly below.
__attribute__((visibility("hidden"))) uint64_t (*utramp_arch_rp_on_return)(utramp::arch::PtRegs*) =
    nullptr;
__attribute__((visibility("hidden"))) uint64_t (*utramp_arch_rp_unwound)(uint64_t) = nullptr;

void utramp_retprobe_trampoline();
void utramp_retprobe_landing();
void utramp_probe_redirect_trap();
[[noreturn]] __attribute__((visibility("hidden"), used)) void utramp_retprobe_uncaught(void*) {
  std::terminate();  // what the exception would have done without the return probe
}
__attribute__((visibility("hidden"), used)) _Unwind_Reason_Code utramp_retprobe_personality(
    int version, _Unwind_Action actions, _Unwind_Exception_Class, _Unwind_Exception* exc,
    _Unwind_Context* ctx);
}

// The return trampoline. A hijacked function returns here with rsp = X (its return
// address was at X-8) and its result in rax/rdx, xmm0/xmm1 or st0/st1.
//
//   X-8     the original return address, written before the final ret
//   X-16    regs.rsp = X     X-24  regs.eflags     X-32  regs.rip (set by on_return)
//   X-40 .. X-152  regs.rdi .. regs.r15     (rbx = &regs across the call)
//
// Everything below X is dead after a return, so no red zone needs skipping. The
// vector registers are untouched here; on_return saves them around a handler that may
// change them.
//
// Unwind information. An exception leaving the hijacked function finds the trampoline
// as its return address: the unwinder looks up (X's return address - 1), the `nop`
// before the entry, and finds this FDE, whose personality takes the exception into the
// landing below (the return address cannot be described in DWARF: it lives in a
// per-thread table). Outside that, the return address is undefined: backtraces end here.
asm(R"(
        .text
        .p2align 4
        .globl  utramp_retprobe_trampoline
        .hidden utramp_retprobe_trampoline
        .type   utramp_retprobe_trampoline, @function
        .cfi_startproc
        .cfi_personality 0x1b, utramp_retprobe_personality
        .cfi_def_cfa %rsp, 0
        .cfi_undefined %rip
        nop
utramp_retprobe_trampoline:
        lea     -8(%rsp), %rsp
        push    %rax
        pushfq
        push    %rax
        push    %rdi
        push    %rsi
        push    %rdx
        push    %rcx
        push    %rax
        push    %r8
        push    %r9
        push    %r10
        push    %r11
        push    %rbx
        push    %rbp
        push    %r12
        push    %r13
        push    %r14
        push    %r15
        lea     152(%rsp), %rax
        mov     %rax, 136(%rsp)
        mov     %rsp, %rbx
        and     $-16, %rsp
        mov     %rbx, %rdi
        call    *utramp_arch_rp_on_return(%rip)
        mov     %rax, 144(%rbx)
        mov     %rbx, %rsp
        pop     %r15
        pop     %r14
        pop     %r13
        pop     %r12
        pop     %rbp
        pop     %rbx
        pop     %r11
        pop     %r10
        pop     %r9
        pop     %r8
        pop     %rax
        pop     %rcx
        pop     %rdx
        pop     %rsi
        pop     %rdi
        lea     8(%rsp), %rsp
        popfq
        lea     8(%rsp), %rsp
        ret
        .cfi_endproc
        .size   utramp_retprobe_trampoline, . - utramp_retprobe_trampoline
)");

// The exception landing: the personality above installs it with rsp = X and the
// exception in rax. It puts the original return address back where it was, so that
// this frame looks like the hijacked function's return site to the unwinder, and
// raises the exception again from here (or continues a forced unwind):
//
//   X-8    the original return address       <- CFA-8 once written
//   X-16   the exception object              rsp here at the calls: CFA = rsp+16
//
// The callee-saved registers are the caller's, as the unwinder restored them; nothing
// here changes them, so the new search sees them unchanged.
asm(R"(
        .text
        .p2align 4
        .globl  utramp_retprobe_landing
        .hidden utramp_retprobe_landing
        .type   utramp_retprobe_landing, @function
        .cfi_startproc
        .cfi_def_cfa %rsp, 0
        .cfi_undefined %rip
utramp_retprobe_landing:
        lea     -16(%rsp), %rsp
        .cfi_def_cfa_offset 16
        mov     %rax, (%rsp)
        lea     8(%rsp), %rdi
        call    *utramp_arch_rp_unwound(%rip)
        mov     %rax, 8(%rsp)
        .cfi_offset %rip, -8
        mov     (%rsp), %rdi
        call    _Unwind_Resume_or_Rethrow@PLT
        mov     (%rsp), %rdi
        call    utramp_retprobe_uncaught
        ud2
        .cfi_endproc
        .size   utramp_retprobe_landing, . - utramp_retprobe_landing

        .p2align 4
        .globl  utramp_probe_redirect_trap
        .hidden utramp_probe_redirect_trap
        .type   utramp_probe_redirect_trap, @function
utramp_probe_redirect_trap:
        int3
        ud2
        .size   utramp_probe_redirect_trap, . - utramp_probe_redirect_trap
)");

extern "C" _Unwind_Reason_Code utramp_retprobe_personality(int version, _Unwind_Action actions,
                                                           _Unwind_Exception_Class,
                                                           _Unwind_Exception* exc,
                                                           _Unwind_Context* ctx) {
  if (version != 1) return _URC_FATAL_PHASE1_ERROR;
  // Only a hijacked return (pc at the entry) is ours; a handler throwing out of the
  // trampoline's own call is not supported, and ends the search here (terminate).
  if (_Unwind_GetIP(ctx) != reinterpret_cast<uintptr_t>(&utramp_retprobe_trampoline))
    return _URC_CONTINUE_UNWIND;
  // Search phase: claim the exception, so that phase 2 brings it to the landing, which
  // restarts the search from the original return address.
  if (actions & _UA_SEARCH_PHASE) return _URC_HANDLER_FOUND;
  // Phase 2, for the exception found here or a forced unwind (thread cancellation).
  _Unwind_SetGR(ctx, __builtin_eh_return_data_regno(0), reinterpret_cast<uintptr_t>(exc));
  _Unwind_SetIP(ctx, reinterpret_cast<uintptr_t>(&utramp_retprobe_landing));
  return _URC_INSTALL_CONTEXT;
}

namespace utramp::arch {

uint64_t retprobe_trampoline() noexcept { return reinterpret_cast<uint64_t>(&utramp_retprobe_trampoline); }
uint64_t redirect_trap() noexcept { return reinterpret_cast<uint64_t>(&utramp_probe_redirect_trap); }

void set_retprobe_callbacks(const RetprobeCallbacks& cb) noexcept {
  utramp_arch_rp_on_return = cb.on_return;
  utramp_arch_rp_unwound = cb.unwound;
}

namespace {

// arch/xstate.hpp's, copied at load so that the hit path reads a plain variable.
XStateSave g_xstate{};  // set at load (constant-initialised before: common/init.hpp)
__attribute__((constructor(UTRAMP_INIT_RUNTIME))) void init_xstate() { g_xstate = host_xstate(); }

}  // namespace

size_t xstate_size() noexcept { return g_xstate.size; }

void xstate_save(void* buf) noexcept {
  if (g_xstate.mode == XStateSave::Mode::fxsave) {
    asm volatile("fxsave64 (%0)" : : "r"(buf) : "memory");
    return;
  }
  // XRSTOR faults on a header whose reserved bytes are not zero; the buffer is stack.
  volatile uint64_t* header = reinterpret_cast<volatile uint64_t*>(static_cast<char*>(buf) + 512);
  for (int i = 0; i < 8; ++i) header[i] = 0;
  const uint32_t lo = static_cast<uint32_t>(g_xstate.mask), hi = static_cast<uint32_t>(g_xstate.mask >> 32);
  if (g_xstate.mode == XStateSave::Mode::xsavec)
    asm volatile("xsavec64 (%0)" : : "r"(buf), "a"(lo), "d"(hi) : "memory");
  else
    asm volatile("xsave64 (%0)" : : "r"(buf), "a"(lo), "d"(hi) : "memory");
}

uint64_t call_saving_xstate(uint64_t (*fn)(uint64_t, uint64_t), uint64_t a, uint64_t b) noexcept {
  char* raw = static_cast<char*>(__builtin_alloca(g_xstate.size + 64));
  void* buf = reinterpret_cast<void*>((reinterpret_cast<uint64_t>(raw) + 63) & ~uint64_t{63});
  xstate_save(buf);
  const uint64_t r = fn(a, b);
  xstate_restore(buf);
  return r;
}

void xstate_restore(const void* buf) noexcept {
  if (g_xstate.mode == XStateSave::Mode::fxsave) {
    asm volatile("fxrstor64 (%0)" : : "r"(buf) : "memory");
    return;
  }
  const uint32_t lo = static_cast<uint32_t>(g_xstate.mask), hi = static_cast<uint32_t>(g_xstate.mask >> 32);
  asm volatile("xrstor64 (%0)" : : "r"(buf), "a"(lo), "d"(hi) : "memory");
}

}  // namespace utramp::arch
