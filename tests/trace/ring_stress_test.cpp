// Ring buffers under races: producers racing the consumer in both modes (no torn event
// is ever delivered, delivered + lost == written exactly), many threads claiming and
// recycling buffers, and signal handlers writing into the ring they interrupted.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <ctime>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "ring_util.hpp"

using namespace utramp;
using namespace utramp::trace;
using test::seq_event;
using test::StreamCheck;
using test::TempDir;

namespace {

struct RaceResult {
  StreamCheck check;
  uint64_t written = 0;
};

// One producer thread writing `n` events as fast as it can while the consumer drains.
RaceResult race(BufferMode mode, uint32_t ring, uint64_t n, bool consumer_sleeps) {
  TempDir dir;
  auto b = ShmBuffers::create(dir / "buffers.shm", ShmConfig{2, ring, mode});
  EXPECT_TRUE(b.ok());
  RaceResult r;
  std::atomic<bool> done{false};
  std::thread producer([&] {
    Producer p = b->claim(1, 1);
    for (uint64_t s = 0; s < n; ++s) p.write(seq_event(s));
    done.store(true, std::memory_order_release);
  });
  auto take = [&](uint32_t, uint32_t, std::span<const Event> ev, uint64_t lost) {
    r.check.take(ev, lost);
  };
  uint64_t rounds = 0;
  while (!done.load(std::memory_order_acquire)) {
    b->drain(take);
    if (consumer_sleeps && ++rounds % 4 == 0)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  producer.join();
  b->drain(take, /*final=*/true);
  r.written = n;
  return r;
}

void expect_exact(const RaceResult& r) {
  const auto& c = r.check;
  EXPECT_EQ(c.torn, 0u) << "torn events delivered";
  EXPECT_EQ(c.reordered, 0u);
  EXPECT_EQ(c.unmarked_gap, 0u) << "a gap in the sequence not covered by lost markers";
  EXPECT_EQ(c.delivered + c.reported, r.written)
      << "delivered " << c.delivered << " lost " << c.reported;
  EXPECT_EQ(c.marked, c.reported) << "markers and counts disagree";
  EXPECT_EQ(c.next + c.gap_open, r.written);
}

TEST(RingRace, OverwriteProducerRacingConsumerNeverDeliversTornEvents) {
  // A small ring so that the producer laps the consumer during its copies.
  const auto r = race(BufferMode::overwrite, 64, 4'000'000, true);
  expect_exact(r);
  EXPECT_GT(r.check.reported, 0u) << "the test did not overflow the ring";
  EXPECT_GT(r.check.delivered, 0u);
}

TEST(RingRace, OverwriteTinyRingLappedDuringEveryCopy) {
  // 4 slots: the producer laps the consumer all the time, so copies race with writes
  // into the very slots being copied (the case the re-read of head is for).
  const auto r = race(BufferMode::overwrite, 4, 4'000'000, false);
  expect_exact(r);
  EXPECT_GT(r.check.delivered, 0u);
}

TEST(RingRace, OverwriteLargeRing) {
  expect_exact(race(BufferMode::overwrite, 4096, 4'000'000, false));
}

TEST(RingRace, DiscardProducerRacingConsumerLosesExactly) {
  const auto r = race(BufferMode::discard, 64, 4'000'000, true);
  expect_exact(r);
  EXPECT_GT(r.check.reported, 0u) << "the test did not overflow the ring";
}

TEST(RingRace, DiscardLargeRing) {
  expect_exact(race(BufferMode::discard, 1u << 14, 4'000'000, false));
}

TEST(RingRace, ManyThreadsClaimWriteCloseAndRecycle) {
  TempDir dir;
  constexpr uint32_t kBuffers = 8, kThreads = 64, kEvents = 2000;
  auto b = ShmBuffers::create(dir / "buffers.shm", ShmConfig{kBuffers, 1024, BufferMode::discard});
  ASSERT_TRUE(b.ok());
  std::atomic<uint32_t> finished{0}, refused{0};
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const uint32_t tid = 100 + t;
      Producer p;
      // More threads than buffers: wait for the consumer to recycle one.
      while (!(p = b->claim(7, tid)).valid()) {
        refused.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      for (uint64_t s = 0; s < kEvents; ++s) {
        p.write(seq_event(s, tid & 0xff));
        if (s % 256 == 0) std::this_thread::yield();
      }
      p.close();
      finished.fetch_add(1);
    });
  std::map<uint32_t, StreamCheck> per;
  auto take = [&](uint32_t pid, uint32_t tid, std::span<const Event> ev, uint64_t lost) {
    EXPECT_EQ(pid, 7u);
    auto& c = per[tid];
    c.owner = tid & 0xff;
    c.take(ev, lost);
  };
  while (finished.load() < kThreads) b->drain(take);
  for (auto& th : threads) th.join();
  b->drain(take, true);
  EXPECT_EQ(per.size(), kThreads);
  for (auto& [tid, c] : per) {
    EXPECT_EQ(c.torn, 0u) << tid;  // events of another thread would fail the owner check
    EXPECT_EQ(c.reordered, 0u) << tid;
    EXPECT_EQ(c.unmarked_gap, 0u) << tid;
    EXPECT_EQ(c.delivered + c.reported, kEvents) << tid;
    EXPECT_EQ(c.marked, c.reported) << tid;
  }
  EXPECT_EQ(b->unclaimed(), refused.load());
}

// A signal handler that writes into the ring of the thread it interrupted: the nested
// write is dropped and counted, never torn or lost silently.
Producer* g_sig_producer = nullptr;
std::atomic<uint64_t> g_sig_seq{0};

void on_sigprof(int) {
  // Sequence numbers from 1<<40 on, owner 9, so the checks tell them apart.
  const uint64_t s = g_sig_seq.fetch_add(1, std::memory_order_relaxed);
  g_sig_producer->write(seq_event((1ull << 40) + s, 9));
}

// How SIGPROF is made to come every 20 us.
enum class SigTimer {
  itimer_prof,   // setitimer(ITIMER_PROF): in practice once per scheduler tick
  thread_timer,  // a CLOCK_MONOTONIC POSIX timer aimed at this thread (high resolution)
};

struct SignalRace {
  uint64_t main_written = 0, handler_written = 0;
  uint64_t delivered_main = 0, delivered_sig = 0, torn = 0, lost = 0;
  uint64_t reordered = 0;  // main events delivered after a later one
};

// For 1.5 s the thread writes events 0, 1, 2... into its ring (MODE) with
// WRITE_MAIN(p, seq), a thousand at a time between drains, while TIMER's SIGPROF handler
// writes into the same ring; MAIN_INTACT(e) says whether a delivered main event is
// exactly one that was written.
void signal_race(BufferMode mode, SigTimer timer, void (*write_main)(Producer&, uint64_t),
                 bool (*main_intact)(const Event&), SignalRace* out) {
  TempDir dir;
  auto b = ShmBuffers::create(dir / "buffers.shm", ShmConfig{2, 1u << 16, mode});
  ASSERT_TRUE(b.ok());
  Producer p = b->claim(1, 1);
  g_sig_producer = &p;
  g_sig_seq.store(0);
  struct sigaction sa {
  }, old{};
  sa.sa_handler = on_sigprof;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ASSERT_EQ(sigaction(SIGPROF, &sa, &old), 0);
  timer_t posix_timer{};
  if (timer == SigTimer::itimer_prof) {
    itimerval tv{{0, 20}, {0, 20}};
    ASSERT_EQ(setitimer(ITIMER_PROF, &tv, nullptr), 0);
  } else {
    sigevent sev{};
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGPROF;
    sev._sigev_un._tid = static_cast<pid_t>(syscall(SYS_gettid));
    ASSERT_EQ(timer_create(CLOCK_MONOTONIC, &sev, &posix_timer), 0);
    itimerspec its{{0, 20000}, {0, 20000}};
    ASSERT_EQ(timer_settime(posix_timer, 0, &its, nullptr), 0);
  }

  SignalRace& r = *out;
  uint64_t next_main = 0;
  auto take = [&](uint32_t, uint32_t, std::span<const Event> ev, uint64_t l) {
    r.lost += l;
    for (const auto& e : ev) {
      if (test::is_lost(e)) continue;
      if (e.time >= (1ull << 40)) {
        test::intact(e, 9) ? ++r.delivered_sig : ++r.torn;
      } else if (!main_intact(e)) {
        ++r.torn;
      } else {
        if (e.time < next_main) ++r.reordered;
        next_main = e.time + 1;
        ++r.delivered_main;
      }
    }
  };
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 1000; ++i) write_main(p, r.main_written++);
    b->drain(take);
  }
  if (timer == SigTimer::itimer_prof) {
    itimerval off{};
    setitimer(ITIMER_PROF, &off, nullptr);
  } else {
    timer_delete(posix_timer);
  }
  sigaction(SIGPROF, &old, nullptr);
  b->drain(take, true);
  g_sig_producer = nullptr;
  r.handler_written = g_sig_seq.load();
}

TEST(RingRace, SignalHandlerWritingIntoTheInterruptedRing) {
  SignalRace r;
  ASSERT_NO_FATAL_FAILURE(signal_race(
      BufferMode::overwrite, SigTimer::itimer_prof,
      [](Producer& p, uint64_t s) { p.write(seq_event(s)); },
      [](const Event& e) { return test::intact(e, 0); }, &r));
  EXPECT_EQ(r.torn, 0u);
  EXPECT_EQ(r.delivered_main + r.delivered_sig + r.lost, r.main_written + r.handler_written);
  EXPECT_GT(r.handler_written, 0u) << "no signal arrived";
  std::printf("main %llu, handler %llu written; handler writes dropped as nested: %llu\n",
              static_cast<unsigned long long>(r.main_written),
              static_cast<unsigned long long>(r.handler_written),
              static_cast<unsigned long long>(r.lost));
}

// The same with the tracer's fast path as the interrupted writer: put_fast() (falling
// back to write() as the tracer does) in the thread, write() in its handler. put_fast()
// once read head before it took busy, so a handler that wrote between the two had its
// events overwritten and the head went back under what the consumer had taken.
TEST(RingRace, SignalHandlerWritingIntoARingThePutFastIsWriting) {
  // Main events: what put_fast can write (no flags, no aux), every word from seq.
  auto write_main = [](Producer& p, uint64_t s) {
    const uint64_t a = test::mix(s), d = test::mix(s ^ 0x5555555555555555ull);
    if (!p.put_fast(s, a, d, static_cast<uint16_t>(s), EventType::entry, false)) {
      Event e{};
      e.time = s;
      e.addr = a;
      e.data = d;
      e.depth = static_cast<uint16_t>(s);
      e.type = static_cast<uint8_t>(EventType::entry);
      p.write(e);
    }
  };
  auto main_ok = [](const Event& e) {
    return e.addr == test::mix(e.time) && e.data == test::mix(e.time ^ 0x5555555555555555ull) &&
           e.depth == static_cast<uint16_t>(e.time) && e.flags == 0 && e.aux == 0 &&
           e.type == static_cast<uint8_t>(EventType::entry);
  };
  SignalRace r;
  ASSERT_NO_FATAL_FAILURE(
      signal_race(BufferMode::discard, SigTimer::thread_timer, write_main, main_ok, &r));
  EXPECT_EQ(r.torn, 0u);
  EXPECT_EQ(r.reordered, 0u);
  EXPECT_EQ(r.delivered_main + r.delivered_sig + r.lost, r.main_written + r.handler_written)
      << "main " << r.delivered_main << "/" << r.main_written << ", handler " << r.delivered_sig
      << "/" << r.handler_written << ", lost " << r.lost;
  EXPECT_GT(r.handler_written, 0u) << "no signal arrived";
}

TEST(RingRace, ForkedChildrenRacingTheConsumer) {
  TempDir dir;
  auto b = ShmBuffers::create(dir / "buffers.shm", ShmConfig{16, 256, BufferMode::discard});
  ASSERT_TRUE(b.ok());
  constexpr int kChildren = 4;
  constexpr uint64_t kEvents = 200'000;
  std::vector<pid_t> kids;
  for (int k = 0; k < kChildren; ++k) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      Producer p = b->claim(static_cast<uint32_t>(getpid()), 50 + k);
      if (!p.valid()) _exit(2);
      for (uint64_t s = 0; s < kEvents; ++s) p.write(seq_event(s, 50 + k));
      p.close();
      _exit(0);
    }
    kids.push_back(pid);
  }
  std::map<uint32_t, StreamCheck> per;
  auto take = [&](uint32_t, uint32_t tid, std::span<const Event> ev, uint64_t lost) {
    auto& c = per[tid];
    c.owner = tid;
    c.take(ev, lost);
  };
  size_t running = kids.size();
  while (running) {
    b->drain(take);
    int st = 0;
    const pid_t r = waitpid(-1, &st, WNOHANG);
    if (r > 0) {
      EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
      --running;
    }
  }
  b->drain(take, true);
  ASSERT_EQ(per.size(), static_cast<size_t>(kChildren));
  for (auto& [tid, c] : per) {
    EXPECT_EQ(c.torn + c.reordered + c.unmarked_gap, 0u) << tid;
    EXPECT_EQ(c.delivered + c.reported, kEvents) << tid;
    EXPECT_EQ(c.marked, c.reported) << tid;
  }
}

}  // namespace
