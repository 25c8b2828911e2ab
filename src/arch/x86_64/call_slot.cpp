// arch/call_slot.hpp: each thunk is one `jmp *SLOT(%rip)`, each slot a word of .data
// holding its fallback (below, in assembly: they must touch only general-purpose
// registers whatever the compiler's flags) until set.
#include "arch/call_slot.hpp"

#include <sys/syscall.h>

#include <atomic>

#define UTRAMP_STR2(x) #x
#define UTRAMP_STR(x) UTRAMP_STR2(x)

// clang-format off
asm(R"(
  .pushsection .data.rel.local,"aw"
  .balign 8
  .hidden utramp_clock_gettime_slot
utramp_clock_gettime_slot: .quad utramp_clock_gettime_syscall
  .hidden utramp_safe_read_slot
utramp_safe_read_slot: .quad utramp_safe_read_none
  .hidden utramp_ra_fix_slot
utramp_ra_fix_slot: .quad utramp_ra_fix_none
  .popsection

  .text
  .globl utramp_slot_clock_gettime
  .hidden utramp_slot_clock_gettime
  .type utramp_slot_clock_gettime, @function
utramp_slot_clock_gettime:
  .cfi_startproc
  jmp *utramp_clock_gettime_slot(%rip)
  .cfi_endproc
  .size utramp_slot_clock_gettime, .-utramp_slot_clock_gettime

  .globl utramp_slot_safe_read
  .hidden utramp_slot_safe_read
  .type utramp_slot_safe_read, @function
utramp_slot_safe_read:
  .cfi_startproc
  jmp *utramp_safe_read_slot(%rip)
  .cfi_endproc
  .size utramp_slot_safe_read, .-utramp_slot_safe_read

  .globl utramp_slot_ra_fix
  .hidden utramp_slot_ra_fix
  .type utramp_slot_ra_fix, @function
utramp_slot_ra_fix:
  .cfi_startproc
  jmp *utramp_ra_fix_slot(%rip)
  .cfi_endproc
  .size utramp_slot_ra_fix, .-utramp_slot_ra_fix

  # clock_gettime(rdi, rsi) by the system call: -errno in eax.
  .globl utramp_clock_gettime_syscall
  .hidden utramp_clock_gettime_syscall
  .type utramp_clock_gettime_syscall, @function
utramp_clock_gettime_syscall:
  .cfi_startproc
  mov $)" UTRAMP_STR(SYS_clock_gettime) R"(, %eax
  syscall
  ret
  .cfi_endproc
  .size utramp_clock_gettime_syscall, .-utramp_clock_gettime_syscall

  .globl utramp_safe_read_none
  .hidden utramp_safe_read_none
  .type utramp_safe_read_none, @function
utramp_safe_read_none:
  .cfi_startproc
  xor %eax, %eax
  ret
  .cfi_endproc
  .size utramp_safe_read_none, .-utramp_safe_read_none

  # The return address as it is (rdi).
  .globl utramp_ra_fix_none
  .hidden utramp_ra_fix_none
  .type utramp_ra_fix_none, @function
utramp_ra_fix_none:
  .cfi_startproc
  mov %rdi, %rax
  ret
  .cfi_endproc
  .size utramp_ra_fix_none, .-utramp_ra_fix_none
)");
// clang-format on

extern "C" __attribute__((visibility("hidden"))) void* utramp_clock_gettime_slot;
extern "C" __attribute__((visibility("hidden"))) void* utramp_safe_read_slot;
extern "C" __attribute__((visibility("hidden"))) void* utramp_ra_fix_slot;
extern "C" __attribute__((visibility("hidden"))) char utramp_clock_gettime_syscall, utramp_safe_read_none,
    utramp_ra_fix_none;

namespace utramp::arch {

namespace {
// Null puts the fallback back.
void set_slot(void*& slot, void* fn, char& fallback) noexcept {
  std::atomic_ref<void*>(slot).store(fn ? fn : &fallback, std::memory_order_release);
}
}  // namespace

void set_clock_gettime(int (*fn)(int, timespec*) noexcept) noexcept {
  set_slot(utramp_clock_gettime_slot, reinterpret_cast<void*>(fn), utramp_clock_gettime_syscall);
}
void set_safe_read(bool (*fn)(void*, uint64_t, size_t) noexcept) noexcept {
  set_slot(utramp_safe_read_slot, reinterpret_cast<void*>(fn), utramp_safe_read_none);
}
void set_ra_fix(uint64_t (*fn)(uint64_t, uint64_t) noexcept) noexcept {
  set_slot(utramp_ra_fix_slot, reinterpret_cast<void*>(fn), utramp_ra_fix_none);
}

}  // namespace utramp::arch
