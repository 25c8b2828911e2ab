// The loader: an ELF object from `clang -O2 -g -target bpf` (libbpf's headers) turned
// into programs the engines take and the map specs the map file is made from.
//
// What an object may hold:
//   SEC("fentry/FUNC"), SEC("fexit/FUNC"), SEC("fmod_ret/FUNC")   programs (each global
//                           function of such a section is one program attached to FUNC)
//   SEC("uprobe/FUNC[+OFF]"), SEC("uretprobe/FUNC")   probes with a struct pt_regs
//                           context; libbpf's "uprobe/BINARY:FUNC[+OFF]" too (BINARY is
//                           kept for the caller to compare with the traced program, or *);
//                           "kprobe/FUNC[+OFF]" and "kretprobe/FUNC" are the same probes
//                           (libbpf-tools name user functions so); bare "uprobe",
//                           "uretprobe", "kprobe", "kretprobe", "fentry", "fexit" and
//                           "fmod_ret" name no function: an AttachSpec (--attach) names
//                           it (apply_attach, which refuses a program left without one)
//   SEC("usdt/BINARY:PROVIDER:NAME"), bare SEC("usdt")   USDT probes (usdt.hpp): a
//                           pt_regs context at every site of PROVIDER:NAME; target is
//                           "PROVIDER:NAME"
//   .text                   BPF-to-BPF callees: appended to each program that calls
//                           them (calls relocated), their own relocations applied too
//   .maps                   BTF-defined maps (__uint(type, ...), __type(key, ...) ...),
//                           read with libbpf's BTF API from .BTF; a prog_array's
//                           `__array(values, ...)` initialiser (`.values = { [1] =
//                           &handler }`): the .rel.maps relocations against programs,
//                           kept as the map's prog_slots
//   .data* .rodata* .bss*   global data: one-entry array maps whose value is the section
//   .kconfig externs        `extern ... __kconfig` (usdt.bpf.h's LINUX_HAS_BPF_COOKIE):
//                           a read-only global-data map ".kconfig" holding what this
//                           runtime provides (kKconfig in loader.cpp); an unknown weak
//                           one reads 0, an unknown strong one is refused
//   .BTF.ext                CO-RE relocation records: kept per program (core.hpp applies
//                           them against the target's DWARF); unsupported kinds refused.
//                           Line info: kept per program for the verifier's messages
//   license, version, .BTF*, .debug*, .rel*, .symtab, .strtab, .llvm_addrsig  ignored
// Anything else allocated is refused, as are legacy `maps` sections.
//
// Map references: `lddw rX, map` (src 1 after libbpf; here, a R_BPF_64_64 relocation
// against a .maps symbol) becomes the address of the map's header in the map file;
// `lddw rX, &global + off` (relocation against a data section) the address of the
// value plus the offset. Both are recorded as MapRefs and patched by resolve() once the
// map file is mapped (the CLI and the agent map it at different addresses). Before
// that, parse_object() checks each program (check.hpp) with placeholders in the lddws,
// so bad jumps, reserved fields and unknown helpers fail before anything runs.
//
// Every error names the object, the section or program and, for instructions, the
// index, the disassembly and the bytes.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "ebpf/helpers.hpp"
#include "ebpf/insn.hpp"
#include "ebpf/maps.hpp"
#include "ebpf/verifier.hpp"

struct btf;

namespace utramp::abi {
struct Signature;
}

namespace utramp::ebpf {

enum class ProgKind : uint8_t { fentry, fexit, fmod_ret, uprobe, uretprobe, usdt };
const char* prog_kind_name(ProgKind k);

// The program's typed prototype: BPF_PROG's inner function `____NAME(ctx, args...)`,
// read from the object's DWARF (which keeps it, as an abstract instance, even when
// clang inlined it away), else from its BTF (only when it was not inlined).
struct Prototype {
  std::vector<uint32_t> arg_sizes;  // bytes of each argument after ctx
  std::string text;                 // "(int n, int ret)"
};

// One CO-RE relocation (a bpf_core_relo of .BTF.ext) on a program's instruction.
struct CoreRelo {
  uint32_t insn = 0;     // index in LoadedProgram::insns
  uint32_t kind = 0;     // enum bpf_core_relo_kind
  uint32_t type_id = 0;  // root type in the object's BTF
  std::string access;    // "0:1:2"
};

struct LoadedProgram {
  std::string name;     // the function's symbol
  std::string section;  // fentry/work
  ProgKind kind = ProgKind::fentry;
  std::string target;   // work; usdt: PROVIDER:NAME
  std::string binary;   // uprobe/BINARY:FUNC: BINARY ("" when not given)
  uint64_t offset = 0;  // uprobe/FUNC+OFFSET: OFFSET
  std::vector<Insn> insns;
  std::vector<MapRef> refs;
  std::vector<CoreRelo> core;
  std::optional<Prototype> proto;
  std::vector<LineInfo> lines;  // .BTF.ext line info, by instruction (may be empty)
};

struct Object;
// The kinds whose context is struct pt_regs: uprobe, uretprobe, usdt.
bool is_uprobe(ProgKind k);

// Tail calls (bpf_tail_call, helper 12). A program in a prog_array's initialiser whose
// section names no function (a bare `SEC("uprobe")`, libbpf's way for handlers) and no
// --attach completes is a tail-call target only: loaded, verified and put in its slots,
// never attached. Every program in a slot and every program that calls bpf_tail_call
// must have the struct pt_regs context (uprobe, uretprobe, usdt, kprobe sections), so
// that a tail call always gives its target the context it was verified for; a tracing
// context (fentry...) differs per function and is refused for tail calls.
bool in_prog_array(const Object& obj, size_t prog);
bool tail_call_only(const Object& obj, size_t prog);

// bpf_override_return (helper 58): the probed function returns the program's value
// without running. A program that calls it must be a uprobe at a function's entry
// (offset 0): only there is the return address at the stack pointer, so the handler can
// return for the function (as the kernel's override_function_with_return does). This
// refuses any other program that calls it, saying why. Which functions may be skipped
// is the rule of fmod_ret (those marked UTRAMP_ALLOW_ERROR_INJECTION, unless `utramp
// run --allow-override`): the agent applies it, since it has the site table.
inline constexpr int32_t kOverrideReturnHelper = 58;
// bpf_get_stackid and bpf_get_stack: a program that calls either needs the entry frame
// of an fentry/fexit/fmod_ret context published (tramp::AttachOptions::frame).
inline constexpr int32_t kGetStackIdHelper = 27;
inline constexpr int32_t kGetStackHelper = 67;
// bpf_trace_printk (bpf_printk): its lines go to one ring per process (set_printk_ring).
inline constexpr int32_t kTracePrintkHelper = 6;
bool calls_helper(const LoadedProgram& p, int32_t id);
Result<void> check_override(const LoadedProgram& p);

// A uprobe program's context: the kernel's x86-64 struct pt_regs, one u64 per register
// in this order (168 bytes). The one definition of that layout: CO-RE relocations on
// `struct pt_regs` resolve against it (core.cpp), the agent builds it at each hit
// (agent/bpf.cpp, checked against it field by field), the verifier bounds reads by it.
inline constexpr std::array<std::string_view, 21> kPtRegsFields = {
    "r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8", "ax",
    "cx",  "dx",  "si",  "di",  "orig_ax", "ip", "cs", "flags", "sp", "ss"};
inline constexpr uint64_t kPtRegsSize = kPtRegsFields.size() * 8;
// The byte offset of register `name` in that context, or -1.
constexpr int64_t pt_regs_offset(std::string_view name) {
  for (size_t i = 0; i < kPtRegsFields.size(); ++i)
    if (kPtRegsFields[i] == name) return static_cast<int64_t>(8 * i);
  return -1;
}

struct Object {
  std::string path;
  std::string license;
  std::vector<MapSpec> maps;
  std::vector<LoadedProgram> programs;
  std::shared_ptr<const btf> local_btf;  // the object's .BTF (CO-RE's local types), or null
};

// An attach spec (`utramp run --attach PROG=SPEC`): where program PROG is attached,
// overriding or completing its section. SPEC is one of
//   uprobe:BINARY:FUNC[+OFF]   uretprobe:BINARY:FUNC   (BINARY as in uprobe/BINARY:FUNC)
//   usdt:BINARY:PROVIDER:NAME
//   fentry:FUNC   fexit:FUNC   fmod_ret:FUNC
// A spec keeps the program's context: a pt_regs section (uprobe, uretprobe, kprobe,
// kretprobe, usdt) takes uprobe, uretprobe or usdt (as libbpf's
// bpf_program__attach_uprobe and _attach_usdt take any of them), a tracing section only
// its own kind (its context is fixed at load).
struct AttachSpec {
  std::string prog;
  ProgKind kind = ProgKind::uprobe;
  std::string binary;  // uprobes: as given (the form requires one)
  std::string func;    // usdt: PROVIDER:NAME
  uint64_t offset = 0;
  std::string text;    // as given, for messages
};
Result<AttachSpec> parse_attach_spec(const std::string& text);
// Applies `specs` to obj's programs (each spec must name one of them, each program at
// most once), then checks that every program names a function: a bare section left
// without a spec is refused with the --attach form that completes it.
Result<void> apply_attach(Object& obj, std::span<const AttachSpec> specs);

// Parses and checks an object from memory (`name` for messages) against `helpers`.
Result<Object> parse_object(std::span<const uint8_t> bytes, const std::string& name,
                            const HelperTable& helpers);
Result<Object> load_object_file(const std::string& path, const HelperTable& helpers);

// Patches every MapRef: header_addr[i] is map i's header, value_addr[i] its value memory.
void resolve(LoadedProgram& p, std::span<const uint64_t> header_addr,
             std::span<const uint64_t> value_addr);

// The verifier's view of program `p` of `obj` attached to a function of signature
// `target` (Signature::fallback() when unknown): its context (the tracing context of
// the target's arguments, and return value for fexit/fmod_ret; struct pt_regs for
// uprobes), the object's maps, the map references and the line info. The agent loads
// with these options and the CLI verifies with them, so both prove the same thing.
// The caller adds the helper table, the regions and the log level.
struct ExecOptions;
void program_options(const Object& obj, const LoadedProgram& p, const abi::Signature& target, ExecOptions& o);

// Checks the program's prototype (if known) against the target's signature: the number
// of arguments (fexit/fmod_ret: plus the return value, which may be left out) and each
// one's size. The message names both.
Result<void> check_prototype(const LoadedProgram& p, const abi::Signature& target);

}  // namespace utramp::ebpf
