// Helper functions a program calls by number (`call N`).
//
// A helper is a plain C function of five 64-bit arguments returning one: BPF r1..r5 are
// the System V argument registers rdi, rsi, rdx, rcx, r8 in the JIT's mapping, and r0 is
// rax, so the JIT calls it directly. The table is fixed when a program is loaded: an
// unknown id fails the load (with the number, and the name where the id is a known
// kernel helper). `callx` (a helper id in a register) looks the table up at run time.
//
// Helpers that take pointers from the program (probe_read's destination, map keys)
// check them against the running program's memory: `current_run()` (memory.hpp) gives
// it to helpers flagged `needs_run`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace utramp::ebpf {

using HelperFn = uint64_t (*)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);

struct HelperInfo {
  uint32_t id = 0;
  std::string name;
  HelperFn fn = nullptr;
  // The helper reads current_run(): engines publish the run state for programs that
  // call it (a TLS store at entry and exit).
  bool needs_run = false;
};

class HelperTable {
 public:
  // Adds or replaces helper `id`.
  void add(uint32_t id, std::string name, HelperFn fn, bool needs_run = false);
  const HelperInfo* find(uint32_t id) const;
  const std::vector<HelperInfo>& all() const { return helpers_; }
  // The highest id + 1 (size of a dense id-indexed table).
  uint32_t id_limit() const;

 private:
  std::vector<HelperInfo> helpers_;  // sorted by id
};

// The kernel's name for helper `id` (bpf_map_lookup_elem for 1...), empty when unknown.
// For messages only: what a helper does here is what the table says.
std::string_view kernel_helper_name(uint32_t id);

// ---- the runtime helpers programs of `utramp run` call ------------------------------
//
// The table of every helper below, by kernel id. They follow the kernel's contracts:
// map operations on the map file's maps (maps.hpp; a map argument that is not one is
// -EINVAL / null), time from CLOCK_MONOTONIC, pid_tgid from getpid/gettid, comm from
// /proc/self/comm (read once per thread), probe_read_* fault-safe (os::safe_read: a bad
// source gives -EFAULT and a zeroed destination), trace_printk formatted here into the
// printk ring (below) for the CLI to print, get_func_* from the trampoline's context
// (ctx[-1] count, ctx[-2] function, ctx[-3] cookie). Destinations the program passes
// are checked against the running program's writable memory (current_run()); sources
// (keys, values, formats, ringbuf_output data) are read directly when the program may
// read them and through os::safe_read otherwise.
const HelperTable& runtime_helpers();

struct MapHeader;
// Where bpf_trace_printk writes its lines (a ringbuf map of the map file); null: dropped.
void set_printk_ring(MapHeader* ring);

}  // namespace utramp::ebpf
