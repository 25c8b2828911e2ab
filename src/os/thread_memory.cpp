#include "os/thread_memory.hpp"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <atomic>
#include <cstdint>

#include "arch/cpu.hpp"
#include "common/init.hpp"

namespace utramp::os {

namespace {

// In front of each block: what its thread's exit needs to undo it.
struct alignas(64) Header {
  Header* next;  // this thread's previous block
  void** slot;   // the pointer to clear (this thread's TLS)
  size_t bytes;  // mapped, header included
};

__thread Header* t_blocks __attribute__((tls_model("initial-exec"))) = nullptr;

pthread_key_t g_key;
bool g_key_ok = false;

void unmap_all(void*) {
  Header* h = __atomic_exchange_n(&t_blocks, nullptr, __ATOMIC_SEQ_CST);
  while (h) {
    Header* next = h->next;
    *h->slot = nullptr;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    arch::raw_syscall6(SYS_munmap, reinterpret_cast<long>(h), static_cast<long>(h->bytes));
    h = next;
  }
}

__attribute__((constructor(UTRAMP_INIT_RUNTIME))) void init_thread_memory() {
  g_key_ok = pthread_key_create(&g_key, unmap_all) == 0;
}

}  // namespace

void* map_thread_memory(void** slot, size_t size) noexcept {
  const size_t bytes = sizeof(Header) + size;
  // System calls, not libc's: libc's functions may be traced (`record --libs`).
  const long p = arch::raw_syscall6(SYS_mmap, 0, static_cast<long>(bytes), PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p < 0 && p > -4096) return nullptr;
  auto* h = reinterpret_cast<Header*>(p);
  h->slot = slot;
  h->bytes = bytes;
  Header* head = __atomic_load_n(&t_blocks, __ATOMIC_RELAXED);
  do {
    h->next = head;
  } while (!__atomic_compare_exchange_n(&t_blocks, &head, h, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_RELAXED));
  // A non-null value makes the key's destructor run at the thread's exit.
  if (g_key_ok) pthread_setspecific(g_key, h);
  void* mem = h + 1;
  *slot = mem;
  return mem;
}

}  // namespace utramp::os
