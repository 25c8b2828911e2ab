// This process's mappings, from /proc/self/maps.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace utramp::os {

struct Mapping {
  uint64_t start = 0, end = 0;
  bool r = false, w = false, x = false, shared = false;
  uint64_t offset = 0;
  std::string path;
  bool contains(uint64_t a) const { return a >= start && a < end; }
};

Result<std::vector<Mapping>> read_maps(int pid = 0);  // 0: self
// The mapping holding `addr` in a list sorted by address.
const Mapping* find_mapping(const std::vector<Mapping>& maps, uint64_t addr);
// Whether every byte of [addr, addr+len) is mapped executable.
bool range_executable(const std::vector<Mapping>& maps, uint64_t addr, uint64_t len);

// Changes whenever code may have been unmapped: the dynamic loader unloaded an object,
// or the executable arena returned a chunk. Cached views of the mappings compare it.
uint64_t unmap_generation();
void bump_unmap_generation();

}  // namespace utramp::os
