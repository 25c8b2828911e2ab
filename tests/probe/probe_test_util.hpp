// Helpers shared by the probe tests.
#pragma once

#include <gtest/gtest.h>
#include <utramp/utramp.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "arch/arch.hpp"
#include "probe/probe.hpp"

namespace probe_test {

// The call goes through a volatile pointer: the compiler can neither inline nor fold it.
template <class F>
F* opaque(F* f) {
  F* volatile p = f;
  return p;
}

template <class F>
uint64_t addr_of(F* f, uint64_t off = 0) {
  return reinterpret_cast<uint64_t>(f) + off;
}

template <class F>
void* at(F* f, uint64_t off = 0) {
  return reinterpret_cast<void*>(addr_of(f, off));
}

// A handler counting into the std::atomic<uint64_t> named by its cookie.
inline int count_hit(utramp_regs*, uint64_t cookie) {
  reinterpret_cast<std::atomic<uint64_t>*>(cookie)->fetch_add(1, std::memory_order_relaxed);
  return 0;
}
inline uint64_t cookie_of(std::atomic<uint64_t>& c) { return reinterpret_cast<uint64_t>(&c); }

// Instruction offsets of [f, f+size), by decoding.
inline std::vector<uint32_t> boundaries(uint64_t f, uint64_t size) {
  std::vector<uint32_t> out;
  for (uint64_t off = 0; off < size;) {
    auto insn = utramp::arch::decode(reinterpret_cast<const uint8_t*>(f + off), size - off, f + off);
    if (!insn) break;
    out.push_back(static_cast<uint32_t>(off));
    off += insn->length;
  }
  return out;
}

inline std::vector<uint8_t> bytes(uint64_t a, size_t n) {
  return {reinterpret_cast<const uint8_t*>(a), reinterpret_cast<const uint8_t*>(a) + n};
}

// The listing entry of the probe at `addr` (the first one there).
inline std::optional<utramp::probe::ProbeInfo> info_at(uint64_t addr) {
  for (auto& i : utramp::probe::Manager::instance().list())
    if (i.addr == addr) return i;
  return std::nullopt;
}

inline std::string last_error() { return utramp_last_error(); }

}  // namespace probe_test
