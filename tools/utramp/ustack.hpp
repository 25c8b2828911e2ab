// Stacks of `utramp run` (bpf_get_stackid's stack trace maps) as bpftrace prints
// `ustack`: one frame per line, `function+offset` (offset in decimal bytes), names
// demangled; `module+0xoffset` for an address in a loaded object without a symbol
// there, `[unknown]` for one in no object the agent listed. The addresses are the
// target's: they are symbolised after the run from the list of executable ranges the
// agent kept in the map file (ebpf::kObjectsMap), so the target need not be alive.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ebpf/maps.hpp"

struct btf;

namespace utramp::cli {

class StackSymbols {
 public:
  explicit StackSymbols(std::vector<ebpf::LoadedRange> ranges);
  ~StackSymbols();
  StackSymbols(StackSymbols&&) noexcept;
  StackSymbols& operator=(StackSymbols&&) noexcept;
  // One frame's text.
  std::string frame(uint64_t ip);
  // A stack trace map's value: its frames (ips until the first 0).
  std::vector<std::string> frames(std::span<const uint8_t> value);

 private:
  struct File;
  std::vector<ebpf::LoadedRange> ranges_;
  std::map<std::string, std::unique_ptr<File>> files_;  // by path, opened once
};

// Whether a hash map's 4-byte integer keys are stack ids (printed as the stacks of the
// object's stack trace map): its name has "stack" in it.
bool keyed_by_stack(const ebpf::MapSpec& s);

// The members of a hash map's struct key (its BTF type `key_type` in `b`) that hold
// stack ids, as bcc's libbpf-tools name them (`user_stack_id`, `kern_stack_id`,
// `stack_id`, `stackid`): top-level members, 4- or 8-byte integers, whose name has
// "stack" in it and ends in "id". Empty when the map is no hash map, or its key no
// struct or one without such members.
std::vector<std::string> stack_id_members(const ebpf::MapSpec& s, const btf* b, uint32_t key_type);

}  // namespace utramp::cli
