// The verifier: proves, before a program runs, that no run of it can touch memory it
// was not given, read a register or stack byte it never wrote, call a helper with the
// wrong arguments, leak a ring buffer record, or fail to end. A program it cannot
// prove is refused, with the evidence (see verify()). docs/ebpf.md says what is proven.
//
// Method (as the kernel's verifier): abstract interpretation along every path from
// the first instruction. The state at an instruction is what is known of each
// register and each stack byte of each call frame:
//
//   not_init                       never written (reading it is refused)
//   scalar                         a number: tnum + signed and unsigned ranges (bounds.hpp)
//   ctx                            the context + offset (its size per program type)
//   stack (frame k)                r10 of frame k + offset
//   map (m)                        map m itself: only a helper argument
//   map_value[_or_null] (m)        a value of map m + offset (or NULL until checked)
//   mem[_or_null] (n bytes)        a ring buffer record of n bytes (or NULL), to be
//                                  submitted or discarded on every path
//
// A conditional jump whose outcome the state decides follows one edge; otherwise both
// are explored with the operands narrowed (`if r1 > 7` leaves r1 in [0, 7] on the
// fall-through). A comparison with 0 decides a maybe-NULL pointer on both edges, and
// every copy of it (registers and spills with the same id). Loops are explored
// iteration by iteration until a decided branch leaves them; a path that comes back to
// an instruction in a state no different from the one it had there (no progress) is
// refused as an infinite loop, and at most `max_insns` instructions are processed in
// all (the complexity limit). Paths are pruned where they reach a jump target in a
// state contained in one already proven safe from there (registers dead there ignored).
//
// What the engines may rely on for an accepted program (the Proof): every memory
// access is inside the stack, the context, a map value or a live ring buffer record;
// local calls nest at most Proof::frames deep; every path ends; the divisions and
// callx it marks are as stated.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "ebpf/helpers.hpp"
#include "ebpf/insn.hpp"
#include "ebpf/maps.hpp"

namespace utramp::ebpf {

// An lddw that names a map: the loader records one per map reference (patched with
// the map's address by resolve()).
struct MapRef {
  uint32_t insn;       // index of the lddw in the program
  uint32_t map;        // index in the program's maps
  bool value = false;  // the value's address (+offset): global data; else the map itself
  uint64_t offset = 0;
};

// A source line of .BTF.ext line info: the instructions from `insn` on come from it.
struct LineInfo {
  uint32_t insn = 0;
  std::string file;
  uint32_t line = 0;
  uint32_t col = 0;
  std::string text;  // the source line, trimmed
};

// What r1 points to at entry.
enum class CtxKind : uint8_t {
  tracing,  // fentry/fexit/fmod_ret: u64 arguments then the return value, read-only
  pt_regs,  // uprobe/uretprobe: a copy of struct pt_regs (168 bytes), read-only
  memory,   // test and conformance programs: `size` bytes (writable or not), r2 = size
};

struct ContextSpec {
  CtxKind kind = CtxKind::memory;
  uint32_t size = 0;       // bytes r1 points to
  bool writable = false;
  std::string what;        // for messages: "the context of work (1 argument, return value)"
};

// Everything the verifier is told about a program besides its instructions.
struct VerifyEnv {
  ContextSpec ctx;
  std::vector<MapSpec> maps;      // by index, as MapRef::map counts
  std::vector<MapRef> refs;
  std::vector<LineInfo> lines;    // sorted by insn; may be empty
  const HelperTable* helpers = nullptr;
  // The kernel's limit: instructions processed over all paths.
  uint64_t max_insns = 1'000'000;
  // 0: no log (the refusal's message only); 1: a summary; 2: every instruction
  // processed with the registers it changed, and each branch's state.
  int log_level = 0;
  size_t log_limit = 4u << 20;    // bytes of log kept (the rest is counted, not kept)
};

// Facts about an accepted program the engines use to leave out checks.
struct Proof {
  enum : uint8_t {
    kReached = 1,         // some path runs this instruction (unreached ones never run)
    kDivisorNonZero = 2,  // div/mod: the divisor is never 0 on any path
    kNoOverflowDiv = 4,   // sdiv/smod: the divisor is never -1
    kSubprogExit = 8,     // an exit of a local function (returns to its caller)
  };
  std::vector<uint8_t> insn;       // per instruction: the flags above
  std::vector<int32_t> callx;      // per instruction: callx's helper id (-1: not callx)
  uint32_t frames = 1;             // deepest nesting of local calls (1: none)
  // Statistics, for the log and the benchmark.
  uint64_t insns_processed = 0;
  uint64_t states_stored = 0;
  uint64_t pruned = 0;
  uint32_t peak_states_at_insn = 0;
  double micros = 0;
};

struct Verified {
  Proof proof;
  std::string log;  // empty at log_level 0
};

// Proves `insns` (which passed check_program()) safe in `env`. A refusal is an error
// (Errc::invalid_argument; too_big for the complexity limit) whose message is
//
//   insn 12: ldxdw %r0, [%r1+8]
//     at prog.bpf.c:23:  __u64 v = *p;          (when there is line info)
//   read of 8 bytes at offset 8 of a value of map 'counts' (8 bytes): outside it
//   state: r1=map_value(counts)+8 r6=ctx r10=fp0 fp-8=scalar
//   path: 0..3 -> 7 (jne taken) -> 9..12
//
// and, at log_level > 0, the log up to the refusal after it.
Result<Verified> verify(std::span<const Insn> insns, const VerifyEnv& env);

}  // namespace utramp::ebpf
