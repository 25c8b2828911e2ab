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

// What a helper takes and gives: its prototype. The verifier checks every call against
// it (verifier.hpp), the loader refuses ids without one, docs/ebpf.md lists them
// (describe_proto(); a test keeps the document and this table equal).
enum class Arg : uint8_t {
  none,            // not passed (the register is not read)
  anything,        // any initialised value, scalar or pointer
  scalar,          // a number, not a pointer
  map,             // a map (`lddw rX, map`) of a type in HelperProto::map_types
  map_key,         // points to the map's key_size bytes, all initialised
  map_value,       // points to the map's value_size bytes, all initialised
  map_value_out,   // points to the map's value_size writable bytes the helper fills (a
                   // bloom filter's peek reads them instead: initialised there)
  mem,             // points to initialised memory of the size the next argument gives
  mem_uninit,      // points to writable memory of the next argument's size (the helper fills it)
  size,            // the size of the memory argument before it: a bounded scalar, > 0
  size_or_zero,    // the same, 0 allowed
  alloc_size,      // a constant: the size of the memory the helper returns
  ctx,             // the program's context, unmoved
  ringbuf_record,  // a record bpf_ringbuf_reserve gave, unmoved: the call releases it
  u64_out,         // points to 8 writable bytes the helper stores a u64 into
};
enum class Ret : uint8_t {
  scalar,                 // a number
  none,                   // nothing: r0 is unusable after the call
  map_value_or_null,      // a value of the map argument, or NULL
  ringbuf_record_or_null, // alloc_size writable bytes of a ring buffer record, or NULL
};
struct HelperProto {
  Ret ret = Ret::scalar;
  Arg args[5] = {Arg::none, Arg::none, Arg::none, Arg::none, Arg::none};
  uint32_t map_types = 0;  // Arg::map: bit (1 << MapType id) per type accepted
};
const char* arg_name(Arg a);
const char* ret_name(Ret r);

struct HelperInfo {
  uint32_t id = 0;
  std::string name;
  HelperFn fn = nullptr;
  // The helper reads current_run(): engines publish the run state for programs that
  // call it (a TLS store at entry and exit).
  bool needs_run = false;
  HelperProto proto;
  // The same helper without the checks its prototype makes redundant (pointers it is
  // given checked against the running program's memory, a map argument looked up among
  // the registered files): what a verified program's JIT code calls. Null: `fn`.
  HelperFn trusted = nullptr;
  HelperFn trusted_fn() const { return trusted ? trusted : fn; }
};

// "bpf_map_lookup_elem(map [hash, array], map_key) -> map_value_or_null": one line of
// docs/ebpf.md's helper table.
std::string describe_proto(const HelperInfo& h);

class HelperTable {
 public:
  // Adds or replaces helper `id`. A helper that needs the run must have a trusted form:
  // a verified program's JIT code publishes no run (make_env), so `fn` would find none
  // (Errc::invalid_argument; the table is left as it was).
  [[nodiscard]] Result<void> add(uint32_t id, std::string name, HelperFn fn, bool needs_run = false, HelperProto proto = {},
           HelperFn trusted = nullptr);
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

// bpf_tail_call(ctx, prog_array, index) (helper 12) is not a function: both engines run
// it themselves (interpreter.cpp, the JIT's call sequence in src/arch/x86_64/bpf_jit.cpp):
// the slot's program replaces the running one with the same context, and nothing
// returns; a missing program, an index beyond the map or the 34th tail call of an
// invocation falls through (maps.hpp tail_call_target). Its table entry gives the
// prototype; its callx slot is empty (make_env), so a callx of it faults unverified and
// is refused by the verifier.
inline constexpr uint32_t kTailCallHelper = 12;

// bpf_override_return(ctx, rc) (helper 58) only notes, for this thread, that the run of
// context `ctx` asked to return rc without running the probed function; the uprobe
// handler that may honour it (a uprobe at a function's entry the loader allowed:
// loader.hpp check_override) clears the note before the run and takes it after. A
// request of any other run is never taken. Async-signal-safe (a thread-local).
void clear_override() noexcept;
bool take_override(uint64_t ctx, uint64_t* rc) noexcept;

// bpf_get_stackid (27) and bpf_get_stack (67) unwind the user stack at a uprobe (the
// registers of its pt_regs context: arch/unwind.hpp). A return address the probe layer
// replaced (a uretprobe's trampoline) is given to `fix`, which the agent sets to the
// probe layer's lookup of the real one (the ebpf layer does not call the probe layer).
void set_return_address_fix(uint64_t (*fix)(uint64_t ra, uint64_t slot) noexcept);

struct MapHeader;
// Where bpf_trace_printk writes its lines (a ringbuf map of the map file); null: dropped.
// Each record is a PrintkHead, then the line's text (no NUL, no trailing newline).
void set_printk_ring(MapHeader* ring);

// Who printed a bpf_trace_printk line: the thread's process and thread ids and its
// name (comm, as prctl(PR_GET_NAME) gives it, NUL-padded) when it printed.
struct PrintkHead {
  uint32_t pid;
  uint32_t tid;
  char comm[16];
};
static_assert(sizeof(PrintkHead) == 24);

}  // namespace utramp::ebpf
