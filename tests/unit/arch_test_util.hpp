// Shared by the arch golden tests: hex in and out, whole-run decoding, and readable
// gtest output for the arch enums.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "arch/arch.hpp"
#include "common/hex.hpp"
#include "common/result.hpp"

namespace utramp {

inline void PrintTo(Errc e, std::ostream* os) { *os << errc_name(e); }

namespace arch {

inline void PrintTo(Flow f, std::ostream* os) {
  static constexpr const char* names[] = {"none",          "jump",          "cond_jump",
                                          "call",          "indirect_jump", "indirect_call",
                                          "ret",           "trap",          "syscall"};
  const auto i = static_cast<size_t>(f);
  *os << (i < std::size(names) ? names[i] : "Flow(?)");
}

namespace test {

// "48 8b 05 10 00 00 00" -> bytes: pairs of hex digits separated by single spaces.
inline std::vector<uint8_t> unhex(std::string_view s) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<uint8_t> out;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == ' ') {
      ++i;
      continue;
    }
    const int hi = nibble(s[i]);
    const int lo = i + 1 < s.size() ? nibble(s[i + 1]) : -1;
    if (hi < 0 || lo < 0) {
      ADD_FAILURE() << "bad hex literal in the test table: \"" << s << "\"";
      return {};
    }
    out.push_back(static_cast<uint8_t>(hi << 4 | lo));
    i += 2;
  }
  return out;
}

inline std::string hex(std::span<const uint8_t> b) { return hex_bytes(b); }

// Decodes every instruction of `code` placed at `address`; an undecodable byte fails the
// test and ends the list there.
inline std::vector<Insn> decode_run(std::span<const uint8_t> code, uint64_t address) {
  std::vector<Insn> out;
  for (size_t off = 0; off < code.size();) {
    auto r = decode(code.data() + off, code.size() - off, address + off);
    if (!r) {
      ADD_FAILURE() << "undecodable at +" << off << ": " << r.error().message;
      break;
    }
    off += r->length;
    out.push_back(*r);
  }
  return out;
}

// The Intel-syntax text of each instruction, joined by "; ": the disassembly that the
// golden tables keep beside their bytes. Zydis prints RIP-relative operands and branch
// targets as absolute addresses, so equal listings mean equal targets.
inline std::string listing(std::span<const uint8_t> code, uint64_t address) {
  std::string out;
  for (const Insn& i : decode_run(code, address)) {
    if (!out.empty()) out += "; ";
    out += i.text();
  }
  return out;
}

}  // namespace test
}  // namespace arch
}  // namespace utramp
