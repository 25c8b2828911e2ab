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
  Reported funcs[];
};
std::atomic<const Selected*> g_selected{nullptr};

bool by_func(const Reported& a, const Reported& b) { return a.func < b.func; }

// The function's entry in the selection, or null when it is not selected.
const Reported* selected(uint64_t fn) {
  const Selected* s = g_selected.load(std::memory_order_acquire);  // pairs with the release below
  if (!s) return nullptr;
  const Reported* it = std::lower_bound(s->funcs, s->funcs + s->n, Reported{fn, {}}, by_func);
  return it != s->funcs + s->n && it->func == fn ? it : nullptr;
}

}  // namespace

void report_functions(const std::vector<Reported>& funcs) {
  if (funcs.empty()) return;
  const Selected* old = g_selected.load(std::memory_order_relaxed);
  const size_t n = (old ? old->n : 0) + funcs.size();
  auto* s = static_cast<Selected*>(malloc(sizeof(Selected) + n * sizeof(Reported)));
  if (!s) return;
  s->n = 0;
  if (old) {
    std::memcpy(s->funcs, old->funcs, old->n * sizeof(Reported));
    s->n = old->n;
  }
  for (const Reported& f : funcs) s->funcs[s->n++] = f;
  std::stable_sort(s->funcs, s->funcs + s->n, by_func);
  s->n = static_cast<size_t>(
      std::unique(s->funcs, s->funcs + s->n, [](const Reported& a, const Reported& b) { return a.func == b.func; }) -
      s->funcs);
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
  const utramp::agent::Reported* r = utramp::agent::selected(fn);
  if (!r) return;
  const uint64_t sp = reinterpret_cast<uint64_t>(__builtin_frame_address(0)) + 16;
  utramp::ftrace::reported_entry(fn, sp, reinterpret_cast<uint64_t>(call_site), r->scope);
}

extern "C" __attribute__((visibility("default"), no_instrument_function)) void
__cyg_profile_func_exit(void* this_fn, void* /*call_site*/) {
  const uint64_t fn = reinterpret_cast<uint64_t>(this_fn);
  if (!utramp::agent::selected(fn)) return;
  utramp::ftrace::reported_exit(fn, reinterpret_cast<uint64_t>(__builtin_frame_address(0)) + 16);
}
