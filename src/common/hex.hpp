#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace utramp {

// "0f 1f 44 00 00": how diagnostics show bytes seen and expected.
inline std::string hex_bytes(std::span<const uint8_t> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 3);
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (i) out.push_back(' ');
    out.push_back(digits[bytes[i] >> 4]);
    out.push_back(digits[bytes[i] & 15]);
  }
  return out;
}

}  // namespace utramp
