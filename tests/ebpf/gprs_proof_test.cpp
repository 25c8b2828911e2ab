// What a uprobe program's handler reaches through the map helpers touches only the
// general-purpose registers, as the probe layer proves it (probe::Analysis::gprs_only,
// docs/probes.md "Vector state"): then `utramp run` saves no vector state around such a
// program. And the proof stays honest: code that reaches the C library's vector
// memcmp, or computes in vector registers itself, is not proven. Plus the routines that
// replace memcpy/memcmp/memset/the hash there (common/gpr_mem.hpp), against the C library's.
#include <gtest/gtest.h>
#include <dlfcn.h>

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "common/gpr_mem.hpp"
#include "ebpf/asm.hpp"
#include "ebpf/engine.hpp"
#include "ebpf/helpers.hpp"
#include "arch/call_slot.hpp"
#include "arch/unwind.hpp"
#include "ebpf/maps.hpp"
#include "os/cpu_id.hpp"
#include "os/safe_copy.hpp"
#include "probe/analysis.hpp"

namespace utramp::ebpf {
namespace {

TEST(GprMem, CopyZeroEqualAgreeWithTheCLibrary) {
  uint8_t src[80], a[80], b[80];
  for (size_t i = 0; i < sizeof src; ++i) src[i] = static_cast<uint8_t>(i * 37 + 11);
  for (size_t off = 0; off < 8; ++off)
    for (size_t n = 0; n + off <= 64; ++n) {
      std::memset(a, 0xaa, sizeof a);
      std::memset(b, 0xaa, sizeof b);
      gpr::copy(a + off, src + 3, n);
      std::memcpy(b + off, src + 3, n);
      ASSERT_EQ(std::memcmp(a, b, sizeof a), 0) << "copy off " << off << " n " << n;
      gpr::zero(a + off, n);
      std::memset(b + off, 0, n);
      ASSERT_EQ(std::memcmp(a, b, sizeof a), 0) << "zero off " << off << " n " << n;
      std::memcpy(a + off, src, n);
      std::memcpy(b + 1, src, n);
      EXPECT_TRUE(gpr::equal(a + off, b + 1, n));
      EXPECT_EQ(gpr::hash(a + off, n), gpr::hash(b + 1, n));
      for (size_t k = 0; k < n; ++k) {  // any one byte different: not equal, another hash
        b[1 + k] ^= 0x10;
        EXPECT_FALSE(gpr::equal(a + off, b + 1, n)) << "n " << n << " byte " << k;
        EXPECT_NE(gpr::hash(a + off, n), gpr::hash(b + 1, n)) << "n " << n << " byte " << k;
        b[1 + k] ^= 0x10;
      }
    }
  // The inline 4- and 8-byte cases are the general code's results.
  for (size_t n : {4, 8}) {
    EXPECT_EQ(gpr::hash(src + 5, n), gpr::detail::hash_bytes(src + 5, n)) << n;
    EXPECT_TRUE(gpr::detail::equal_bytes(src + 5, src + 5, n));
  }
  // The length is part of the hash: a key and its zero-extension differ.
  const uint8_t z[8] = {};
  EXPECT_NE(gpr::hash(z, 4), gpr::hash(z, 8));
}

TEST(GprMem, CurrentCpuIsTheKernels) {
  // The thread may move between the two reads: pinned, it cannot.
  cpu_set_t old, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof old, &old), 0);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &old)) continue;
    CPU_ZERO(&one);
    CPU_SET(c, &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    EXPECT_EQ(os::current_cpu(), static_cast<uint32_t>(c));
    EXPECT_EQ(sched_getcpu(), c);
    // Without glibc's rseq symbols (a C library before 2.35: the weak references are
    // null), and with them but no rseq area registered (size 0): the system call.
    EXPECT_EQ(os::detail::current_cpu(nullptr, nullptr), static_cast<uint32_t>(c));
    const ptrdiff_t offset = 0;
    const unsigned int unregistered = 0;
    EXPECT_EQ(os::detail::current_cpu(&offset, &unregistered), static_cast<uint32_t>(c));
    EXPECT_EQ(os::detail::cpu_by_syscall(), static_cast<uint32_t>(c));
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof old, &old), 0);
}

// bpf_ktime_get_ns reads CLOCK_MONOTONIC through arch/call_slot.hpp's slot: the vDSO's
// clock_gettime once the helpers are set up, the system call when the slot is empty.
TEST(GprMem, KtimeIsTheMonotonicClockThroughEitherSlot) {
  const HelperInfo* h = runtime_helpers().find(5);
  ASSERT_NE(h, nullptr);
  auto mono = [] {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
  };
  void* vdso = dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_NOLOAD);
  void* vdso_clock = vdso ? dlsym(vdso, "__vdso_clock_gettime") : nullptr;
  for (void* fn : {vdso_clock, static_cast<void*>(nullptr)}) {
    arch::set_clock_gettime(reinterpret_cast<int (*)(int, timespec*) noexcept>(fn));
    const uint64_t before = mono();
    const uint64_t t = h->trusted_fn()(0, 0, 0, 0, 0);
    const uint64_t after = mono();
    EXPECT_LE(before, t) << (fn ? "vDSO" : "system call");
    EXPECT_LE(t, after) << (fn ? "vDSO" : "system call");
  }
  arch::set_clock_gettime(reinterpret_cast<int (*)(int, timespec*) noexcept>(vdso_clock));
}

// Reaches the C library's memcmp (an AVX2/EVEX implementation on x86-64 machines of
// this decade, SSE2 at least): never proven.
__attribute__((noinline)) int compare_with_libc(const void* a, const void* b, size_t n) {
  return std::memcmp(a, b, n);
}
// Computes in vector registers itself.
__attribute__((noinline)) double scale(double x, double k) { return x * k + 0.5; }
// Reaches a map update through a call: proven as the update is.
__attribute__((noinline)) int64_t update_through(MapHeader* m, const void* k, const void* v) {
  return map_update(m, k, v, 0);
}

// Unwinds with the fault-safe read passed as a pointer (arch::unwind_user's own
// parameter): a call through a register, which the proof cannot follow (the helpers
// unwind through arch/call_slot.hpp's slots instead: unwind_user_slots).
__attribute__((noinline)) size_t unwind_through_pointer(const arch::UnwindRegs& r, uint64_t* ips) {
  return arch::unwind_user(r, ips, 8, nullptr, os::safe_read);
}

uint64_t addr(auto* fn) { return reinterpret_cast<uint64_t>(fn); }

TEST(GprsOnlyProof, MapHelpersAreProvenAndVectorCodeIsNot) {
  if (dlsym(RTLD_DEFAULT, "__asan_init") || dlsym(RTLD_DEFAULT, "__ubsan_handle_add_overflow"))
    GTEST_SKIP() << "sanitizer runtimes are on the path";
  probe::Analysis an{[](uint64_t, std::span<uint8_t>) {}};
  ASSERT_TRUE(an.refresh_maps(true).ok());

  // The helpers a uprobe program calls for maps, counters, events and its identity, as
  // a verified program's JIT code calls them (the trusted form: what `utramp run` runs;
  // the unverified forms check pointers with fault-safe reads, whose fallback is not
  // proven).
  // Time (the vDSO's clock_gettime through a slot the proof follows), user stacks (the
  // unwinder's reads and return-address fix through such slots), and reads of memory
  // (the fault-safe read's system calls made directly) too.
  const std::vector<uint32_t> ids = {1,  2,  3,  4,  5,   7,   8,   14,  25,  27,  45,  67,  87,
                                     88, 89, 112, 113, 114, 115, 130, 131, 132, 133, 173, 174};
  for (uint32_t id : ids) {
    const HelperInfo* h = runtime_helpers().find(id);
    ASSERT_NE(h, nullptr) << id;
    EXPECT_TRUE(an.gprs_only(addr(h->trusted_fn()))) << h->name;
  }
  // The operations under them, of every map type they reach.
  EXPECT_TRUE(an.gprs_only(addr(&map_lookup)));
  EXPECT_TRUE(an.gprs_only(addr(&map_update)));
  EXPECT_TRUE(an.gprs_only(addr(&map_delete)));
  EXPECT_TRUE(an.gprs_only(addr(&ringbuf_output)));
  EXPECT_TRUE(an.gprs_only(addr(&perf_output)));
  EXPECT_TRUE(an.gprs_only(addr(&stack_map_put)));
  EXPECT_TRUE(an.gprs_only(addr(&map_push)));
  EXPECT_TRUE(an.gprs_only(addr(&map_pop)));
  EXPECT_TRUE(an.gprs_only(addr(&update_through)));
  EXPECT_TRUE(an.gprs_only(addr(&os::safe_read)));
  EXPECT_TRUE(an.gprs_only(addr(&arch::unwind_user_slots)));

  // The other direction. The PLT slot of memcmp is bound first (a call), so that what
  // fails the proof is the C library's memcmp itself, not the loader's lazy binding.
  const char x[] = "abcdefgh", y[] = "abcdefgi";
  EXPECT_LT(compare_with_libc(x, y, sizeof x), 0);
  EXPECT_FALSE(an.gprs_only(addr(&compare_with_libc)));
  EXPECT_EQ(scale(2.0, 3.0), 6.5);
  EXPECT_FALSE(an.gprs_only(addr(&scale)));
  EXPECT_FALSE(an.gprs_only(addr(&unwind_through_pointer)));
}

// The JIT's byte fills compute in xmm registers (bpf_jit.cpp, "Byte fills"): a program
// with one is not proven, so a uprobe running it gets the vector state saved; the same
// loop too short for a chunk (N = 16) is plain general-purpose code.
TEST(GprsOnlyProof, JitCodeWithAByteFillIsNot) {
  if (dlsym(RTLD_DEFAULT, "__asan_init") || dlsym(RTLD_DEFAULT, "__ubsan_handle_add_overflow"))
    GTEST_SKIP() << "sanitizer runtimes are on the path";
  auto fill = [](int n) {
    return "ldxdw %r2, [%r1+0]\nmov %r3, 0\nl: mov %r4, %r3\nmul %r4, %r2\nrsh %r4, 8\nmov %r5, %r10\n"
           "add %r5, -256\nadd %r5, %r3\nstxb [%r5+0], %r4\nadd %r3, 1\njlt %r3, " +
           std::to_string(n) + ", l\nmov %r0, 0\nexit\n";
  };
  for (int n : {256, 16}) {
    auto p = assemble(fill(n));
    ASSERT_TRUE(p) << p.error().message;
    ExecOptions o;
    o.ctx_size = 8;
    auto e = load(Program{"fill", "", std::move(*p)}, o, EngineKind::jit);
    ASSERT_TRUE(e) << e.error().message;
    uint64_t ctx = 3;
    ASSERT_TRUE((*e)->execute(&ctx, sizeof ctx));
    // An analysis of its own: the second program's code may reuse the first's address,
    // and an analysis keeps its answer per address.
    probe::Analysis an{[](uint64_t, std::span<uint8_t>) {}};
    ASSERT_TRUE(an.refresh_maps(true).ok());
    EXPECT_EQ(an.gprs_only(addr((*e)->native())), n == 16) << "N = " << n;
  }
}

}  // namespace
}  // namespace utramp::ebpf
