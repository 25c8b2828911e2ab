#include "agent/instrument.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "ftrace/graph.hpp"

namespace utramp::agent {

namespace {

// The selected functions, sorted: an immutable array, replaced whole when objects are
// loaded. Old arrays are never freed (a hook may still be reading one; one per
// dlopen of an instrumented object).
struct Selected {
  size_t n;
  uint64_t funcs[];
};
std::atomic<const Selected*> g_selected{nullptr};

bool selected(uint64_t fn) {
  const Selected* s = g_selected.load(std::memory_order_acquire);  // pairs with the release below
  return s && std::binary_search(s->funcs, s->funcs + s->n, fn);
}

}  // namespace

void report_functions(const std::vector<uint64_t>& funcs) {
  if (funcs.empty()) return;
  const Selected* old = g_selected.load(std::memory_order_relaxed);
  const size_t n = (old ? old->n : 0) + funcs.size();
  auto* s = static_cast<Selected*>(malloc(sizeof(Selected) + n * sizeof(uint64_t)));
  if (!s) return;
  s->n = 0;
  if (old) {
    std::memcpy(s->funcs, old->funcs, old->n * sizeof(uint64_t));
    s->n = old->n;
  }
  for (uint64_t f : funcs) s->funcs[s->n++] = f;
  std::sort(s->funcs, s->funcs + s->n);
  s->n = static_cast<size_t>(std::unique(s->funcs, s->funcs + s->n) - s->funcs);
  g_selected.store(s, std::memory_order_release);
}

}  // namespace utramp::agent

// The hooks. A call is placed on the shadow stack by the instrumented function's stack
// pointer where it reports its entry (our frame pointer + 16: the return address and
// saved rbp above it), lower for every deeper call; an exit report closes the innermost
// open call of its function (ftrace::reported_exit).
extern "C" __attribute__((visibility("default"), no_instrument_function)) void
__cyg_profile_func_enter(void* this_fn, void* call_site) {
  const uint64_t fn = reinterpret_cast<uint64_t>(this_fn);
  if (!utramp::agent::selected(fn)) return;
  const uint64_t sp = reinterpret_cast<uint64_t>(__builtin_frame_address(0)) + 16;
  utramp::ftrace::reported_entry(fn, sp, reinterpret_cast<uint64_t>(call_site));
}

extern "C" __attribute__((visibility("default"), no_instrument_function)) void
__cyg_profile_func_exit(void* this_fn, void* /*call_site*/) {
  const uint64_t fn = reinterpret_cast<uint64_t>(this_fn);
  if (!utramp::agent::selected(fn)) return;
  utramp::ftrace::reported_exit(fn, reinterpret_cast<uint64_t>(__builtin_frame_address(0)) + 16);
}
