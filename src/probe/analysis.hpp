// What the probe manager must know about code before changing it: which function holds
// an address and whether the address is an instruction boundary there, whether the
// address is blacklisted, whether the bytes are still the object's, whether a
// multi-instruction jump window is safe, and whether a handler touches only
// general-purpose registers. Not thread-safe: the manager holds its lock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/result.hpp"
#include "os/elf_file.hpp"
#include "os/maps.hpp"

namespace utramp::probe {

struct Function {
  uint64_t start = 0, size = 0;
  std::string name, object;
  uint64_t bias = 0;
  // Only a part of the function is known (a call frame information row, where no
  // symbol covers the address): boundaries inside it are proven, but not that no branch
  // from the rest of the function lands inside a multi-instruction window.
  bool partial = false;
  uint64_t end() const { return start + size; }
};

class Analysis {
 public:
  // Overlays, on bytes just read from [addr, addr+len), the original bytes wherever the
  // manager's own probes changed them: the code as compiled.
  using Originals = std::function<void(uint64_t addr, std::span<uint8_t> bytes)>;
  explicit Analysis(Originals originals) : originals_(std::move(originals)) {}

  // This process's mappings: read when something may have been unmapped since (the
  // loader's and the arena's unmap generation), else kept.
  Result<void> refresh_maps(bool force = false);

  // Refusals that do not need the function: unmapped, not executable, the runtime's
  // own code, sanitizer runtimes, the signal return trampoline. (An address the kept
  // mappings do not show as executable is looked up again in fresh ones.)
  Result<void> check_address(uint64_t addr);
  // The function holding `addr` (objects loaded since are discovered).
  Result<Function> function_at(uint64_t addr);
  // Functions the patch and trap paths call (the site table's blacklist).
  Result<void> check_function(const Function& f, uint64_t addr);
  // The length of the instruction starting at `addr`, proven by decoding the function
  // from its start; an error names the instruction `addr` falls inside.
  Result<uint32_t> boundary(const Function& f, uint64_t addr);
  // The code from `addr` to the function's end, as compiled.
  std::vector<uint8_t> code(const Function& f, uint64_t addr);
  // [addr, addr+len) matches the object's file (nobody else changed it).
  Result<void> check_unchanged(const Function& f, uint64_t addr, size_t len);
  // Whether [addr, addr+len) is still mapped executable (code unloaded since a probe was
  // placed has nothing left to restore).
  bool executable(uint64_t addr, uint64_t len);
  // A jump over several instructions [addr, addr+len) is safe: no branch of the object
  // targets inside, no indirect jump in the function, no C++ landing pads in it.
  Result<void> check_multi_window(const Function& f, uint64_t addr, uint32_t len);
  // The handler at `fn` and what it reaches touch only general-purpose registers.
  // `calls`: where the handler's own calls through a register go (ProbeSpec::
  // handler_calls), each followed as a direct call is; "its own": reached from `fn`
  // without going through a call. Any other pointer call fails the proof.
  bool gprs_only(uint64_t fn, std::span<const uint64_t> calls = {});

  std::string label(uint64_t addr);  // "func+0x12", or the hex address

 private:
  struct FuncCode {
    std::vector<uint8_t> bytes;        // the code decoded (as compiled, as far as we know)
    std::vector<uint32_t> boundaries;  // instruction offsets, ascending
    uint32_t decoded_to = 0;           // where decoding stopped (== size when whole)
    std::string stop_reason;
    bool has_indirect_jump = false;
    std::string indirect_jump;
    int lsda = -1;                     // -1 unknown, 0 no, 1 yes
  };
  struct Index {
    uint64_t start, end;
    size_t fn;  // into funcs_
  };
  Result<void> rebuild_index();
  const FuncCode& func_code(const Function& f);
  const std::vector<uint64_t>& branch_targets(const Function& f);
  const os::ElfFile* elf(const std::string& path);
  std::vector<uint8_t> read_view(uint64_t addr, size_t len);

  Originals originals_;
  std::vector<os::Mapping> maps_;
  uint64_t maps_gen_ = ~uint64_t{0};
  std::vector<Function> funcs_;
  std::vector<Index> index_;
  uint64_t indexed_gen_ = ~uint64_t{0};  // unmap generation the index was built at
  std::unordered_map<uint64_t, FuncCode> code_;
  std::map<std::string, std::vector<uint64_t>> targets_;  // "path@bias" -> sorted
  std::map<std::string, std::unique_ptr<os::ElfFile>> elves_;
  std::unordered_map<uint64_t, bool> gprs_only_;
  std::vector<std::pair<uint64_t, uint64_t>> own_ranges_;  // libutramp's code
  uint64_t restorer_ = 0;
};

}  // namespace utramp::probe
