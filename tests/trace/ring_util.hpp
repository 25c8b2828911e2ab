// Helpers for the ring buffer tests: events whose every word is derived from a sequence
// number, so that a torn event (words of two different writes) is detected, and a
// consumer that checks order and accounts for every event written.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "trace/event.hpp"
#include "trace/shm_buffers.hpp"

namespace utramp::test {

inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

inline trace::Event seq_event(uint64_t seq, uint32_t owner = 0) {
  trace::Event e{};
  e.time = seq;
  e.addr = mix(seq) ^ owner;
  e.data = mix(seq ^ 0x5555555555555555ull) + owner;
  e.depth = static_cast<uint16_t>(seq);
  e.type = static_cast<uint8_t>(trace::EventType::entry);
  e.flags = static_cast<uint8_t>(owner);
  e.aux = static_cast<uint32_t>(mix(seq ^ 0xabcdefull) ^ owner);
  return e;
}

// Whether `e` is exactly what seq_event(e.time, owner) wrote.
inline bool intact(const trace::Event& e, uint32_t owner = 0) {
  const trace::Event want = seq_event(e.time, owner);
  return e.addr == want.addr && e.data == want.data && e.depth == want.depth &&
         e.type == want.type && e.flags == want.flags && e.aux == want.aux;
}

inline bool is_lost(const trace::Event& e) {
  return e.type == static_cast<uint8_t>(trace::EventType::lost);
}

// A scratch directory removed at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/utramp-trace-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// Follows one producer's stream through drain(): every event intact, sequence numbers
// increasing, and every gap exactly covered by `lost` markers (in the order they came).
struct StreamCheck {
  uint32_t owner = 0;
  uint64_t next = 0;       // the sequence number expected next
  uint64_t delivered = 0;  // events (not markers)
  uint64_t marked = 0;     // sum of lost markers
  uint64_t reported = 0;   // sum of drain()'s lost counts
  uint64_t unmarked_gap = 0;
  uint64_t torn = 0, reordered = 0;
  uint64_t gap_open = 0;  // lost markers seen since the last event

  void take(std::span<const trace::Event> ev, uint64_t lost) {
    reported += lost;
    for (const auto& e : ev) {
      if (is_lost(e)) {
        marked += e.data;
        gap_open += e.data;
        continue;
      }
      if (!intact(e, owner)) {
        ++torn;
        continue;
      }
      if (e.time < next) {
        ++reordered;
        continue;
      }
      // The gap before this event must be what the markers since the last one said.
      if (e.time - next != gap_open) unmarked_gap += 1;
      gap_open = 0;
      next = e.time + 1;
      ++delivered;
    }
  }
};

}  // namespace utramp::test
