// os::map_thread_memory (os/thread_memory.hpp): per-thread blocks mapped on first use,
// reached through the caller's initial-exec pointer, unmapped at the thread's exit.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdint>

#include "os/thread_memory.hpp"

namespace {

__thread void* t_a __attribute__((tls_model("initial-exec"))) = nullptr;
__thread void* t_b __attribute__((tls_model("initial-exec"))) = nullptr;

struct Seen {
  void* a = nullptr;
  void* b = nullptr;
  bool zeroed = false;
  bool slots_set = false;
};

bool mapped(void* p) {
  unsigned char v;
  const auto page = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095};
  return mincore(reinterpret_cast<void*>(page), 1, &v) == 0 || errno != ENOMEM;
}

void* two_blocks(void* out) {
  auto* s = static_cast<Seen*>(out);
  s->a = utramp::os::map_thread_memory(&t_a, 5000);
  s->b = utramp::os::map_thread_memory(&t_b, 100);
  s->slots_set = t_a == s->a && t_b == s->b;
  s->zeroed = s->a && static_cast<unsigned char*>(s->a)[4999] == 0;
  if (s->a) static_cast<unsigned char*>(s->a)[4999] = 1;  // writable
  return nullptr;
}

TEST(ThreadMemory, MappedForTheThreadAndUnmappedAtItsExit) {
  Seen s;
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, nullptr, two_blocks, &s), 0);
  pthread_join(t, nullptr);
  ASSERT_NE(s.a, nullptr);
  ASSERT_NE(s.b, nullptr);
  EXPECT_TRUE(s.slots_set) << "the thread's pointers were not set";
  EXPECT_TRUE(s.zeroed);
  EXPECT_FALSE(mapped(s.a)) << "the thread's first block outlived it";
  EXPECT_FALSE(mapped(s.b)) << "the thread's second block outlived it";
  // This thread's own pointers were never touched.
  EXPECT_EQ(t_a, nullptr);
  EXPECT_EQ(t_b, nullptr);
}

}  // namespace
