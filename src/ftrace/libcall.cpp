// Library calls through the GOT: the hooks and their stubs (libcall.hpp says how).
#include "ftrace/libcall.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <sys/syscall.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unistd.h>

#include "arch/arch.hpp"
#include "arch/cpu.hpp"
#include "ftrace/graph_state.hpp"
#include "os/exec_memory.hpp"
#include "os/safe_copy.hpp"
#include "os/text_writer.hpp"

extern "C" {
void utramp_libcall_entry();   // the stubs' target (asm below)
void utramp_libcall_return();  // the return address a hooked call returns to
}

namespace utramp::ftrace {

using detail::g_fast;
using detail::t_trace;
using detail::ThreadTrace;

ImportKind import_kind(std::string_view s) noexcept {
  // Return twice, or keep their return address for later (a context, a jmp_buf), or a
  // child that shares the stack (vfork): their return address must stay as it is.
  // The loader's internal entry points (caller-sensitive, and called by libc itself).
  // The C library's start-up (never returns: everything would nest under it) and glue.
  static constexpr std::string_view kUntraced[] = {
      "setjmp", "_setjmp", "__setjmp", "sigsetjmp", "__sigsetjmp", "savectx", "vfork", "__vfork",
      "getcontext", "swapcontext", "clone", "clone3", "__libc_dlopen_mode", "__libc_dlsym", "__tls_get_addr", "__libc_start_main",
      "__libc_start_main_impl", "__cxa_finalize", "__gmon_start__", "_ITM_registerTMCloneTable",
      "_ITM_deregisterTMCloneTable", "_Jv_RegisterClasses",
      // The compiler's instrumentation, not calls the program wrote: -finstrument-
      // functions reports (recorded as the calls they report), -pg's entry calls.
      "__cyg_profile_func_enter", "__cyg_profile_func_exit", "mcount", "_mcount", "__fentry__"};
  // Walk their caller's stack with the unwinder.
  static constexpr std::string_view kUnwinds[] = {
      "pthread_exit", "__cxa_throw", "__cxa_rethrow", "_Unwind_RaiseException", "_Unwind_Resume",
      "_Unwind_Resume_or_Rethrow", "_Unwind_ForcedUnwind", "_Unwind_Backtrace",
      "_ZSt17rethrow_exceptionNSt15__exception_ptr13exception_ptrE", "backtrace"};
  // Look at their caller's address (libcall.hpp: traced from the program only).
  static constexpr std::string_view kCaller[] = {"dlopen", "dlmopen", "dlsym", "dlvsym"};
  for (std::string_view u : kUntraced)
    if (s == u) return ImportKind::untraced;
  for (std::string_view u : kCaller)
    if (s == u) return ImportKind::caller;
  for (std::string_view u : kUnwinds)
    if (s == u) return ImportKind::unwinds;
  return ImportKind::traced;
}

namespace {

// The return pad of the caller-sensitive functions (libcall.hpp): `jmp
// utramp_libcall_return` in anonymous executable memory, made by the first
// hook_imports; 0 until then.
std::atomic<uint64_t> g_return_pad{0};

}  // namespace

void restore_return_addresses() noexcept {
  ThreadTrace* ts = t_trace;
  if (!ts) return;
  const uint64_t hooked = reinterpret_cast<uint64_t>(&utramp_libcall_return);
  const uint64_t pad = g_return_pad.load(std::memory_order_acquire);
  // Newest first: an entry left by a longjmp may name the same stack word as a newer
  // call's, which it no longer holds once that call's address is back. A left entry's
  // word may be in memory that is gone (a freed signal stack): read without faulting.
  for (uint32_t i = ts->nrets; i > 0; --i) {
    const ThreadTrace::Return& r = ts->rets[i - 1];
    uint64_t word = 0;
    if (os::safe_read(&word, r.slot, sizeof word) && (word == hooked || (pad && word == pad)))
      *reinterpret_cast<uint64_t*>(r.slot) = r.ret;
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  ts->nrets = 0;
}

namespace {

// Every hook made, for unhook_imports (hooks are never freed; the list is made on first
// use: no load-time constructor, common/init.hpp).
std::mutex g_hooks_mu;
std::vector<ImportHook*>* g_hooks = nullptr;
std::vector<ImportHook*>& hooks_made() {
  if (!g_hooks) g_hooks = new std::vector<ImportHook*>();
  return *g_hooks;
}

[[noreturn]] void lost_return(uint64_t slot) {
  // No way back to the caller: its address was replaced and is not on the return stack
  // (something rewrote this thread's state). Say so before dying, without libc's stdio.
  char msg[128];
  const int n = snprintf(msg, sizeof msg,
                         "utramp: a library call returned at stack word %#lx with no saved "
                         "return address\n",
                         static_cast<unsigned long>(slot));
  if (n > 0) arch::raw_syscall6(SYS_write, 2, reinterpret_cast<long>(msg), n);
  abort();
}

}  // namespace

std::vector<trace::Function> hook_imports(const std::vector<ImportRequest>& reqs,
                                          std::vector<std::string>* errors) {
  std::vector<trace::Function> done;
  if (reqs.empty()) return done;
  constexpr size_t kStride = 32;  // one stub (24 bytes) per 32
  auto& arena = os::ExecArena::instance();
  auto block = arena.allocate(reqs.size() * kStride, 0x10000, 0x7fffffffe000);
  if (!block) {
    errors->push_back(fmt::format("no executable memory for {} library call stubs: {}", reqs.size(),
                                  block.error().message));
    return done;
  }
  const uint64_t entry = reinterpret_cast<uint64_t>(&utramp_libcall_entry);
  if (!g_return_pad.load(std::memory_order_acquire)) {
    // Once per process (hook_imports calls are serialised by the agent).
    constexpr size_t kPadSize = 16;
    auto pad = arena.allocate(kPadSize, 0x10000, 0x7fffffffe000);
    Result<std::vector<uint8_t>> code =
        pad ? arch::encode_jump_anywhere(pad->addr, reinterpret_cast<uint64_t>(&utramp_libcall_return))
            : Result<std::vector<uint8_t>>(std::move(pad).error());
    if (code) {
      if (auto w = arena.write(*pad, 0, *code); !w) code = std::move(w).error();
    }
    if (code) g_return_pad.store(pad->addr, std::memory_order_release);
    else errors->push_back(fmt::format("no return pad for dlopen, dlsym and the like: {}", code.error().message));
  }
  const uint64_t pad = g_return_pad.load(std::memory_order_acquire);
  // Every stub first, in one write of the block (a write per stub cost a system call
  // per import: 222 for bash), then the slots. A hook is published (its stub written,
  // its hook filled in) before its slot points to it.
  std::vector<uint8_t> stubs(reinterpret_cast<const uint8_t*>(block->addr),
                             reinterpret_cast<const uint8_t*>(block->addr) + block->size);
  std::vector<std::pair<size_t, ImportHook*>> made;  // (request, its hook)
  for (size_t i = 0; i < reqs.size(); ++i) {
    const ImportRequest& r = reqs[i];
    const ImportKind kind = import_kind(r.name);
    if (kind == ImportKind::caller && !pad) continue;  // said once above
    auto* h = new ImportHook();
    h->got = reinterpret_cast<uint64_t*>(r.got);
    h->stub = block->addr + i * kStride;
    h->lazy = r.lazy;
    h->unwinds = kind == ImportKind::unwinds;
    h->caller = kind == ImportKind::caller;
    h->next = r.name == "dlsym" || r.name == "dlvsym";
    h->scope = r.scope;
    h->relro = r.relro;
    auto code = arch::emit_import_stub(h->stub, reinterpret_cast<uint64_t>(h), entry);
    if (!code || code->size() > kStride) {
      errors->push_back(fmt::format("{}: {}", r.name, code ? "stub too long" : code.error().message));
      delete h;
      continue;
    }
    std::copy(code->begin(), code->end(), stubs.begin() + static_cast<std::ptrdiff_t>(i * kStride));
    made.emplace_back(i, h);
  }
  if (auto w = arena.write(*block, 0, stubs); !w) {
    errors->push_back(fmt::format("library call stubs: {}", w.error().message));
    for (auto& [i, h] : made) delete h;
    return done;
  }
  // The RELRO slots (read-only since relocation: written as the patcher writes code,
  // through /proc/self/mem, so the page's protection is never changed), adjacent ones
  // in one write.
  std::vector<uint64_t> relro_values;
  relro_values.reserve(made.size());
  std::vector<os::TextWrite> relro_writes;
  for (auto& [i, h] : made) {
    const ImportRequest& r = reqs[i];
    uint64_t old = __atomic_load_n(h->got, __ATOMIC_ACQUIRE);
    h->target.store(old, std::memory_order_release);
    if (r.relro) {
      relro_values.push_back(h->stub);
      const auto* value = reinterpret_cast<const uint8_t*>(&relro_values.back());
      if (!relro_writes.empty() && relro_writes.back().addr + relro_writes.back().bytes.size() == r.got &&
          relro_writes.back().bytes.data() + relro_writes.back().bytes.size() == value)
        relro_writes.back().bytes = {relro_writes.back().bytes.data(), relro_writes.back().bytes.size() + 8};
      else
        relro_writes.push_back({r.got, {value, 8}});
    } else {
      // The resolver may be writing it now (another thread's first call): the hook
      // targets whatever it held last.
      while (!__atomic_compare_exchange_n(h->got, &old, h->stub, false, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE))
        h->target.store(old, std::memory_order_release);
    }
  }
  // One failed write: each slot again on its own, to name the ones that failed.
  const bool relro_ok = os::write_texts(relro_writes).ok();
  std::lock_guard lock(g_hooks_mu);
  for (auto& [i, h] : made) {
    const ImportRequest& r = reqs[i];
    if (r.relro && !relro_ok) {
      const uint64_t stub = h->stub;
      if (auto w = os::write_text(r.got, {reinterpret_cast<const uint8_t*>(&stub), sizeof stub}); !w) {
        errors->push_back(fmt::format("{}: GOT slot {:#x}: {}", r.name, r.got, w.error().message));
        continue;  // the hook stays allocated, as before: its stub is written
      }
    }
    done.push_back({h->stub, kStride, r.name, r.library});
    hooks_made().push_back(h);
  }
  return done;
}

size_t hooked_imports() {
  std::lock_guard lock(g_hooks_mu);
  size_t n = 0;
  for (ImportHook* h : hooks_made())
    if (!h->removed.load(std::memory_order_acquire)) ++n;
  return n;
}

size_t unhook_imports(std::vector<std::string>* errors) {
  std::lock_guard lock(g_hooks_mu);
  size_t restored = 0;
  // Twice: an exit hook that read `removed` false just before may still hook a lazy
  // slot again (it compares and writes in two steps); the second pass puts it back.
  for (int pass = 0; pass < 2; ++pass) {
    for (ImportHook* h : hooks_made()) {
      if (pass == 0) h->removed.store(true, std::memory_order_release);
      const uint64_t target = h->target.load(std::memory_order_acquire);
      uint64_t seen = __atomic_load_n(h->got, __ATOMIC_ACQUIRE);
      if (seen != h->stub) {
        // The resolver bound it during a call (the exit hook no longer hooks it again
        // once `removed` is seen): it holds the function already.
        if (pass == 0) ++restored;
        continue;
      }
      // Not written: the resolver wrote the function meanwhile (it is restored too).
      if (auto w = os::replace_word(reinterpret_cast<uint64_t>(h->got), seen, target, h->relro); !w) {
        if (pass == 0) errors->push_back(fmt::format("GOT slot {}: {}", static_cast<void*>(h->got), w.error().message));
        continue;
      }
      if (pass == 0) ++restored;
    }
    if (pass == 0) usleep(2000);
  }
  return restored;
}

}  // namespace utramp::ftrace

using utramp::ftrace::ImportHook;
using utramp::ftrace::detail::g_fast;
using utramp::ftrace::detail::t_trace;
using utramp::ftrace::detail::ThreadTrace;

// The entry hook, from utramp_libcall_entry with every argument register saved: records
// the call's entry and replaces its return address. Returns where the call goes.
extern "C" __attribute__((visibility("hidden"))) uint64_t utramp_libcall_enter(ImportHook* h,
                                                                               uint64_t* ret_slot,
                                                                               uint64_t arg1) {
  const uint64_t target = h->target.load(std::memory_order_acquire);
  if (h->next && arg1 == reinterpret_cast<uint64_t>(RTLD_NEXT)) return target;  // libcall.hpp
  if (h->unwinds) {
    utramp::ftrace::restore_return_addresses();
    return target;
  }
  // The frame identifies the call on the shadow stack as an image's frame does: the
  // address below its return address ([frame + 8] is the caller, for -T function).
  const uint64_t frame = reinterpret_cast<uint64_t>(ret_slot) - 8;
  ThreadTrace* ts = t_trace;
  if (ts && ts->nrets >= ThreadTrace::kMaxReturns) return target;  // too deep: not traced
  if (h->scope != utramp::ftrace::Scope::none) utramp::ftrace::scoped_entry(h->stub, frame, h->scope);
  else if (utramp_graph_fast_entry(h->stub, frame)) utramp_graph_entry_general(h->stub, frame);
  if (g_fast.function_tracer) return target;  // entries only: no exit to catch
  ts = t_trace;
  if (!ts) return target;  // no state: nothing was recorded
  // Filled in before it is counted (pairs with the exit hook's read before it drops it).
  ThreadTrace::Return& r = ts->rets[ts->nrets];
  r.slot = reinterpret_cast<uint64_t>(ret_slot);
  r.ret = *ret_slot;
  r.hook = reinterpret_cast<uint64_t>(h);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  ++ts->nrets;
  *ret_slot = h->caller ? utramp::ftrace::g_return_pad.load(std::memory_order_relaxed)
                        : reinterpret_cast<uint64_t>(&utramp_libcall_return);
  return target;
}

// The exit hook, from utramp_libcall_return with the return registers saved: records
// the exit and returns the caller's address.
extern "C" __attribute__((visibility("hidden"))) uint64_t utramp_libcall_exit(uint64_t* ret_slot) {
  ThreadTrace* ts = t_trace;
  const auto slot = reinterpret_cast<uint64_t>(ret_slot);
  // The newest entry for this stack word: those above it were left by a longjmp (or a
  // signal handler's siglongjmp) out of calls that never returned.
  uint32_t i = ts ? ts->nrets : 0;
  while (i && ts->rets[i - 1].slot != slot) --i;
  if (!i) utramp::ftrace::lost_return(slot);
  const ThreadTrace::Return r = ts->rets[i - 1];
  std::atomic_signal_fence(std::memory_order_seq_cst);
  ts->nrets = i - 1;
  auto* h = reinterpret_cast<ImportHook*>(r.hook);
  if (h->lazy && !h->removed.load(std::memory_order_acquire)) {
    // The resolver bound the slot during this call (or an earlier one whose exit was
    // never seen): the function is the target from now on, and the hook goes back.
    const uint64_t now = __atomic_load_n(h->got, __ATOMIC_ACQUIRE);
    if (now != h->stub) {
      h->target.store(now, std::memory_order_release);
      __atomic_store_n(h->got, h->stub, __ATOMIC_RELEASE);
    }
  }
  const uint64_t frame = slot - 8;
  if (utramp_graph_fast_exit(h->stub, frame)) utramp_graph_exit_general(h->stub, frame);
  return r.ret;
}

// utramp_libcall_entry: reached by jmp from a stub, r11 = the ImportHook, [rsp] = the
// call's return address, every argument register as the caller set it (rdi, rsi, rdx,
// rcx, r8, r9, xmm0-7, al for variadic calls; r10 kept too). Saves them, calls the entry
// hook (with the call's first argument), restores them and jumps to the target (r11:
// free at a call through the GOT).
//
//   [rbp + 8]   the call's return address (rbp: this frame)
//   [rbp]       saved rbp
//   ...         rax rcx rdx rsi rdi r8 r9 r10, xmm0-7 (below the 16-byte aligned rsp)
//
// utramp_libcall_return: where a hooked call returns (rsp = its return address's word
// + 8). Reuses that word for the real return address: saves the return registers (rax,
// rdx, xmm0, xmm1; st0/st1 are untouched: the hook uses no x87), calls the exit hook,
// stores what it returns there and returns to it.
asm(".text\n"
    ".globl utramp_libcall_entry\n"
    ".hidden utramp_libcall_entry\n"
    ".type utramp_libcall_entry, @function\n"
    "utramp_libcall_entry:\n"
    ".cfi_startproc\n"
    "push %rbp\n"
    ".cfi_def_cfa_offset 16\n"
    ".cfi_offset %rbp, -16\n"
    "mov %rsp, %rbp\n"
    ".cfi_def_cfa_register %rbp\n"
    "and $-16, %rsp\n"
    "push %rax\n push %rcx\n push %rdx\n push %rsi\n"
    "push %rdi\n push %r8\n push %r9\n push %r10\n"
    "sub $128, %rsp\n"
    "movdqu %xmm0, 0(%rsp)\n movdqu %xmm1, 16(%rsp)\n"
    "movdqu %xmm2, 32(%rsp)\n movdqu %xmm3, 48(%rsp)\n"
    "movdqu %xmm4, 64(%rsp)\n movdqu %xmm5, 80(%rsp)\n"
    "movdqu %xmm6, 96(%rsp)\n movdqu %xmm7, 112(%rsp)\n"
    "mov %rdi, %rdx\n"
    "mov %r11, %rdi\n"
    "lea 8(%rbp), %rsi\n"
    "call utramp_libcall_enter\n"
    "mov %rax, %r11\n"
    "movdqu 0(%rsp), %xmm0\n movdqu 16(%rsp), %xmm1\n"
    "movdqu 32(%rsp), %xmm2\n movdqu 48(%rsp), %xmm3\n"
    "movdqu 64(%rsp), %xmm4\n movdqu 80(%rsp), %xmm5\n"
    "movdqu 96(%rsp), %xmm6\n movdqu 112(%rsp), %xmm7\n"
    "add $128, %rsp\n"
    "pop %r10\n pop %r9\n pop %r8\n pop %rdi\n"
    "pop %rsi\n pop %rdx\n pop %rcx\n pop %rax\n"
    "leave\n"
    ".cfi_def_cfa %rsp, 8\n"
    "jmp *%r11\n"
    ".cfi_endproc\n"
    ".size utramp_libcall_entry, .-utramp_libcall_entry\n"
    // One byte before the label: an unwinder looks up a return address less one.
    "nop\n"
    ".globl utramp_libcall_return\n"
    ".hidden utramp_libcall_return\n"
    ".type utramp_libcall_return, @function\n"
    "utramp_libcall_return:\n"
    "sub $8, %rsp\n"
    "push %rbp\n"
    "mov %rsp, %rbp\n"
    "and $-16, %rsp\n"
    "push %rax\n push %rdx\n"
    "sub $32, %rsp\n"
    "movdqu %xmm0, 0(%rsp)\n movdqu %xmm1, 16(%rsp)\n"
    "lea 8(%rbp), %rdi\n"
    "call utramp_libcall_exit\n"
    "mov %rax, 8(%rbp)\n"
    "movdqu 0(%rsp), %xmm0\n movdqu 16(%rsp), %xmm1\n"
    "add $32, %rsp\n"
    "pop %rdx\n pop %rax\n"
    "leave\n"
    "ret\n"
    ".size utramp_libcall_return, .-utramp_libcall_return\n");
