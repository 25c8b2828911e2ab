// This process's mappings, from /proc/self/maps.
#pragma once

#include <cstdint>
#include <memory>
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

// A shared copy of this process's mappings, for the runtime's own placements and checks
// (the executable arena's chunks, the patcher's check that it writes into code):
// reading /proc/self/maps costs ~100 us, and a start-up of 1,000 trampolines read it 10
// times. The copy is read again when `fresh` asks or something was unmapped since
// (unmap_generation). What others mapped since is not in it: a caller that finds it
// lacking (an address it does not hold, a placement the kernel refuses) asks for a
// fresh one. What the arena maps itself is (note_mapping).
Result<std::shared_ptr<const std::vector<Mapping>>> maps_copy(bool fresh = false);
// Adds a mapping this process just made to the copy (if there is one).
void note_mapping(const Mapping& m);

// Changes whenever code may have been unmapped: the dynamic loader unloaded an object,
// or the executable arena returned a chunk. Cached views of the mappings compare it.
uint64_t unmap_generation();
void bump_unmap_generation();

}  // namespace utramp::os
