// Maps in shared memory: each type's operations, and concurrent updates from several
// threads with exact counts.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "ebpf/maps.hpp"
#include "maps_test_util.hpp"

namespace utramp::ebpf {
namespace {

using test::TmpFile;

MapSpec spec(const char* name, MapType t, uint32_t k, uint32_t v, uint32_t n) {
  MapSpec s;
  s.name = name;
  s.type = uint32_t(t);
  s.key_size = k;
  s.value_size = v;
  s.max_entries = n;
  return s;
}

uint64_t sum_values(const MapEntry& e) {
  uint64_t s = 0;
  for (const auto& v : e.values) {
    uint64_t x = 0;
    std::memcpy(&x, v.data(), std::min<size_t>(8, v.size()));
    s += x;
  }
  return s;
}

TEST(Maps, SpecChecks) {
  EXPECT_FALSE(check_map_spec(spec("a", MapType::array, 8, 8, 4)));   // array keys are 4 bytes
  EXPECT_FALSE(check_map_spec(spec("r", MapType::ringbuf, 0, 0, 1000)));  // not a power of two
  EXPECT_FALSE(check_map_spec(spec("h", MapType::hash, 4, 8, 0)));
  auto r = check_map_spec(spec("cg", MapType(8), 4, 4, 4));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("map 'cg': map type 8 (cgroup_array) is not supported"), std::string::npos);
}

TEST(Maps, SpecChecksOfQueuesStacksBloomFiltersAndPerfArrays) {
  EXPECT_TRUE(check_map_spec(spec("q", MapType::queue, 0, 8, 4)));
  EXPECT_TRUE(check_map_spec(spec("s", MapType::stack, 0, 8, 4)));
  EXPECT_FALSE(check_map_spec(spec("q", MapType::queue, 4, 8, 4)));  // no keys
  EXPECT_FALSE(check_map_spec(spec("q", MapType::queue, 0, 0, 4)));
  EXPECT_FALSE(check_map_spec(spec("s", MapType::stack, 0, 8, 0)));
  MapSpec b = spec("b", MapType::bloom_filter, 0, 8, 100);
  b.map_extra = 15;
  EXPECT_TRUE(check_map_spec(b));
  b.map_extra = 16;  // more than the 4 bits of hash functions
  auto r = check_map_spec(b);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("map 'b' (bloom_filter): map_extra 0x10"), std::string::npos) << r.error().message;
  MapSpec h = spec("h", MapType::hash, 4, 8, 4);
  h.map_extra = 1;
  EXPECT_FALSE(check_map_spec(h));
  // libbpf-tools' perf event arrays name no max_entries: one ring per possible CPU.
  MapSpec p = spec("p", MapType::perf_event_array, 4, 4, 0);
  complete_map_spec(p);
  EXPECT_GE(p.max_entries, 1u);
  EXPECT_TRUE(check_map_spec(p));
  MapSpec p0 = spec("p", MapType::perf_event_array, 0, 0, 2);
  complete_map_spec(p0);
  EXPECT_EQ(p0.key_size, 4u);
  EXPECT_EQ(p0.value_size, 4u);
  EXPECT_FALSE(check_map_spec(spec("p", MapType::perf_event_array, 8, 4, 2)));
  p.ring_bytes = 5000;  // not a power of two
  EXPECT_FALSE(check_map_spec(p));
}

// The kernel's queue_stack_maps semantics: max_entries elements; a full map refuses a
// push (-E2BIG) unless BPF_EXIST, which drops the oldest; empty: -ENOENT; flags other
// than BPF_ANY/BPF_EXIST: -EINVAL; peek leaves the element.
TEST(Maps, StackTraceIdsFollowTheKernelsStackmap) {
  TmpFile f;
  auto mf = MapFile::create(f.path, {spec("one", MapType::stack_trace, 4, 32, 1),
                                     spec("three", MapType::stack_trace, 4, 24, 1000)});
  ASSERT_TRUE(mf);
  MapHeader* one = mf->header(0);  // one bucket: every stack's id is 0
  const uint64_t a[] = {0x1000, 0x2000, 0x3000}, b[] = {0x1000, 0x2000, 0x4000};
  EXPECT_EQ(stack_map_put(one, a, 3, 0), 0);
  EXPECT_EQ(stack_map_put(one, a, 3, 0), 0);                // the same stack: its id again
  EXPECT_EQ(stack_map_put(one, b, 3, 0), -EEXIST);          // another stack in its bucket
  EXPECT_EQ(stack_map_put(one, a, 2, 0), -EEXIST);          // a shorter one too
  EXPECT_EQ(stack_map_put(one, b, 3, kStackReuseId), 0);    // replaces it
  EXPECT_EQ(stack_map_put(one, b, 3, kStackFastCmp), 0);    // the same hash is enough
  EXPECT_EQ(stack_map_put(one, a, 0, 0), -EINVAL);
  auto es = mf->entries(0);
  ASSERT_EQ(es.size(), 1u);
  uint64_t v[4];
  ASSERT_EQ(es[0].values.at(0).size(), sizeof v);
  std::memcpy(v, es[0].values[0].data(), sizeof v);
  EXPECT_EQ(v[0], 0x1000u);
  EXPECT_EQ(v[2], 0x4000u);
  EXPECT_EQ(v[3], 0u);  // the rest of the value: zero
  uint32_t id = 0;
  EXPECT_EQ(map_lookup(one, &id), nullptr);  // programs do not read stacks (the kernel's -EOPNOTSUPP)
  EXPECT_EQ(map_delete(one, &id), 0);
  EXPECT_EQ(map_delete(one, &id), -ENOENT);
  id = 1;
  EXPECT_EQ(map_delete(one, &id), -E2BIG);
  EXPECT_TRUE(mf->entries(0).empty());
  // Many buckets: distinct stacks get ids below the bucket count, each read back; a
  // stack longer than the value keeps its first value_size/8 frames.
  MapHeader* three = mf->header(1);
  std::map<uint32_t, uint64_t> first;
  for (uint64_t k = 1; k <= 50; ++k) {
    const uint64_t s[] = {k, k + 100, k + 200, k + 300};
    const int64_t got = stack_map_put(three, s, 4, 0);
    if (got == -EEXIST) continue;  // a collision: the kernel's answer too
    ASSERT_GE(got, 0);
    ASSERT_LT(got, 1024);
    first[uint32_t(got)] = k;
  }
  EXPECT_GT(first.size(), 40u);
  for (const auto& e : mf->entries(1)) {
    uint32_t k;
    std::memcpy(&k, e.key.data(), 4);
    uint64_t w[3];
    std::memcpy(w, e.values.at(0).data(), sizeof w);
    ASSERT_TRUE(first.count(k));
    EXPECT_EQ(w[0], first[k]);
    EXPECT_EQ(w[2], first[k] + 200);
  }
  EXPECT_EQ(mf->entries(1).size(), first.size());
}

TEST(Maps, StackTraceSpecChecks) {
  EXPECT_TRUE(check_map_spec(spec("s", MapType::stack_trace, 4, 127 * 8, 16)));
  EXPECT_FALSE(check_map_spec(spec("s", MapType::stack_trace, 8, 64, 16)));       // ids are 4 bytes
  EXPECT_FALSE(check_map_spec(spec("s", MapType::stack_trace, 4, 60, 16)));       // whole frames
  EXPECT_FALSE(check_map_spec(spec("s", MapType::stack_trace, 4, 128 * 8, 16)));  // at most 127
  MapSpec b = spec("s", MapType::stack_trace, 4, 64, 16);
  b.flags = kMapStackBuildId;
  auto r = check_map_spec(b);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("BPF_F_STACK_BUILD_ID"), std::string::npos);
}

TEST(Maps, LoadedRangesRoundTrip) {
  std::vector<uint8_t> value(kObjectsBytes);
  EXPECT_TRUE(read_loaded_ranges(value).empty());
  write_loaded_ranges(value, {{0x1000, 0x2000, 0, "/usr/bin/a b"}, {0x7f00, 0x8000, 0x7000, "libc.so.6"}});
  const auto r = read_loaded_ranges(value);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].lo, 0x1000u);
  EXPECT_EQ(r[0].path, "/usr/bin/a b");
  EXPECT_EQ(r[1].bias, 0x7000u);
  EXPECT_EQ(r[1].hi, 0x8000u);
  write_loaded_ranges(value, {{1, 2, 3, "x"}});  // a newer list replaces the old one
  ASSERT_EQ(read_loaded_ranges(value).size(), 1u);
}

TEST(Maps, QueueIsFifoWithKernelErrors) {
  TmpFile f;
  auto mf = MapFile::create(f.path, {spec("q", MapType::queue, 0, 8, 3)});
  ASSERT_TRUE(mf);
  MapHeader* q = mf->header(0);
  uint64_t v = 0;
  EXPECT_EQ(map_pop(q, &v), -ENOENT);
  EXPECT_EQ(map_peek(q, &v), -ENOENT);
  for (uint64_t x : {10, 20, 30}) ASSERT_EQ(map_push(q, &x, 0), 0);
  uint64_t x = 40;
  EXPECT_EQ(map_push(q, &x, 0), -E2BIG);
  EXPECT_EQ(map_push(q, &x, 1), -EINVAL);  // BPF_NOEXIST
  EXPECT_EQ(map_push(q, &x, 3), -EINVAL);
  EXPECT_EQ(map_push(q, &x, 2), 0);        // BPF_EXIST: 10 goes
  ASSERT_EQ(map_peek(q, &v), 0);
  EXPECT_EQ(v, 20u);
  auto e = mf->entries(0);  // pop order, keyed by position
  ASSERT_EQ(e.size(), 3u);
  for (uint32_t k = 0; k < 3; ++k) {
    uint32_t key;
    std::memcpy(&key, e[k].key.data(), 4);
    EXPECT_EQ(key, k);
    EXPECT_EQ(sum_values(e[k]), 20u + 10 * k);
  }
  for (uint64_t want : {20, 30, 40}) {
    ASSERT_EQ(map_pop(q, &v), 0);
    EXPECT_EQ(v, want);
  }
  EXPECT_EQ(map_pop(q, &v), -ENOENT);
  // Keyed operations are not a queue's: the verifier refuses them, the map too.
  uint32_t k = 0;
  EXPECT_EQ(map_lookup(q, &k), nullptr);
  EXPECT_EQ(map_update(q, &k, &v, 0), -EINVAL);
  EXPECT_EQ(map_delete(q, &k), -EINVAL);
  // Round the ring several times: order is kept across the wrap.
  for (uint64_t i = 0; i < 20; ++i) {
    ASSERT_EQ(map_push(q, &i, 0), 0);
    ASSERT_EQ(map_pop(q, &v), 0);
    EXPECT_EQ(v, i);
  }
}

TEST(Maps, StackIsLifoAndBpfExistDropsTheOldest) {
  TmpFile f;
  auto mf = MapFile::create(f.path, {spec("s", MapType::stack, 0, 4, 3)});
  ASSERT_TRUE(mf);
  MapHeader* s = mf->header(0);
  uint32_t v = 0;
  EXPECT_EQ(map_pop(s, &v), -ENOENT);
  for (uint32_t x : {1u, 2u, 3u}) ASSERT_EQ(map_push(s, &x, 0), 0);
  uint32_t x = 4;
  EXPECT_EQ(map_push(s, &x, 0), -E2BIG);
  EXPECT_EQ(map_push(s, &x, 2), 0);  // 1, the oldest, goes
  ASSERT_EQ(map_peek(s, &v), 0);
  EXPECT_EQ(v, 4u);
  auto e = mf->entries(0);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(sum_values(e[0]), 4u);
  EXPECT_EQ(sum_values(e[2]), 2u);
  for (uint32_t want : {4u, 3u, 2u}) {
    ASSERT_EQ(map_pop(s, &v), 0);
    EXPECT_EQ(v, want);
  }
  EXPECT_EQ(map_pop(s, &v), -ENOENT);
  EXPECT_TRUE(mf->entries(0).empty());
}

// Bloom filters: no false negative ever; a few false positives at the kernel's sizing
// (max_entries * hashes / ln 2 bits); pop is not supported, push takes BPF_ANY only.
TEST(Maps, BloomFilterHasNoFalseNegatives) {
  TmpFile f;
  MapSpec b = spec("b", MapType::bloom_filter, 0, 8, 1000);
  b.map_extra = 3;
  auto mf = MapFile::create(f.path, {b, spec("b5", MapType::bloom_filter, 0, 12, 1000)});
  ASSERT_TRUE(mf);
  MapHeader* m = mf->header(0);
  uint64_t v = 7;
  EXPECT_EQ(map_peek(m, &v), -ENOENT);  // empty
  EXPECT_EQ(map_push(m, &v, 2), -EINVAL);
  EXPECT_EQ(map_pop(m, &v), -EOPNOTSUPP);
  for (uint64_t i = 0; i < 1000; ++i) {
    uint64_t x = i * 0x9e3779b97f4a7c15ull;
    ASSERT_EQ(map_push(m, &x, 0), 0);
  }
  int fp = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    uint64_t x = i * 0x9e3779b97f4a7c15ull;
    EXPECT_EQ(map_peek(m, &x), 0) << i;
    uint64_t y = x + 1;
    if (map_peek(m, &y) == 0) ++fp;
  }
  EXPECT_LT(fp, 100);  // ~3% expected with 3 hashes over 8192 bits
  EXPECT_TRUE(mf->entries(0).empty());
  // Odd value sizes, the default 5 hash functions.
  uint8_t key[12] = {1, 2, 3};
  EXPECT_EQ(map_peek(mf->header(1), key), -ENOENT);
  ASSERT_EQ(map_push(mf->header(1), key, 0), 0);
  EXPECT_EQ(map_peek(mf->header(1), key), 0);
}

MapSpec perf_spec(uint32_t rings, uint32_t ring_bytes) {
  MapSpec p = spec("events", MapType::perf_event_array, 4, 4, rings);
  p.ring_bytes = ring_bytes;
  return p;
}

struct PerfRec {
  uint32_t cpu;
  uint64_t v;
};
std::vector<PerfRec> consume(MapFile& mf, size_t i, bool final = false) {
  std::vector<PerfRec> out;
  mf.consume_perf(
      i,
      [&](uint32_t cpu, std::span<const uint8_t> d) {
        uint64_t v = 0;
        std::memcpy(&v, d.data(), std::min<size_t>(8, d.size()));
        out.push_back({cpu, v});
      },
      final);
  return out;
}

// A discarded record (bpf_perf_event_output whose copy failed) frees its space when the
// consumer passes it, alone or after a record it gives: otherwise a program whose outputs
// keep failing fills the ring for good, and every later output is lost.
TEST(Maps, PerfDiscardedRecordsFreeTheirSpace) {
  TmpFile f;
  auto mf = MapFile::create(f.path, {perf_spec(1, 4096)});
  ASSERT_TRUE(mf);
  MapHeader* p = mf->header(0);
  uint64_t v = 0;
  // Only discarded records for a while (200 x 56 bytes > 4096), the consumer passing by.
  for (int round = 0; round < 200; ++round) {
    int64_t err = 0;
    void* r = perf_reserve(p, 0, 40, &err);
    ASSERT_NE(r, nullptr) << "round " << round << ": " << err;
    perf_commit(r, true);
    EXPECT_TRUE(consume(*mf, 0).empty()) << "round " << round;
  }
  // Then records, each followed by a discarded one.
  for (int round = 0; round < 200; ++round) {
    v = round;
    ASSERT_EQ(perf_output(p, 0, &v, 8), 0) << "round " << round;
    int64_t err = 0;
    void* r = perf_reserve(p, 0, 40, &err);
    ASSERT_NE(r, nullptr) << "round " << round << ": " << err;
    perf_commit(r, true);
    auto got = consume(*mf, 0);
    ASSERT_EQ(got.size(), 1u) << "round " << round;
    EXPECT_EQ(got[0].v, static_cast<uint64_t>(round));
  }
  EXPECT_EQ(mf->ring_dropped(0), 0u);
}

// bpf_perf_event_output's flags and errors, and the consumer's merge: records sent to
// several rings come out in the order they were sent.
TEST(Maps, PerfEventArrayIndexesErrorsAndOrder) {
  TmpFile f;
  auto mf = MapFile::create(f.path, {perf_spec(3, 4096)});
  ASSERT_TRUE(mf);
  MapHeader* p = mf->header(0);
  uint64_t v = 0;
  EXPECT_EQ(perf_output(p, 3, &v, 8), -E2BIG);               // index beyond max_entries
  EXPECT_EQ(perf_output(p, 1ull << 32, &v, 8), -EINVAL);     // bits beyond the index
  for (uint64_t i = 0; i < 9; ++i) {
    v = 100 + i;
    ASSERT_EQ(perf_output(p, (i * 2) % 3, &v, 8), 0);
  }
  auto got = consume(*mf, 0);
  ASSERT_EQ(got.size(), 9u);
  for (uint64_t i = 0; i < 9; ++i) {
    EXPECT_EQ(got[i].v, 100 + i);
    EXPECT_EQ(got[i].cpu, (i * 2) % 3);
  }
  EXPECT_TRUE(consume(*mf, 0).empty());
  // Empty records (size 0) are records too.
  ASSERT_EQ(perf_output(p, 0, &v, 0), 0);
  size_t empty = 0;
  mf->consume_perf(0, [&](uint32_t, std::span<const uint8_t> d) { empty += d.empty(); });
  EXPECT_EQ(empty, 1u);
  // The calling CPU's ring: sched_getcpu() < max_entries here unless the machine has
  // more CPUs than 3.
  v = 7;
  const int64_t rc = perf_output(p, 0xffffffffull, &v, 8);
  if (sched_getcpu() < 3) EXPECT_EQ(rc, 0);
  else EXPECT_EQ(rc, -E2BIG);
}

// A ring holds what fits; then -ENOSPC, counted as lost, until the consumer frees space.
TEST(Maps, PerfEventArrayFullRingLosesAndCounts) {
  TmpFile f;
  auto mf = MapFile::create(f.path, {perf_spec(1, 4096)});
  ASSERT_TRUE(mf);
  MapHeader* p = mf->header(0);
  uint64_t rec[3] = {};
  int sent = 0, lost = 0;
  for (int i = 0; i < 200; ++i) {
    rec[0] = static_cast<uint64_t>(i);
    const int64_t rc = perf_output(p, 0, rec, sizeof rec);
    if (rc == 0) ++sent;
    else if (rc == -ENOSPC) ++lost;
  }
  // 24 bytes + an 8-byte stamp + an 8-byte header: 40 bytes a record, 102 in 4096.
  EXPECT_EQ(sent, 4096 / 40);
  EXPECT_EQ(lost, 200 - 4096 / 40);
  EXPECT_EQ(mf->ring_dropped(0), uint64_t(lost));
  auto got = consume(*mf, 0);
  ASSERT_EQ(got.size(), size_t(sent));
  for (int i = 0; i < sent; ++i) EXPECT_EQ(got[i].v, uint64_t(i));
  EXPECT_EQ(perf_output(p, 0, rec, sizeof rec), 0);  // room again (wrapping)
  EXPECT_EQ(perf_output(p, 0, rec, 4096), -ENOSPC);  // larger than a quarter of the ring
}

// A record still being written holds back every record stamped after it, in any ring,
// until it is submitted: a later record of its thread cannot overtake it.
TEST(Maps, PerfRecordBeingWrittenHoldsBackLaterOnes) {
  TmpFile f;
  auto mf = MapFile::create(f.path, {perf_spec(2, 4096)});
  ASSERT_TRUE(mf);
  MapHeader* p = mf->header(0);
  uint64_t v = 1;
  ASSERT_EQ(perf_output(p, 1, &v, 8), 0);
  int64_t err = 0;
  void* busy = perf_reserve(p, 0, 8, &err);
  ASSERT_NE(busy, nullptr);
  v = 3;
  ASSERT_EQ(perf_output(p, 1, &v, 8), 0);
  auto got = consume(*mf, 0);
  ASSERT_EQ(got.size(), 1u);  // 1 only: 3 was stamped after the busy one
  EXPECT_EQ(got[0].v, 1u);
  v = 2;
  std::memcpy(busy, &v, 8);
  perf_commit(busy, false);
  got = consume(*mf, 0);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].v, 2u);
  EXPECT_EQ(got[1].v, 3u);
  // A target that died inside a record: the final drain gives what was submitted.
  busy = perf_reserve(p, 0, 8, &err);
  v = 5;
  ASSERT_EQ(perf_output(p, 1, &v, 8), 0);
  EXPECT_TRUE(consume(*mf, 0).empty());
  got = consume(*mf, 0, true);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].v, 5u);
}

TEST(Maps, HashOperations) {
  TmpFile f;
  auto mf = MapFile::create(f.path, {spec("h", MapType::hash, 4, 8, 4)});
  ASSERT_TRUE(mf) << mf.error().message;
  MapHeader* h = mf->header(0);
  uint32_t k = 7;
  uint64_t v = 70;
  EXPECT_EQ(map_lookup(h, &k), nullptr);
  EXPECT_EQ(map_update(h, &k, &v, 2), -ENOENT);  // BPF_EXIST
  EXPECT_EQ(map_update(h, &k, &v, 1), 0);        // BPF_NOEXIST
  EXPECT_EQ(map_update(h, &k, &v, 1), -EEXIST);
  ASSERT_NE(map_lookup(h, &k), nullptr);
  EXPECT_EQ(*static_cast<uint64_t*>(map_lookup(h, &k)), 70u);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(map_update(h, &i, &v, 0), 0);
  uint32_t full = 100;
  EXPECT_EQ(map_update(h, &full, &v, 0), -E2BIG);
  EXPECT_EQ(mf->entry_count(0), 4u);
  EXPECT_EQ(map_delete(h, &k), 0);
  EXPECT_EQ(map_delete(h, &k), -ENOENT);
  EXPECT_EQ(map_update(h, &full, &v, 0), 0);  // the freed entry is reused
  EXPECT_EQ(mf->entries(0).size(), 4u);
}

TEST(Maps, LruEvictsInsteadOfFailing) {
  TmpFile f;
  auto mf = MapFile::create(f.path, {spec("l", MapType::lru_hash, 8, 8, 64)});
  ASSERT_TRUE(mf);
  MapHeader* h = mf->header(0);
  for (uint64_t k = 0; k < 1000; ++k) ASSERT_EQ(map_update(h, &k, &k, 0), 0) << k;
  EXPECT_EQ(mf->entry_count(0), 64u);
  uint64_t last = 999;
  ASSERT_NE(map_lookup(h, &last), nullptr);  // the newest survives
}

TEST(Maps, ArrayAndGlobalData) {
  TmpFile f;
  MapSpec g = spec(".data", MapType::array, 4, 12, 1);
  g.init = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  g.global_data = true;
  auto mf = MapFile::create(f.path, {spec("a", MapType::array, 4, 8, 4), g});
  ASSERT_TRUE(mf);
  uint32_t k = 4;
  EXPECT_EQ(map_lookup(mf->header(0), &k), nullptr);
  k = 0;
  EXPECT_EQ(std::memcmp(map_lookup(mf->header(1), &k), g.init.data(), 12), 0);
  EXPECT_EQ(mf->spec(1).name, ".data");
  EXPECT_TRUE(mf->spec(1).global_data);
}

TEST(Maps, AttachSeesTheSameMemoryAndRegisters) {
  TmpFile f;
  auto a = MapFile::create(f.path, {spec("a", MapType::array, 4, 8, 4)});
  ASSERT_TRUE(a);
  auto b = MapFile::attach(f.path);
  ASSERT_TRUE(b) << b.error().message;
  uint32_t k = 2;
  uint64_t v = 42;
  ASSERT_EQ(map_update(b->header(0), &k, &v, 0), 0);
  EXPECT_EQ(*static_cast<uint64_t*>(map_lookup(a->header(0), &k)), 42u);
  EXPECT_EQ(map_from_addr(reinterpret_cast<uint64_t>(b->header(0))), b->header(0));
  EXPECT_EQ(map_from_addr(reinterpret_cast<uint64_t>(b->header(0)) + 8), nullptr);
  EXPECT_EQ(map_from_addr(reinterpret_cast<uint64_t>(a->header(0))), nullptr);  // not attached
}

// Eight threads, each 20000 times: bump a shared key (lookup + atomic add, inserting
// when absent), insert and delete a key of its own, and count in a per-CPU array.
TEST(MapsConcurrent, HashAndPercpuExactCounts) {
  TmpFile f;
  auto mf = MapFile::create(f.path, {spec("h", MapType::hash, 4, 8, 64), spec("pc", MapType::percpu_array, 4, 8, 1),
                                     spec("ph", MapType::percpu_hash, 4, 8, 8)});
  ASSERT_TRUE(mf);
  MapHeader *h = mf->header(0), *pc = mf->header(1), *ph = mf->header(2);
  constexpr int kThreads = 8, kIters = 20000;
  std::vector<std::thread> ts;
  std::atomic<int> errors{0};
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        uint32_t shared = static_cast<uint32_t>(i % 4);
        for (;;) {
          if (auto* p = static_cast<uint64_t*>(map_lookup(h, &shared))) {
            __atomic_fetch_add(p, 1, __ATOMIC_RELAXED);
            break;
          }
          uint64_t one = 1;
          if (map_update(h, &shared, &one, 1) == 0) break;
        }
        uint32_t own = 100 + static_cast<uint32_t>(t);
        uint64_t v = static_cast<uint64_t>(i);
        if (map_update(h, &own, &v, 1) != 0 || map_delete(h, &own) != 0) ++errors;
        uint32_t zero = 0;
        auto* c = static_cast<uint64_t*>(map_lookup(pc, &zero));
        __atomic_fetch_add(c, 1, __ATOMIC_RELAXED);  // per-CPU slot, shared by threads on that CPU
        uint32_t k = static_cast<uint32_t>(t % 2);
        for (;;) {
          if (auto* p = static_cast<uint64_t*>(map_lookup(ph, &k))) {
            __atomic_fetch_add(p, 1, __ATOMIC_RELAXED);
            break;
          }
          uint64_t one = 1;
          if (map_update(ph, &k, &one, 1) == 0) break;
        }
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(errors.load(), 0);
  std::map<uint32_t, uint64_t> got;
  for (const auto& e : mf->entries(0)) {
    uint32_t k;
    std::memcpy(&k, e.key.data(), 4);
    got[k] = sum_values(e);
  }
  ASSERT_EQ(got.size(), 4u);  // every per-thread key was deleted
  for (uint32_t k = 0; k < 4; ++k) EXPECT_EQ(got[k], uint64_t(kThreads) * kIters / 4) << k;
  EXPECT_EQ(mf->entry_count(0), 4u);
  auto pce = mf->entries(1);
  ASSERT_EQ(pce.size(), 1u);
  EXPECT_EQ(pce[0].values.size(), mf->cpus());
  EXPECT_EQ(sum_values(pce[0]), uint64_t(kThreads) * kIters);
  uint64_t ph_total = 0;
  for (const auto& e : mf->entries(2)) ph_total += sum_values(e);
  EXPECT_EQ(ph_total, uint64_t(kThreads) * kIters);
}

// Four producers (reserve/submit, some discards, some output) against one consumer:
// every submitted record arrives once, none corrupt, none of the discarded.
TEST(MapsConcurrent, RingbufProducersAndConsumer) {
  TmpFile f;
  MapSpec r;
  r.name = "rb";
  r.type = uint32_t(MapType::ringbuf);
  r.max_entries = 1 << 14;
  auto mf = MapFile::create(f.path, {r});
  ASSERT_TRUE(mf);
  MapHeader* rb = mf->header(0);
  constexpr int kProducers = 4, kRecords = 20000;
  std::atomic<int> done{0};
  std::atomic<uint64_t> sent{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kProducers; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < kRecords; ++i) {
        uint64_t rec[3] = {static_cast<uint64_t>(t), static_cast<uint64_t>(i), uint64_t(t) * 1000003u + i};
        if (i % 3 == 0) {
          while (ringbuf_output(rb, rec, sizeof rec) != 0) std::this_thread::yield();
          sent.fetch_add(1);
          continue;
        }
        void* p;
        while (!(p = ringbuf_reserve(rb, 8 + (i % 5) * 8 + 16))) std::this_thread::yield();
        std::memcpy(p, rec, sizeof rec);
        const bool discard = i % 7 == 0;
        ASSERT_TRUE(ringbuf_commit(rb, p, discard));
        ASSERT_FALSE(ringbuf_commit(rb, p, false));  // twice: refused
        if (!discard) sent.fetch_add(1);
      }
      done.fetch_add(1);
    });
  uint64_t got = 0, bad = 0;
  std::vector<int> next(kProducers, 0);
  auto consume = [&] {
    return mf->consume_ring(0, [&](std::span<const uint8_t> d) {
      uint64_t rec[3];
      std::memcpy(rec, d.data(), sizeof rec);
      if (rec[0] >= kProducers || rec[2] != rec[0] * 1000003u + rec[1] || static_cast<int>(rec[1]) < next[rec[0]])
        ++bad;
      else
        next[rec[0]] = static_cast<int>(rec[1]) + 1;
      ++got;
    });
  };
  while (done.load() < kProducers) consume();
  consume();
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(got, sent.load());
}

// The CLI's reads of a map file a target shares (MapFile's comment): a bucket lock left
// held by a dead thread delays a read by at most a few milliseconds, and entries are
// still read; garbage written over the control words is bounded, never followed.
TEST(MapsOwner, ReadsEndWhenALockIsHeldForEver) {
  TmpFile f;
  auto mf = MapFile::create(f.path, {spec("h", MapType::hash, 4, 8, 64)});
  ASSERT_TRUE(mf);
  MapHeader* h = mf->header(0);
  for (uint32_t k = 0; k < 10; ++k) {
    uint64_t v = k * 10;
    ASSERT_EQ(map_update(h, &k, &v, 0), 0);
  }
  // Every bucket lock held, as by threads that were killed inside them.
  auto data = mf->data(0);
  const size_t nb = 64;  // bit_ceil(64)
  for (size_t b = 0; b < nb; ++b) std::memset(data.data() + b * 8, 0x01, 1);
  const auto t0 = std::chrono::steady_clock::now();
  const auto e = mf->entries(0);
  const auto spent = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(spent, std::chrono::seconds(1));
  EXPECT_EQ(e.size(), 10u);
  EXPECT_EQ(mf->unlocked_reads(), nb);
}

TEST(MapsOwner, GarbageLinksAreNotFollowed) {
  TmpFile f;
  MapSpec rb;
  rb.name = "rb";
  rb.type = uint32_t(MapType::ringbuf);
  rb.max_entries = 4096;
  auto mf = MapFile::create(f.path, {spec("h", MapType::hash, 4, 8, 16), rb});
  ASSERT_TRUE(mf);
  for (uint32_t k = 0; k < 5; ++k) {
    uint64_t v = k;
    ASSERT_EQ(map_update(mf->header(0), &k, &v, 0), 0);
  }
  // A stray memset over both maps' memory, headers included.
  for (size_t i = 0; i < 2; ++i) {
    auto d = mf->data(i);
    std::memset(d.data(), 0xff, d.size());
    std::memset(reinterpret_cast<uint8_t*>(mf->header(i)), 0xff, 64);
  }
  for (size_t b = 0; b < 16; ++b) std::memset(mf->data(0).data() + b * 8, 0, 4);  // locks free
  EXPECT_TRUE(mf->entries(0).empty());  // every head is out of range
  EXPECT_GT(mf->corrupt_reads(), 0u);
  EXPECT_EQ(mf->consume_ring(1, [](std::span<const uint8_t>) { FAIL() << "read a record"; }), 0u);
  EXPECT_EQ(mf->spec(0).name, "h");  // the CLI's own copy
  EXPECT_EQ(mf->count(), 2u);
}

// Perf rings and a queue overwritten by the target: the consumer's walks stay inside
// the rings and say so; a queue's indices out of range are not followed.
TEST(MapsOwner, ScribbledPerfRingsAndQueuesAreBounded) {
  TmpFile f;
  auto mf = MapFile::create(f.path, {perf_spec(2, 4096), spec("q", MapType::queue, 0, 8, 4)});
  ASSERT_TRUE(mf);
  uint64_t v = 1;
  ASSERT_EQ(perf_output(mf->header(0), 0, &v, 8), 0);
  ASSERT_EQ(map_push(mf->header(1), &v, 0), 0);
  for (uint8_t fill : {0xff, 0x7f, 0x10}) {
    for (size_t i = 0; i < 2; ++i) {
      auto d = mf->data(i);
      std::memset(d.data(), fill, d.size());
    }
    std::memset(mf->data(1).data(), 0, 4);  // the queue's lock free
    const uint64_t before = mf->corrupt_reads();
    size_t n = 0;
    mf->consume_perf(0, [&](uint32_t, std::span<const uint8_t> d) {
      n += d.size() <= 4096;  // what it gives lies inside a ring
    }, true);
    (void)mf->entries(1);
    EXPECT_GT(mf->corrupt_reads(), before) << int(fill);
  }
}


// A program run by a signal handler that interrupted its own thread inside a map
// operation (holding the bucket lock): the handler's operation fails with -EBUSY instead
// of waiting for a lock that is released only after it returns. One bucket, a thread
// updating it without pause, another sending it signals whose handler updates it too.
std::atomic<int> g_handler_busy{0}, g_handler_ok{0};
MapHeader* g_reentry_map = nullptr;
void reenter_handler(int) {
  uint32_t k = 1;
  uint64_t v = 2;
  const int64_t r = map_update(g_reentry_map, &k, &v, 0);
  if (r == -EBUSY) g_handler_busy.fetch_add(1);
  else if (r == 0) g_handler_ok.fetch_add(1);
}

TEST(MapsReentry, SignalHandlerInsideAMapOperationFailsInsteadOfHanging) {
  TmpFile f;
  auto mf = MapFile::create(f.path, {spec("h", MapType::hash, 4, 8, 1)});  // one bucket
  ASSERT_TRUE(mf);
  g_reentry_map = mf->header(0);
  struct sigaction sa {}, old{};
  sa.sa_handler = reenter_handler;
  sigaction(SIGUSR1, &sa, &old);
  std::atomic<bool> done{false};
  const pthread_t self = pthread_self();
  std::thread pinger([&] {
    while (!done.load()) {
      pthread_kill(self, SIGUSR1);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
  uint32_t k = 1;
  for (uint64_t i = 0; i < 2'000'000 && g_handler_busy.load() < 50; ++i) {
    uint64_t v = i;
    const int64_t r = map_update(g_reentry_map, &k, &v, 0);
    ASSERT_TRUE(r == 0) << r;
    (void)map_lookup(g_reentry_map, &k);
  }
  done = true;
  pinger.join();
  sigaction(SIGUSR1, &old, nullptr);
  EXPECT_GT(g_handler_busy.load(), 0);  // the handlers did come in while the lock was held
  EXPECT_GT(g_handler_ok.load(), 0);
}

// ---- LPM tries (the kernel's lpm_trie semantics) ---------------------------------------

// An IPv4 LPM key: the prefix length, then the address's bytes, most significant first.
struct Ip4Key {
  uint32_t prefixlen;
  uint8_t data[4];
};
Ip4Key ip4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint32_t len) { return {len, {a, b, c, d}}; }

MapSpec lpm_spec(uint32_t key_size, uint32_t n) {
  MapSpec s = spec("routes", MapType::lpm_trie, key_size, 8, n);
  s.flags = kMapNoPrealloc;
  return s;
}

uint64_t lpm_get(MapHeader* m, Ip4Key k) {
  const void* v = map_lookup(m, &k);
  if (!v) return 0;
  uint64_t x;
  std::memcpy(&x, v, 8);
  return x;
}

TEST(MapsLpm, SpecNeedsNoPreallocAndADataSizeOf1To256Bytes) {
  EXPECT_TRUE(check_map_spec(lpm_spec(8, 16)));
  EXPECT_TRUE(check_map_spec(lpm_spec(4 + 256, 16)));
  EXPECT_FALSE(check_map_spec(lpm_spec(4, 16)));        // no data
  EXPECT_FALSE(check_map_spec(lpm_spec(4 + 257, 16)));
  MapSpec pre = lpm_spec(8, 16);
  pre.flags = 0;
  auto r = check_map_spec(pre);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("map 'routes' (lpm_trie): map_flags must have BPF_F_NO_PREALLOC"),
            std::string::npos)
      << r.error().message;
}

// Longest-prefix lookups, the update flags, -ENOSPC when full, -EINVAL beyond the
// data's bits; an intermediate node (where two prefixes part) is no entry.
TEST(MapsLpm, LongestPrefixWinsAndFlagsFollowTheKernel) {
  TmpFile f;
  auto mf = MapFile::create(f.path, {lpm_spec(8, 6)});
  ASSERT_TRUE(mf);
  MapHeader* t = mf->header(0);
  EXPECT_EQ(lpm_get(t, ip4(10, 1, 2, 3, 32)), 0u);
  const std::pair<Ip4Key, uint64_t> routes[] = {{ip4(10, 0, 0, 0, 8), 1},     {ip4(10, 1, 0, 0, 16), 2},
                                                {ip4(10, 1, 2, 0, 24), 3},    {ip4(192, 168, 0, 0, 16), 4},
                                                {ip4(0, 0, 0, 0, 0), 5},      {ip4(10, 1, 2, 3, 32), 6}};
  for (const auto& [k, v] : routes) ASSERT_EQ(map_update(t, &k, &v, 1), 0);
  EXPECT_EQ(lpm_get(t, ip4(10, 1, 2, 3, 32)), 6u);
  EXPECT_EQ(lpm_get(t, ip4(10, 1, 2, 4, 32)), 3u);
  EXPECT_EQ(lpm_get(t, ip4(10, 1, 3, 1, 32)), 2u);
  EXPECT_EQ(lpm_get(t, ip4(10, 200, 0, 1, 32)), 1u);
  EXPECT_EQ(lpm_get(t, ip4(192, 168, 7, 7, 32)), 4u);
  EXPECT_EQ(lpm_get(t, ip4(11, 0, 0, 1, 32)), 5u);
  EXPECT_EQ(lpm_get(t, ip4(10, 1, 2, 4, 16)), 2u);  // the key's own length bounds the match
  // The value a lookup gives is memory programs may store into.
  const auto vals = mf->values(0);
  auto* v = static_cast<uint8_t*>(map_lookup(t, &routes[0].first));
  EXPECT_TRUE(v >= vals.data() && v + 8 <= vals.data() + vals.size());

  uint64_t x = 7;
  const Ip4Key extra = ip4(172, 16, 0, 0, 12);
  EXPECT_EQ(map_update(t, &extra, &x, 0), -ENOSPC);  // 6 entries: full
  EXPECT_EQ(map_update(t, &routes[1].first, &x, 1), -EEXIST);  // BPF_NOEXIST
  EXPECT_EQ(map_update(t, &extra, &x, 2), -ENOENT);            // BPF_EXIST
  EXPECT_EQ(map_update(t, &routes[1].first, &x, 2), 0);
  EXPECT_EQ(lpm_get(t, ip4(10, 1, 3, 1, 32)), 7u);
  EXPECT_EQ(map_update(t, &routes[1].first, &x, 3), -EINVAL);
  const Ip4Key too_long = ip4(10, 0, 0, 0, 33);
  EXPECT_EQ(map_update(t, &too_long, &x, 0), -EINVAL);
  EXPECT_EQ(map_delete(t, &too_long), -EINVAL);

  // Deletes need the exact prefix; the shorter ones take over.
  const Ip4Key not_there = ip4(10, 1, 2, 0, 23);
  EXPECT_EQ(map_delete(t, &not_there), -ENOENT);
  ASSERT_EQ(map_delete(t, &routes[2].first), 0);  // 10.1.2.0/24
  EXPECT_EQ(map_delete(t, &routes[2].first), -ENOENT);
  EXPECT_EQ(lpm_get(t, ip4(10, 1, 2, 4, 32)), 7u);
  EXPECT_EQ(lpm_get(t, ip4(10, 1, 2, 3, 32)), 6u);
  ASSERT_EQ(map_delete(t, &routes[4].first), 0);  // the default route
  EXPECT_EQ(lpm_get(t, ip4(11, 0, 0, 1, 32)), 0u);
  EXPECT_EQ(map_update(t, &extra, &x, 0), 0);  // room again

  // 10.1.0.0/16 and 10.2.0.0/16 part at bit 14: the node there is no entry.
  TmpFile g;
  auto m2 = MapFile::create(g.path, {lpm_spec(8, 4)});
  ASSERT_TRUE(m2);
  MapHeader* u = m2->header(0);
  const Ip4Key a = ip4(10, 1, 0, 0, 16), b = ip4(10, 2, 0, 0, 16), im = ip4(10, 0, 0, 0, 14);
  ASSERT_EQ(map_update(u, &a, &x, 0), 0);
  ASSERT_EQ(map_update(u, &b, &x, 0), 0);
  EXPECT_EQ(lpm_get(u, ip4(10, 3, 0, 0, 32)), 0u);
  EXPECT_EQ(map_update(u, &im, &x, 2), -ENOENT);
  EXPECT_EQ(map_delete(u, &im), -ENOENT);
  uint64_t y = 9;
  EXPECT_EQ(map_update(u, &im, &y, 1), 0);  // now an entry
  EXPECT_EQ(lpm_get(u, ip4(10, 3, 0, 0, 32)), 9u);
  EXPECT_EQ(mf->entries(0).size(), 5u);  // six, two deleted, one more
}

std::vector<Ip4Key> lpm_walk(MapHeader* t) {
  std::vector<Ip4Key> out;
  Ip4Key k{}, next{};
  for (const Ip4Key* prev = nullptr; map_get_next_key(t, prev, &next) == 0 && out.size() < 100; prev = &k) {
    out.push_back(next);
    k = next;
  }
  return out;
}

// get_next_key walks the trie in post-order: more specific prefixes first, each prefix
// after the more specific ones inside it; a key not in the trie (or none) gives the first.
TEST(MapsLpm, GetNextKeyIsPostOrder) {
  TmpFile f;
  auto mf = MapFile::create(f.path, {lpm_spec(8, 8)});
  ASSERT_TRUE(mf);
  MapHeader* t = mf->header(0);
  Ip4Key first{};
  EXPECT_EQ(map_get_next_key(t, nullptr, &first), -ENOENT);
  uint64_t x = 1;
  for (Ip4Key k : {ip4(10, 0, 0, 0, 8), ip4(10, 1, 0, 0, 16), ip4(10, 2, 0, 0, 16), ip4(192, 168, 0, 0, 16)})
    ASSERT_EQ(map_update(t, &k, &x, 0), 0);
  auto order = lpm_walk(t);
  const Ip4Key want[] = {ip4(10, 1, 0, 0, 16), ip4(10, 2, 0, 0, 16), ip4(10, 0, 0, 0, 8), ip4(192, 168, 0, 0, 16)};
  ASSERT_EQ(order.size(), std::size(want));
  for (size_t i = 0; i < order.size(); ++i)
    EXPECT_EQ(std::memcmp(&order[i], &want[i], sizeof(Ip4Key)), 0) << i;
  const Ip4Key absent = ip4(10, 3, 0, 0, 16);
  ASSERT_EQ(map_get_next_key(t, &absent, &first), 0);
  EXPECT_EQ(std::memcmp(&first, &want[0], sizeof first), 0);
  EXPECT_EQ(map_get_next_key(t, &want[3], &first), -ENOENT);
  // The CLI's snapshot is in the same order.
  auto e = mf->entries(0);
  ASSERT_EQ(e.size(), 4u);
  for (size_t i = 0; i < e.size(); ++i) EXPECT_EQ(std::memcmp(e[i].key.data(), &want[i], 8), 0) << i;
  // Not an LPM trie: no get_next_key here.
  TmpFile g;
  auto h = MapFile::create(g.path, {spec("h", MapType::hash, 8, 8, 4)});
  ASSERT_TRUE(h);
  EXPECT_EQ(map_get_next_key(h->header(0), nullptr, &first), -EINVAL);
}

// Random prefixes over 16 bits (many shared prefixes), inserted and deleted at random:
// every lookup agrees with a scan for the longest match, and the walk gives each entry
// once, every prefix after the prefixes it contains.
TEST(MapsLpm, AgreesWithABruteForceModel) {
  struct Key16 {
    uint32_t prefixlen;
    uint8_t data[2];
  };
  TmpFile f;
  auto mf = MapFile::create(f.path, {[] {
                              MapSpec s = spec("t", MapType::lpm_trie, 6, 8, 64);
                              s.flags = kMapNoPrealloc;
                              return s;
                            }()});
  ASSERT_TRUE(mf);
  MapHeader* t = mf->header(0);
  auto bits = [](uint16_t v, uint32_t len) { return len == 0 ? 0 : v >> (16 - len); };
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> model;  // (len, prefix bits) -> value
  uint64_t seed = 12345;
  auto rnd = [&] { return (seed = seed * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  for (int step = 0; step < 4000; ++step) {
    const uint32_t len = static_cast<uint32_t>(rnd() % 17);
    const uint16_t v = static_cast<uint16_t>(rnd());
    Key16 k{len, {uint8_t(v >> 8), uint8_t(v)}};
    const auto mk = std::make_pair(len, static_cast<uint32_t>(bits(v, len)));
    if (rnd() % 3 == 0) {
      const int64_t rc = map_delete(t, &k);
      EXPECT_EQ(rc, model.erase(mk) ? 0 : -ENOENT) << step;
    } else {
      const uint64_t val = rnd();
      const int64_t rc = map_update(t, &k, &val, 0);
      if (model.count(mk) || model.size() < 64) {
        ASSERT_EQ(rc, 0) << step;
        model[mk] = val;
      } else {
        EXPECT_EQ(rc, -ENOSPC) << step;
      }
    }
    const uint16_t q = static_cast<uint16_t>(rnd());
    Key16 qk{16, {uint8_t(q >> 8), uint8_t(q)}};
    uint64_t want = 0;
    bool found = false;
    for (int l = 16; l >= 0 && !found; --l) {
      auto it = model.find({uint32_t(l), static_cast<uint32_t>(bits(q, uint32_t(l)))});
      if (it != model.end()) want = it->second, found = true;
    }
    const void* got = map_lookup(t, &qk);
    ASSERT_EQ(got != nullptr, found) << step;
    if (got) {
      uint64_t g;
      std::memcpy(&g, got, 8);
      EXPECT_EQ(g, want) << step;
    }
  }
  auto e = mf->entries(0);
  ASSERT_EQ(e.size(), model.size());
  std::set<std::pair<uint32_t, uint32_t>> seen;
  for (const auto& en : e) {
    // The map's key is 6 bytes (prefixlen and 2 data bytes); Key16 is padded to 8.
    ASSERT_EQ(en.key.size(), 6u);
    Key16 k{};
    std::memcpy(&k, en.key.data(), en.key.size());
    const uint16_t v = static_cast<uint16_t>(k.data[0] << 8 | k.data[1]);
    const auto mk = std::make_pair(k.prefixlen, static_cast<uint32_t>(bits(v, k.prefixlen)));
    EXPECT_TRUE(model.count(mk));
    EXPECT_EQ(sum_values(en), model[mk]);
    // Post-order: no prefix that contains this one came before it.
    for (const auto& s : seen)
      EXPECT_FALSE(s.first < k.prefixlen && (mk.second >> (k.prefixlen - s.first)) == s.second)
          << "prefix /" << s.first << " came before /" << k.prefixlen << " which it contains";
    EXPECT_TRUE(seen.insert(mk).second);
  }
}

// A trie the target scribbled over (links out of the pool, a cycle): the CLI's walk
// stays inside the map and ends.
TEST(MapsLpm, ScribbledTrieIsBounded) {
  TmpFile f;
  auto mf = MapFile::create(f.path, {lpm_spec(8, 8)});
  ASSERT_TRUE(mf);
  MapHeader* t = mf->header(0);
  uint64_t x = 1;
  for (uint8_t i = 0; i < 8; ++i) {
    const Ip4Key k = ip4(10, i, 0, 0, 16);
    ASSERT_EQ(map_update(t, &k, &x, 0), 0);
  }
  ASSERT_EQ(mf->entries(0).size(), 8u);
  auto d = mf->data(0);
  // Every word after the control words: node links, prefix lengths and flags.
  for (uint32_t fill : {0xffffffffu, 1u, 2u}) {
    for (size_t off = 64; off + 4 <= d.size(); off += 4) std::memcpy(d.data() + off, &fill, 4);
    EXPECT_LE(mf->entries(0).size(), 16u) << fill;
  }
}

// Threads insert and delete their own prefixes under one trie while others look up:
// the lock keeps the trie whole, and what stays is exact.
TEST(MapsLpm, ConcurrentUpdatesAndLookups) {
  TmpFile f;
  auto mf = MapFile::create(f.path, {lpm_spec(8, 4 * 64)});
  ASSERT_TRUE(mf);
  MapHeader* t = mf->header(0);
  std::vector<std::thread> th;
  for (uint8_t w = 0; w < 4; ++w)
    th.emplace_back([t, w] {
      for (int round = 0; round < 50; ++round)
        for (uint8_t i = 0; i < 64; ++i) {
          const Ip4Key k = ip4(10, w, i, 0, 24);
          const uint64_t v = uint64_t(w) << 8 | i;
          if (map_update(t, &k, &v, 0) != 0) std::abort();
          if (lpm_get(t, ip4(10, w, i, 9, 32)) != v) std::abort();
          if (round < 49 && i % 2 && map_delete(t, &k) != 0) std::abort();
        }
    });
  for (auto& x : th) x.join();
  EXPECT_EQ(mf->entries(0).size(), 4u * 64);
  for (uint8_t w = 0; w < 4; ++w)
    for (uint8_t i = 0; i < 64; ++i) EXPECT_EQ(lpm_get(t, ip4(10, w, i, 1, 32)), uint64_t(w) << 8 | i);
}

}  // namespace
}  // namespace utramp::ebpf
