// Library calls through the global offset table, traced as uftrace traces them: the
// program's calls into shared libraries (getpid, malloc, printf) in the call graph with
// their durations, without a site in the library function itself.
//
// Each hooked slot (sites/imports.hpp) is made to point to a stub of its own
// (arch::emit_import_stub), which enters utramp_libcall_entry (below, the entry hook):
// the call's entry is recorded (the tracer's usual path, its frame being the address
// of the call's return address less 8, like an image's frame), the return address on
// the stack is replaced with utramp_libcall_return's and kept on the thread's return
// stack (graph_state.hpp: ThreadTrace::rets), and the call goes on to the function
// with every argument register as the caller left it. The function returns into the
// exit hook, which records the exit and returns to the saved address. Nothing is
// copied and no frame is added while the function runs: its stack arguments, variadic
// arguments and `al` are where its caller put them.
//
// Lazy binding: a JUMP_SLOT not bound yet keeps its PLT stub as the target; the first
// call goes through the dynamic loader's resolver as without utramp, and the resolver
// writes the function's address into the slot, over the hook. The exit hook of that
// call sees it, takes the address as the target and puts the hook back (the slot is
// writable: lazily bound slots are outside RELRO). Slots already bound (BIND_NOW,
// GLOB_DAT) are written once, through os::write_text when they are in RELRO, which
// leaves the page's protection as it was.
//
// Functions that look at their caller's address (dlopen and dlmopen: the caller's
// RUNPATH, $ORIGIN and namespace; dlsym and dlvsym: RTLD_NEXT and RTLD_DEFAULT's
// scope) are traced from the program's own slots only, and return through a pad in
// anonymous memory instead of utramp_libcall_return: the loader, finding no object at
// that address, takes the call for the main program's — which it is. (Seen from the
// agent's text they would resolve against the agent's RUNPATH and scope.) A library's
// calls of them go straight on, and so does dlsym(RTLD_NEXT, ...): the loader refuses
// RTLD_NEXT from an address outside the main program's mapping.
//
// Not traced (the call goes straight on): functions that return twice or save their
// return address for later (setjmp, vfork, getcontext...), the C library's start-up. Functions that unwind the stack they are called on
// (pthread_exit, and through the agent the unwinder's entry points:
// agent.cpp) first put back every return address of the thread's open library calls:
// the unwinder must see the real callers. Those calls then return straight to their
// callers, and the tracer closes them at the thread's next event above them, as it
// closes frames left by longjmp.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "ftrace/graph.hpp"
#include "trace/trace_dir.hpp"

namespace utramp::ftrace {

// One hooked GOT slot; never freed (a thread may be in its stub at any time).
struct ImportHook {
  uint64_t* got = nullptr;
  std::atomic<uint64_t> target{0};  // where calls go: the function, or its PLT stub (lazy)
  uint64_t stub = 0;                // what the slot holds while hooked; the function's id
  bool lazy = false;                // the resolver may still write the slot
  bool unwinds = false;             // unwinds its caller's stack: no exit to catch
  bool caller = false;              // looks at its caller's address: returns via the pad
  bool next = false;                // dlsym, dlvsym: not traced when asked for RTLD_NEXT
  Scope scope = Scope::none;        // record -F/-N (ftrace::Scope)
  bool relro = false;               // the slot is in RELRO: written through os::write_text
  std::atomic<bool> removed{false}; // unhook_imports put the slot back: never hooked again
};

struct ImportRequest {
  uint64_t got = 0;
  std::string name;     // the symbol
  std::string library;  // the object that defines it ("" when not known yet)
  bool lazy = false;    // sites::ImportSlot::lazy
  bool relro = false;   // the slot is in its object's RELRO (read-only)
  Scope scope = Scope::none;
};

// How a function reached through a GOT slot is treated, by its symbol. `caller`: looks
// at its caller's address; traced from the main program's slots only.
enum class ImportKind : uint8_t { traced, untraced, unwinds, caller };
ImportKind import_kind(std::string_view symbol) noexcept;

// Hooks the slots of `reqs` (one stub each, then the slot); call while the slots'
// object is loaded and relocated. Returns the functions now traced (id: the stub), for
// functions-PID.tsv; a slot that cannot be written is left alone and named in `errors`.
std::vector<trace::Function> hook_imports(const std::vector<ImportRequest>& reqs,
                                          std::vector<std::string>* errors);

// Every slot hook_imports hooked gets the function's address back (calls go straight to
// it again; a lazy slot is no longer hooked again after binding). Calls in flight return
// through their stubs as before. Returns how many slots were put back; a slot that
// cannot be written is named in ERRORS.
size_t unhook_imports(std::vector<std::string>* errors);
// How many slots are hooked now.
size_t hooked_imports();

// Puts back the return addresses this thread's open library calls replaced, before an
// unwinder walks its stack (async-signal-safe; no lock, no call).
void restore_return_addresses() noexcept;

}  // namespace utramp::ftrace
