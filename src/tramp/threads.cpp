#include "tramp/threads.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>

#include "os/signal_stack.hpp"

namespace utramp::tramp {

namespace {

alignas(64) thread_local ThreadBlock t_block __attribute__((tls_model("initial-exec")));

struct Entry {
  pid_t tid;
  ThreadBlock* block;
};

std::mutex g_mu;
// Never destroyed: the reclaimer thread reads them while static destructors run at exit.
std::vector<Entry>& g_threads = *new std::vector<Entry>();
pthread_key_t g_key;
std::once_flag g_key_once;

std::vector<bool>& g_counter_used = *new std::vector<bool>(kCounterSlots, false);
std::vector<bool>& g_prog_used = *new std::vector<bool>(kProgSlots, false);

uint64_t thread_pointer() {
  uint64_t tp;
  asm volatile("mov %%fs:0, %0" : "=r"(tp));  // the TCB's self-pointer
  return tp;
}

void on_thread_exit(void*) {
  std::lock_guard lock(g_mu);
  const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
  std::erase_if(g_threads, [&](const Entry& e) { return e.tid == tid; });
  t_block.registered = 0;
}

void reset_after_fork() {
  // Only the forking thread exists in the child; the mutex may have been held by a
  // thread that no longer exists.
  new (&g_mu) std::mutex();
  g_threads.clear();
  if (t_block.registered) g_threads.push_back({static_cast<pid_t>(syscall(SYS_gettid)), &t_block});
}

[[maybe_unused]] const bool g_atfork = [] {
  pthread_atfork(nullptr, nullptr, reset_after_fork);
  return true;
}();

Result<uint32_t> alloc_in(std::vector<bool>& used, uint32_t first, const char* what) {
  std::lock_guard lock(g_mu);
  for (uint32_t i = first; i < used.size(); ++i)
    if (!used[i]) {
      used[i] = true;
      return i;
    }
  return make_error(Errc::busy, fmt::format("all {} {} slots are in use", used.size(), what));
}

}  // namespace

TlsLayout tls_layout() {
  const auto base = static_cast<int64_t>(thread_pointer());
  return TlsLayout{reinterpret_cast<int64_t>(&t_block.registered) - base,
                   reinterpret_cast<int64_t>(&t_block.counters[0]) - base,
                   reinterpret_cast<int64_t>(&t_block.active[0]) - base};
}

ThreadBlock& this_thread_block() { return t_block; }

extern "C" void utramp_register_thread() {
  if (t_block.registered) return;
  std::call_once(g_key_once, [] { pthread_key_create(&g_key, on_thread_exit); });
  {
    std::lock_guard lock(g_mu);
    g_threads.push_back({static_cast<pid_t>(syscall(SYS_gettid)), &t_block});
  }
  // A non-null value makes the key's destructor run at thread exit.
  pthread_setspecific(g_key, &t_block);
  t_block.registered = 1;
}

CounterSnapshot snapshot_counters(const std::vector<uint32_t>& slots) {
  std::vector<Entry> threads;
  {
    std::lock_guard lock(g_mu);
    threads = g_threads;
  }
  CounterSnapshot out;
  const pid_t pid = getpid();
  std::vector<uint32_t> buf(kCounterSlots);
  for (const Entry& e : threads) {
    iovec local{buf.data(), buf.size() * sizeof(uint32_t)};
    iovec remote{e.block->counters, buf.size() * sizeof(uint32_t)};
    if (process_vm_readv(pid, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(local.iov_len))
      continue;  // the thread is gone and its memory with it
    std::vector<uint32_t> v;
    v.reserve(slots.size());
    for (uint32_t s : slots) v.push_back(buf[s]);
    out.values.push_back(std::move(v));
    out.tids.push_back(e.tid);
  }
  return out;
}

Result<uint32_t> alloc_counter_slot() { return alloc_in(g_counter_used, 0, "thread counter"); }
void free_counter_slot(uint32_t slot) {
  std::lock_guard lock(g_mu);
  if (slot < g_counter_used.size()) g_counter_used[slot] = false;
}
extern "C" uint64_t utramp_guard_left(uint64_t holder, uint64_t frame) {
  return os::holder_still_runs(holder, frame) ? 0 : 1;
}

Result<uint32_t> alloc_prog_slot() { return alloc_in(g_prog_used, 0, "program guard"); }
void free_prog_slot(uint32_t slot) {
  std::lock_guard lock(g_mu);
  if (slot < g_prog_used.size()) g_prog_used[slot] = false;
}

}  // namespace utramp::tramp
