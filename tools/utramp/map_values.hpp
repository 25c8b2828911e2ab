// How `utramp run` reads the entries of a map (ebpf::MapFile::entries): integers of 1,
// 2, 4 or 8 bytes, per-CPU values summed, LPM trie keys as prefixes, and which maps are
// log2 histograms. Shared by the printed maps (cmd_run.cpp) and the metrics (metrics.cpp).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "ebpf/maps.hpp"

namespace utramp::cli {

inline bool is_int_size(size_t n) { return n == 1 || n == 2 || n == 4 || n == 8; }

inline uint64_t as_u64(std::span<const uint8_t> b) {
  uint64_t v = 0;
  std::memcpy(&v, b.data(), std::min<size_t>(b.size(), 8));
  return v;
}

inline std::string hex(std::span<const uint8_t> b, const char* sep = " ") {
  std::string s;
  for (size_t i = 0; i < b.size(); ++i) s += fmt::format("{}{:02x}", i ? sep : "", b[i]);
  return s;
}

// The sum over CPUs of an integer value (wrapping, so signed values sum right too); the
// first CPU's bytes otherwise.
inline std::vector<uint8_t> combined(const ebpf::MapEntry& e) {
  if (e.values.size() == 1 || !is_int_size(e.values[0].size())) return e.values[0];
  uint64_t sum = 0;
  for (const auto& v : e.values) sum += as_u64(v);
  std::vector<uint8_t> out(e.values[0].size());
  std::memcpy(out.data(), &sum, out.size());
  return out;
}

// An LPM trie's key as its prefix: the data as an IPv4 address (4 bytes) or in 16-bit
// hex groups (IPv6, 16 bytes), other sizes as hex bytes; then "/" and the prefix length.
inline std::string lpm_key(std::span<const uint8_t> k) {
  uint32_t len = 0;
  std::memcpy(&len, k.data(), 4);
  const std::span<const uint8_t> d(k.data() + 4, k.size() - 4);
  std::string text;
  if (d.size() == 4) {
    text = fmt::format("{}.{}.{}.{}", d[0], d[1], d[2], d[3]);
  } else if (d.size() == 16) {
    for (size_t i = 0; i < 16; i += 2) text += fmt::format("{}{:x}", i ? ":" : "", (d[i] << 8) | d[i + 1]);
  } else {
    text = hex(d, "");
  }
  return fmt::format("{}/{}", text, len);
}

inline bool is_lpm(const ebpf::MapSpec& s) {
  return s.type == uint32_t(ebpf::MapType::lpm_trie) && s.key_size > 4;
}

inline bool is_array(const ebpf::MapSpec& s) {
  return s.type == uint32_t(ebpf::MapType::array) || s.type == uint32_t(ebpf::MapType::percpu_array);
}

// The bpftrace hist() idiom: an array (or per-CPU array) of u32 keys and u64 values whose
// name contains "hist"; slot i counts values in [2^i, 2^(i+1)), slot 0 counts 0 and 1.
// `named`: the user said the map is one (utramp run --metrics-hist), whatever its name.
inline bool is_hist(const ebpf::MapSpec& s, bool named = false) {
  return is_array(s) && s.key_size == 4 && s.value_size == 8 && (named || s.name.find("hist") != std::string::npos);
}

}  // namespace utramp::cli
