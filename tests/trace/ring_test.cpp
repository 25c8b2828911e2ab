// Ring buffers in shared memory: exact delivery, exact loss accounting in both modes,
// buffer claiming and recycling, a forked child writing into the same file, bad files.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <fstream>
#include <map>
#include <vector>

#include "ring_util.hpp"

using namespace utramp;
using namespace utramp::trace;
using test::seq_event;
using test::StreamCheck;
using test::TempDir;

namespace {

ShmBuffers make(const TempDir& dir, uint32_t events, BufferMode mode, uint32_t buffers = 4) {
  auto b = ShmBuffers::create(dir / "buffers.shm", ShmConfig{buffers, events, mode});
  EXPECT_TRUE(b.ok()) << (b.ok() ? "" : b.error().message);
  return std::move(b).value();
}

// Drains everything, checking one producer's stream.
size_t drain_into(ShmBuffers& b, StreamCheck& c, bool final = false) {
  return b.drain(
      [&](uint32_t, uint32_t, std::span<const Event> ev, uint64_t lost) { c.take(ev, lost); },
      final);
}

TEST(Rings, SingleProducerDeliversEverythingInOrder) {
  TempDir dir;
  auto b = make(dir, 1024, BufferMode::discard);
  Producer p = b.claim(10, 11);
  ASSERT_TRUE(p.valid());
  StreamCheck c;
  uint64_t seq = 0;
  for (int round = 0; round < 50; ++round) {
    const int n = 1 + (round * 37) % 1000;  // wraps the ring many times
    for (int i = 0; i < n; ++i) p.write(seq_event(seq++));
    EXPECT_EQ(drain_into(b, c), static_cast<size_t>(n));
  }
  EXPECT_EQ(c.delivered, seq);
  EXPECT_EQ(c.reported, 0u);
  EXPECT_EQ(c.marked, 0u);
  EXPECT_EQ(c.torn + c.reordered + c.unmarked_gap, 0u);
  EXPECT_EQ(p.lost(), 0u);
}

TEST(Rings, DrainReportsOwner) {
  TempDir dir;
  auto b = make(dir, 64, BufferMode::discard);
  Producer p = b.claim(1234, 5678);
  p.write(seq_event(0));
  int calls = 0;
  b.drain([&](uint32_t pid, uint32_t tid, std::span<const Event> ev, uint64_t lost) {
    ++calls;
    EXPECT_EQ(pid, 1234u);
    EXPECT_EQ(tid, 5678u);
    EXPECT_EQ(ev.size(), 1u);
    EXPECT_EQ(lost, 0u);
  });
  EXPECT_EQ(calls, 1);
  // Nothing new: no call.
  b.drain([&](uint32_t, uint32_t, std::span<const Event>, uint64_t) { ++calls; });
  EXPECT_EQ(calls, 1);
}

TEST(Rings, DiscardModeCountsEveryDropAndMarksWhere) {
  TempDir dir;
  auto b = make(dir, 64, BufferMode::discard);
  Producer p = b.claim(1, 1);
  StreamCheck c;
  // 1000 writes into 64 slots with no consumer: 64 kept, 936 dropped.
  for (uint64_t s = 0; s < 1000; ++s) p.write(seq_event(s));
  EXPECT_EQ(p.lost(), 936u);
  EXPECT_EQ(drain_into(b, c), 64u);
  EXPECT_EQ(c.delivered, 64u);
  EXPECT_EQ(c.reported, 936u);  // counted at once...
  EXPECT_EQ(c.marked, 0u);      // ...and marked where they happened once room returns
  for (uint64_t s = 1000; s < 1010; ++s) p.write(seq_event(s));
  EXPECT_EQ(drain_into(b, c), 10u);
  EXPECT_EQ(c.marked, 936u);
  EXPECT_EQ(c.reported, 936u);
  EXPECT_EQ(c.delivered + c.reported, 1010u);
  EXPECT_EQ(c.torn + c.reordered + c.unmarked_gap, 0u);
}

// Block mode: a producer much faster than its consumer, into 64 slots, loses nothing:
// it waits for each drain pass, and every event arrives once, in order.
TEST(Rings, BlockModeWaitsForRoomAndLosesNothing) {
  TempDir dir;
  auto b = make(dir, 64, BufferMode::block);
  Producer p = b.claim(1, 1);
  ASSERT_TRUE(p.valid());
  constexpr uint64_t kEvents = 5000;
  std::atomic<bool> done{false};
  std::thread producer([&] {
    for (uint64_t s = 0; s < kEvents; ++s) p.write(seq_event(s));
    done = true;
  });
  StreamCheck c;
  while (!done) {
    drain_into(b, c);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  producer.join();
  drain_into(b, c, true);
  EXPECT_EQ(c.delivered, kEvents);
  EXPECT_EQ(c.reported, 0u);
  EXPECT_EQ(p.lost(), 0u);
  EXPECT_EQ(c.torn + c.reordered + c.unmarked_gap, 0u);
  EXPECT_EQ(b.timed_out_lost(), 0u);
}

// Block mode with no consumer (a recorder killed or stopped): the producer waits once,
// for kBlockWaitNs, then drops and counts; it does not wait again until a drain pass
// comes, and the losses are then reported as such, and marked.
TEST(Rings, BlockModeWaitIsBoundedWhenNoOneDrains) {
  TempDir dir;
  auto b = make(dir, 64, BufferMode::block);
  Producer p = b.claim(1, 1);
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t s = 0; s < 1000; ++s) p.write(seq_event(s));
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, std::chrono::nanoseconds(kBlockWaitNs));
  EXPECT_LT(took, std::chrono::nanoseconds(3 * kBlockWaitNs)) << "waited more than once";
  EXPECT_EQ(p.lost(), 936u);
  StreamCheck c;
  EXPECT_EQ(drain_into(b, c), 64u);
  EXPECT_EQ(c.reported, 936u);
  EXPECT_EQ(b.timed_out_lost(), 936u);
  // The consumer is back: the producer waits for it again instead of dropping.
  std::atomic<bool> done{false};
  std::thread producer([&] {
    for (uint64_t s = 1000; s < 1200; ++s) p.write(seq_event(s));
    done = true;
  });
  while (!done) {
    drain_into(b, c);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  producer.join();
  drain_into(b, c, true);
  EXPECT_EQ(p.lost(), 936u);
  EXPECT_EQ(c.delivered, 264u);
  EXPECT_EQ(c.marked, 936u);
  EXPECT_EQ(c.torn + c.reordered + c.unmarked_gap, 0u);
}

// The consumer's pace (drain_again_at): the backlog from which it drains again at once
// must not grow with the ring beyond the default's, or a larger ring sleeps through more
// and loses more (1 Mi events per ring lost 17% where 256 Ki lost nothing).
TEST(Rings, ALargerRingIsNeverDrainedLessEagerly) {
  for (uint64_t n = 64; n <= (1ull << 30); n *= 2) {
    SCOPED_TRACE(n);
    EXPECT_LE(drain_again_at(n), n / 4);
    EXPECT_GT(drain_again_at(n), 0u);
    if (n >= (1u << 18)) {
      EXPECT_LE(drain_again_at(n * 2), drain_again_at(n));
    }
  }
}

TEST(Rings, DiscardModeMarksPendingLossesAtTheEnd) {
  TempDir dir;
  auto b = make(dir, 16, BufferMode::discard);
  Producer p = b.claim(1, 1);
  StreamCheck c;
  for (uint64_t s = 0; s < 100; ++s) p.write(seq_event(s));
  drain_into(b, c);
  EXPECT_EQ(c.marked, 0u);
  // The target is gone: the final drain marks the 84 drops no later write did.
  drain_into(b, c, /*final=*/true);
  EXPECT_EQ(c.marked, 84u);
  EXPECT_EQ(c.reported, 84u);
  EXPECT_EQ(c.next + c.gap_open, 100u);
  // Nothing is marked twice.
  drain_into(b, c, true);
  EXPECT_EQ(c.marked, 84u);
}

TEST(Rings, DiscardModeMarkerNeedsRoomForItself) {
  TempDir dir;
  auto b = make(dir, 8, BufferMode::discard);
  Producer p = b.claim(1, 1);
  StreamCheck c;
  uint64_t s = 0;
  for (; s < 9; ++s) p.write(seq_event(s));  // 8 kept, 1 dropped
  drain_into(b, c);
  // Rounds that fill the ring to exactly full, one short of it, and past it: a pending
  // marker is written only with its event, never alone in the last free slot.
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 7 + round % 5; ++i) p.write(seq_event(s++));
    drain_into(b, c);
  }
  drain_into(b, c, true);
  EXPECT_EQ(c.delivered + c.reported, s);
  EXPECT_EQ(c.marked, c.reported);
  EXPECT_EQ(c.torn + c.reordered + c.unmarked_gap, 0u);
}

TEST(Rings, OverwriteModeKeepsTheNewestAndCountsTheRest) {
  TempDir dir;
  auto b = make(dir, 64, BufferMode::overwrite);
  Producer p = b.claim(1, 1);
  StreamCheck c;
  for (uint64_t s = 0; s < 1000; ++s) p.write(seq_event(s));
  EXPECT_EQ(drain_into(b, c), 63u);  // N - 1: the slot being written next is suspect
  EXPECT_EQ(c.delivered, 63u);
  EXPECT_EQ(c.reported, 937u);
  EXPECT_EQ(c.marked, 937u);  // marked in front of what was kept
  EXPECT_EQ(c.next, 1000u);
  EXPECT_EQ(c.torn + c.reordered + c.unmarked_gap, 0u);
  // Within capacity nothing is lost.
  for (uint64_t s = 1000; s < 1050; ++s) p.write(seq_event(s));
  EXPECT_EQ(drain_into(b, c), 50u);
  EXPECT_EQ(c.reported, 937u);
  EXPECT_EQ(c.delivered + c.reported, 1050u);
}

TEST(Rings, ClaimsAreExclusiveCountedAndRecycled) {
  TempDir dir;
  auto b = make(dir, 16, BufferMode::discard, /*buffers=*/2);
  Producer a = b.claim(1, 1), c = b.claim(1, 2);
  ASSERT_TRUE(a.valid());
  ASSERT_TRUE(c.valid());
  Producer none = b.claim(1, 3);
  EXPECT_FALSE(none.valid());
  EXPECT_EQ(b.unclaimed(), 1u);
  none.write(seq_event(0));  // harmless
  a.write(seq_event(0, 1));
  c.write(seq_event(0, 2));
  a.close();
  EXPECT_FALSE(a.valid());
  // Draining delivers the closed ring to the end, then recycles it.
  std::map<uint32_t, size_t> got;
  b.drain(
      [&](uint32_t, uint32_t tid, std::span<const Event> ev, uint64_t) { got[tid] += ev.size(); });
  EXPECT_EQ(got[1], 1u);
  EXPECT_EQ(got[2], 1u);
  Producer d = b.claim(1, 4);
  ASSERT_TRUE(d.valid());
  d.write(seq_event(7, 4));
  got.clear();
  b.drain([&](uint32_t, uint32_t tid, std::span<const Event> ev, uint64_t lost) {
    got[tid] += ev.size();
    EXPECT_EQ(lost, 0u);
    if (tid == 4) {
      EXPECT_EQ(ev[0].time, 7u);  // a fresh ring: nothing of thread 1 left in it
      EXPECT_TRUE(test::intact(ev[0], 4));
    }
  });
  EXPECT_EQ(got.size(), 1u);
  EXPECT_EQ(got[4], 1u);
}

TEST(Rings, AttachSeesTheSameBuffers) {
  TempDir dir;
  auto b = make(dir, 256, BufferMode::overwrite, 8);
  auto a = ShmBuffers::attach(dir / "buffers.shm");
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->mode(), BufferMode::overwrite);
  EXPECT_EQ(a->config().events_per_buffer, 256u);
  EXPECT_EQ(a->config().max_buffers, 8u);
  Producer p = a->claim(3, 4);
  for (uint64_t s = 0; s < 10; ++s) p.write(seq_event(s));
  StreamCheck c;
  EXPECT_EQ(drain_into(b, c), 10u);
  EXPECT_EQ(c.torn + c.reordered + c.unmarked_gap, 0u);
}

TEST(Rings, ForkedChildWritesIntoTheSameFile) {
  TempDir dir;
  auto b = make(dir, 1024, BufferMode::discard);
  Producer parent = b.claim(static_cast<uint32_t>(getpid()), 1);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The inherited Producer names the parent's ring: a child claims its own.
    Producer mine = b.claim(static_cast<uint32_t>(getpid()), 2);
    if (!mine.valid()) _exit(2);
    for (uint64_t s = 0; s < 500; ++s) mine.write(seq_event(s, 2));
    mine.close();
    _exit(0);
  }
  for (uint64_t s = 0; s < 300; ++s) parent.write(seq_event(s, 1));
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  std::map<uint32_t, StreamCheck> per;
  per[1].owner = 1;
  per[2].owner = 2;
  std::map<uint32_t, uint32_t> pid_of;
  b.drain([&](uint32_t pid, uint32_t tid, std::span<const Event> ev, uint64_t lost) {
    per[tid].take(ev, lost);
    pid_of[tid] = pid;
  });
  EXPECT_EQ(per[1].delivered, 300u);
  EXPECT_EQ(per[2].delivered, 500u);
  EXPECT_EQ(pid_of[1], static_cast<uint32_t>(getpid()));
  EXPECT_EQ(pid_of[2], static_cast<uint32_t>(child));
  for (auto& [tid, c] : per) EXPECT_EQ(c.torn + c.reordered + c.unmarked_gap, 0u) << tid;
}

TEST(Rings, BadConfigurationsAndFilesAreRefused) {
  TempDir dir;
  EXPECT_FALSE(ShmBuffers::create(dir / "x", ShmConfig{4, 100, BufferMode::discard}).ok());
  EXPECT_FALSE(ShmBuffers::create(dir / "x", ShmConfig{4, 2, BufferMode::discard}).ok());
  EXPECT_FALSE(ShmBuffers::create(dir / "x", ShmConfig{0, 64, BufferMode::discard}).ok());
  EXPECT_FALSE(
      ShmBuffers::create(dir / "x", ShmConfig{1u << 30, 1u << 30, BufferMode::discard}).ok());
  EXPECT_FALSE(ShmBuffers::create(dir / "no/such/dir/x", ShmConfig{}).ok());

  auto missing = ShmBuffers::attach(dir / "missing");
  ASSERT_FALSE(missing.ok());
  {
    std::ofstream f(dir / "junk");
    f << std::string(8192, 'j');
  }
  auto junk = ShmBuffers::attach(dir / "junk");
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.error().message.find("bad magic"), std::string::npos) << junk.error().message;

  // A real file cut short.
  { auto b = make(dir, 64, BufferMode::discard, 2); }
  ASSERT_EQ(truncate((dir / "buffers.shm").c_str(), 4096 + 100), 0);
  auto cut = ShmBuffers::attach(dir / "buffers.shm");
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.error().message.find("inconsistent"), std::string::npos) << cut.error().message;
}

TEST(Rings, MovedBuffersKeepWorking) {
  TempDir dir;
  auto b = make(dir, 64, BufferMode::discard);
  Producer p = b.claim(1, 1);
  ShmBuffers moved = std::move(b);
  p.write(seq_event(0));
  StreamCheck c;
  EXPECT_EQ(drain_into(moved, c), 1u);
  EXPECT_EQ(b.drain([](uint32_t, uint32_t, std::span<const Event>, uint64_t) {}), 0u);
  EXPECT_FALSE(b.claim(1, 2).valid());
}

}  // namespace

// ---- staged entries and leaves (the tracer's fast path) ----

namespace {

Event entry_of(uint64_t func, uint64_t time, uint16_t depth) {
  return Event{time, func, 0, depth, static_cast<uint8_t>(EventType::entry), 0, 0};
}

Event exit_of(uint64_t func, uint64_t time, uint16_t depth) {
  return Event{time, func, 0, depth, static_cast<uint8_t>(EventType::exit), 0, 0};
}

std::vector<EventType> types_of(const std::vector<Event>& ev) {
  std::vector<EventType> t;
  for (const Event& e : ev) t.push_back(static_cast<EventType>(e.type));
  return t;
}

std::vector<Event> drain_all(ShmBuffers& b, bool final = false, uint64_t* lost = nullptr) {
  std::vector<Event> out;
  b.drain(
      [&](uint32_t, uint32_t, std::span<const Event> ev, uint64_t l) {
        out.insert(out.end(), ev.begin(), ev.end());
        if (lost) *lost += l;
      },
      final);
  return out;
}

}  // namespace

TEST(Leaves, ExitRightAfterItsEntryMakesOneLeafRecord) {
  TempDir dir;
  auto b = make(dir, 64, BufferMode::discard);
  Producer p = b.claim(1, 2);
  ASSERT_TRUE(p.stage(entry_of(0x1000, 100, 3)));
  EXPECT_TRUE(drain_all(b).empty()) << "a staged entry is not published";
  ASSERT_TRUE(p.complete_leaf(0x1000, 100, 250));
  const auto ev = drain_all(b);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, static_cast<uint8_t>(EventType::leaf));
  EXPECT_EQ(ev[0].time, 100u);
  EXPECT_EQ(ev[0].data, 250u);
  EXPECT_EQ(ev[0].addr, 0x1000u);
  EXPECT_EQ(ev[0].depth, 3u);
}

TEST(Leaves, AnyOtherEventPublishesTheStagedEntryFirst) {
  TempDir dir;
  auto b = make(dir, 64, BufferMode::discard);
  Producer p = b.claim(1, 2);
  ASSERT_TRUE(p.stage(entry_of(0x1000, 100, 0)));
  ASSERT_TRUE(p.stage(entry_of(0x2000, 110, 1)));  // a nested call
  // The inner one's exit makes a leaf; the outer's can no longer (not staged).
  ASSERT_TRUE(p.complete_leaf(0x2000, 110, 120));
  EXPECT_FALSE(p.complete_leaf(0x1000, 100, 130));
  p.write(exit_of(0x1000, 130, 0));
  EXPECT_EQ(types_of(drain_all(b)),
            (std::vector<EventType>{EventType::entry, EventType::leaf, EventType::exit}));
}

TEST(Leaves, AStagedEntryOfAnotherCallIsNotCompleted) {
  TempDir dir;
  auto b = make(dir, 64, BufferMode::discard);
  Producer p = b.claim(1, 2);
  ASSERT_TRUE(p.stage(entry_of(0x1000, 100, 0)));
  EXPECT_FALSE(p.complete_leaf(0x1000, 99, 130)) << "another call of the same function";
  EXPECT_FALSE(p.complete_leaf(0x2000, 100, 130)) << "another function";
  p.close();  // publishes it
  const auto ev = drain_all(b);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, static_cast<uint8_t>(EventType::entry));
}

TEST(Leaves, AProducerThatDiedWithAnEntryStagedStillDeliversIt) {
  TempDir dir;
  auto b = make(dir, 64, BufferMode::discard);
  Producer p = b.claim(1, 2);
  p.write(entry_of(0x1000, 90, 0));
  ASSERT_TRUE(p.stage(entry_of(0x2000, 100, 1)));
  EXPECT_EQ(drain_all(b).size(), 1u);
  const auto ev = drain_all(b, /*final=*/true);  // the target is gone
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].addr, 0x2000u);
  EXPECT_EQ(ev[0].type, static_cast<uint8_t>(EventType::entry));
}

TEST(Leaves, AFullRingDropsTheStagedEntryAndCountsIt) {
  TempDir dir;
  auto b = make(dir, 4, BufferMode::discard);
  Producer p = b.claim(1, 2);
  for (int i = 0; i < 4; ++i) p.write(seq_event(static_cast<uint64_t>(i)));
  EXPECT_FALSE(p.stage(entry_of(0x1000, 100, 0)));
  EXPECT_FALSE(p.complete_leaf(0x1000, 100, 110));
  EXPECT_EQ(p.lost(), 1u);
  uint64_t lost = 0;
  EXPECT_EQ(drain_all(b, false, &lost).size(), 4u);
  EXPECT_EQ(lost, 1u);
}

TEST(Leaves, OverwriteModeMakesNoLeaves) {
  // Its losses are counted in slots; a slot must stay one event.
  TempDir dir;
  auto b = make(dir, 64, BufferMode::overwrite);
  Producer p = b.claim(1, 2);
  ASSERT_TRUE(p.stage(entry_of(0x1000, 100, 0)));
  EXPECT_FALSE(p.complete_leaf(0x1000, 100, 110));
  EXPECT_EQ(drain_all(b).size(), 1u);
}

// ---- writes a signal handler's longjmp cut short (ftrace/graph.cpp: repair_abandoned) ----

TEST(Abandoned, MarkersCarryRunningTotalsAndARepeatedOneCountsNothing) {
  TempDir dir;
  auto b = make(dir, 64, BufferMode::discard);
  Producer p = b.claim(1, 2);
  for (int i = 0; i < 3; ++i) p.drop();
  p.write(seq_event(0));  // marker (running total 3), then the event
  // The same marker again, as a write cut short after publishing it and before clearing
  // `pending` would leave it: it brings nothing new and is left out.
  p.write(Event{1, 0, 3, 0, static_cast<uint8_t>(EventType::lost), 0, 0});
  p.drop();
  p.write(seq_event(2));  // marker (running total 4)
  uint64_t reported = 0;
  const auto ev = drain_all(b, false, &reported);
  std::vector<uint64_t> markers;
  size_t events = 0;
  for (const Event& e : ev) {
    if (utramp::test::is_lost(e)) markers.push_back(e.data);
    else ++events;
  }
  EXPECT_EQ(markers, (std::vector<uint64_t>{3, 1}));
  EXPECT_EQ(events, 2u);
  EXPECT_EQ(reported, 4u);
}

TEST(Abandoned, AMarkerNeverPublishedIsCoveredAtTheEnd) {
  TempDir dir;
  auto b = make(dir, 64, BufferMode::discard);
  Producer p = b.claim(1, 2);
  p.write(seq_event(0));
  p.drop();
  p.drop();
  // No later write: the drops are marked when the producer is gone.
  uint64_t marked = 0;
  for (const Event& e : drain_all(b, /*final=*/true))
    if (utramp::test::is_lost(e)) marked += e.data;
  EXPECT_EQ(marked, 2u);
}

TEST(Abandoned, TheStagedSlotAndTheLastPublishedEventCanBeRead) {
  TempDir dir;
  auto b = make(dir, 64, BufferMode::discard);
  Producer p = b.claim(1, 2);
  Event e{};
  EXPECT_FALSE(p.last_published(&e));
  EXPECT_FALSE(p.staged_event(&e));
  p.write(entry_of(0x1000, 90, 0));
  ASSERT_TRUE(p.stage(entry_of(0x2000, 100, 1)));
  ASSERT_TRUE(p.staged_event(&e));
  EXPECT_EQ(e.addr, 0x2000u);
  EXPECT_EQ(e.time, 100u);
  ASSERT_TRUE(p.last_published(&e));
  EXPECT_EQ(e.addr, 0x1000u);
}

TEST(Abandoned, ReleaseKeepsTheStagedEntryOrForgetsIt) {
  TempDir dir;
  auto b = make(dir, 64, BufferMode::discard);
  Producer p = b.claim(1, 2);
  // Forgotten: its call never ran; the next write takes the slot.
  ASSERT_TRUE(p.stage(entry_of(0x1000, 100, 0)));
  p.release_abandoned(false);
  Event e{};
  EXPECT_FALSE(p.staged_event(&e));
  p.write(entry_of(0x2000, 110, 0));
  auto ev = drain_all(b);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].addr, 0x2000u);
  // Kept: published by the next write, as an entry.
  ASSERT_TRUE(p.stage(entry_of(0x3000, 120, 1)));
  p.release_abandoned(true);
  p.write(exit_of(0x3000, 130, 1));
  ev = drain_all(b);
  EXPECT_EQ(types_of(ev), (std::vector<EventType>{EventType::entry, EventType::exit}));
  EXPECT_EQ(ev.at(0).addr, 0x3000u);
}

TEST(Abandoned, TheFinalDrainTakesOnlyAWholeStagedRecord) {
  TempDir dir;
  auto b = make(dir, 64, BufferMode::discard);
  Producer p = b.claim(1, 2);
  p.write(entry_of(0x1000, 90, 0));
  // A staged slot that is no entry (as a write cut short can leave): not delivered.
  ASSERT_TRUE(p.stage(Event{100, 0, 0, 1, static_cast<uint8_t>(EventType::entry), 0, 0}));
  const auto ev = drain_all(b, /*final=*/true);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].addr, 0x1000u);
}

// ---- a target that writes over its rings (the consumer validates what it reads) ----
//
// The file as the CLI lays it out (shm_buffers.cpp): a 4 KiB header (magic, version,
// mode, max_buffers, events_per_buffer, sizes, the allocator), then per ring a control
// page (head at 0, lost at 8, nested at 32, state at 64, pid at 68, tid at 72) and the
// ring. These tests map the file a second time and write into it as a program would.

namespace {

struct Scribbler {
  char* base = nullptr;
  size_t size = 0;
  uint64_t stride = 0;
  Scribbler(const TempDir& dir, uint32_t events) {
    const int fd = open((dir / "buffers.shm").c_str(), O_RDWR);
    size = static_cast<size_t>(lseek(fd, 0, SEEK_END));
    base = static_cast<char*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);
    stride = 4096 + uint64_t{events} * sizeof(Event);
  }
  ~Scribbler() { munmap(base, size); }
  char* control(uint32_t i) const { return base + 4096 + i * stride; }
  template <class T>
  void put(char* at, T v) const { std::memcpy(at, &v, sizeof v); }
};

struct Drained {
  std::map<uint32_t, StreamCheck> by_tid;
  std::map<uint32_t, uint32_t> pid_of;
  size_t calls = 0;
};

void drain_checked(ShmBuffers& b, Drained& d, bool final = false) {
  b.drain(
      [&](uint32_t pid, uint32_t tid, std::span<const Event> ev, uint64_t lost) {
        ++d.calls;
        d.pid_of[tid] = pid;
        d.by_tid[tid].owner = tid;
        d.by_tid[tid].take(ev, lost);
      },
      final);
}

}  // namespace

// Zeros, then a pattern, over the header: the layout stays the CLI's own copy, the rings
// handed out stay known (the allocator's `next` going back is not believed), and every
// event is delivered.
TEST(Hostile, AnOverwrittenHeaderChangesNothingButIsReported) {
  for (const int pattern : {0x00, 0xA5}) {
    SCOPED_TRACE(pattern);
    TempDir dir;
    auto b = make(dir, 64, BufferMode::discard, 4);
    Scribbler s(dir, 64);
    Producer p1 = b.claim(1, 11), p2 = b.claim(1, 12);
    uint64_t seq1 = 0, seq2 = 0;
    for (int i = 0; i < 10; ++i) p1.write(seq_event(seq1++, 11)), p2.write(seq_event(seq2++, 12));
    Drained d;
    drain_checked(b, d);
    std::memset(s.base, pattern, 4096);
    for (int i = 0; i < 30; ++i) p1.write(seq_event(seq1++, 11)), p2.write(seq_event(seq2++, 12));
    drain_checked(b, d, true);
    EXPECT_EQ(d.by_tid[11].delivered, seq1);
    EXPECT_EQ(d.by_tid[12].delivered, seq2);
    for (auto& [tid, c] : d.by_tid) EXPECT_EQ(c.torn + c.reordered + c.unmarked_gap + c.reported, 0u) << tid;
    EXPECT_NE(b.header_overwritten(), "");
    EXPECT_TRUE(b.overwritten().empty());
    EXPECT_EQ(b.unclaimed(), 0u);
  }
}

// One ring overwritten with a pattern (its control page and its events), as a stray
// memset from its own thread would: it is reported once, with what was found, and
// nothing of it is believed (no count of 0xa5a5... lost events); the other ring
// delivers every event, before and after.
TEST(Hostile, AnOverwrittenRingIsReportedAndTheOthersLoseNothing) {
  TempDir dir;
  auto b = make(dir, 64, BufferMode::discard, 4);
  Scribbler s(dir, 64);
  Producer good = b.claim(1, 21), bad = b.claim(1, 22);
  uint64_t seq = 0;
  for (int i = 0; i < 20; ++i) good.write(seq_event(seq++, 21)), bad.write(seq_event(i, 22));
  Drained d;
  drain_checked(b, d);
  std::memset(s.control(1), 0xA5, s.stride);
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 40; ++i) good.write(seq_event(seq++, 21)), bad.write(seq_event(100 + i, 22));
    drain_checked(b, d);
  }
  drain_checked(b, d, true);
  EXPECT_EQ(d.by_tid[21].delivered, seq);
  EXPECT_EQ(d.by_tid[21].torn + d.by_tid[21].unmarked_gap + d.by_tid[21].reported, 0u);
  EXPECT_EQ(d.by_tid[22].delivered, 20u);  // what was drained before
  EXPECT_LT(d.by_tid[22].reported + d.by_tid[22].marked, 1000u) << "a scribbled count believed";
  ASSERT_EQ(b.overwritten().size(), 1u);
  EXPECT_EQ(b.overwritten()[0].pid, 1u);
  EXPECT_EQ(b.overwritten()[0].tid, 22u);
  EXPECT_EQ(b.overwritten()[0].time, 19u) << "the time of the last event taken from it";
  EXPECT_FALSE(b.overwritten()[0].what.empty());
}

// A control page zeroed under a live producer: its owner is kept (not taken from the
// zeros), the zeroed state is reported, and what it writes from then on is read again.
TEST(Hostile, AZeroedRingIsReadAgainFromWhereItsProducerIs) {
  TempDir dir;
  auto b = make(dir, 64, BufferMode::discard, 4);
  Scribbler s(dir, 64);
  Producer p = b.claim(7, 31);
  for (int i = 0; i < 10; ++i) p.write(seq_event(i, 31));
  Drained d;
  drain_checked(b, d);
  std::memset(s.control(0), 0, 4096);
  for (int i = 10; i < 15; ++i) p.write(seq_event(i, 31));
  drain_checked(b, d);  // state 0, head 5 below the tail of 10: reported, read on from 5
  for (int i = 15; i < 25; ++i) p.write(seq_event(i, 31));
  drain_checked(b, d);
  EXPECT_EQ(d.pid_of[31], 7u);
  EXPECT_EQ(d.by_tid[31].delivered, 20u);  // 10 before, 10 after; the 5 in between lost
  ASSERT_EQ(b.overwritten().size(), 1u);
  EXPECT_NE(b.overwritten()[0].what.find("state 0"), std::string::npos) << b.overwritten()[0].what;
  EXPECT_EQ(b.producer_pids(), std::vector<uint32_t>{7});
}

// Counters no producer can reach (more drops than nanoseconds since the ring was seen
// claimed), a head a ring and more ahead of the tail, an owner no thread can have:
// never believed, each reported.
TEST(Hostile, ImpossibleValuesAreNotBelieved) {
  TempDir dir;
  auto b = make(dir, 64, BufferMode::discard, 4);
  Scribbler s(dir, 64);
  Producer p1 = b.claim(1, 41), p2 = b.claim(1, 42);
  p1.write(seq_event(0, 41));
  p2.write(seq_event(0, 42));
  Drained d;
  drain_checked(b, d);
  s.put<uint64_t>(s.control(0) + 8, uint64_t{1} << 60);  // p1's lost
  s.put<uint64_t>(s.control(1) + 0, 1000);                // p2's head, 999 past its tail
  // A ring never handed out, made to look claimed by a pid beyond any.
  s.put<uint32_t>(s.control(3) + 64, 2);
  s.put<uint32_t>(s.control(3) + 68, 0xFFFFFFFF);
  s.put<uint32_t>(s.control(3) + 72, 5);
  s.put<uint32_t>(s.base + 64, 4);  // the allocator's next: all four handed out
  drain_checked(b, d);
  EXPECT_EQ(d.by_tid[41].reported + d.by_tid[41].marked, 0u);
  EXPECT_EQ(d.by_tid[42].delivered, 1u);
  EXPECT_EQ(d.by_tid.count(5), 0u) << "a ring of no thread was read";
  ASSERT_EQ(b.overwritten().size(), 3u);
  std::string all;
  for (const auto& o : b.overwritten()) all += o.what + "\n";
  EXPECT_NE(all.find("lost count 0x1000000000000000"), std::string::npos) << all;
  EXPECT_NE(all.find("head 0x3e8"), std::string::npos) << all;
  EXPECT_NE(all.find("owner pid 4294967295"), std::string::npos) << all;
}

// The CLI's rings: an anonymous, sealed file that no one can shrink under its mapping.
TEST(Hostile, AnonymousRingsCannotBeCut) {
  auto b = ShmBuffers::create_anonymous(ShmConfig{2, 64, BufferMode::discard});
  ASSERT_TRUE(b.ok()) << b.error().message;
  const std::string path = b->agent_path();
  EXPECT_TRUE(path.starts_with("/proc/" + std::to_string(getpid()) + "/fd/")) << path;
  const int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << strerror(errno);
  EXPECT_NE(ftruncate(fd, 4096), 0);
  EXPECT_EQ(errno, EPERM);
  close(fd);
  auto a = ShmBuffers::attach(path);
  ASSERT_TRUE(a.ok()) << a.error().message;
  Producer p = a->claim(3, 4);
  p.write(seq_event(0, 4));
  Drained d;
  drain_checked(*b, d);
  EXPECT_EQ(d.by_tid[4].delivered, 1u);
}
