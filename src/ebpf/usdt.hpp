// USDT probes (the static probes of systemtap's <sys/sdt.h>, also dtrace -G's) for eBPF
// programs written with libbpf's usdt.bpf.h (`SEC("usdt/BINARY:PROVIDER:NAME")`,
// `BPF_USDT`, `bpf_usdt_arg`, `bpf_usdt_arg_cnt`, `bpf_usdt_cookie`).
//
// A probe site is a 1-byte `nop` the compiler left in the code, described by an ELF note
// in `.note.stapsdt` (type 3, owner "stapsdt"):
//   desc: u64 pc, u64 base, u64 semaphore, "provider\0", "name\0", "args\0"
// pc is the nop's link-time address; base the link-time address of section
// `.stapsdt.base` (a prelinked file moved everything by the difference between that
// section's address and base); semaphore the address of a u16 counter (0: none) the
// program tests before computing costly arguments, raised while a tracer is attached.
// args are the operands the compiler chose, in the assembler's syntax, one per
// argument: SIZE@OPERAND, SIZE in bytes, negative for a signed value:
//   -4@%edi   register          8@-16(%rbp)   memory at register + offset
//   -4@$5     constant          8@(%rax,%rdx,8)  base + index * scale (refused: below)
//
// The program reads its arguments from a spec libbpf writes into the program's own
// array map `__bpf_usdt_specs`, at a spec id the program gets from
// bpf_get_attach_cookie() (usdt.bpf.h asks `LINUX_HAS_BPF_COOKIE`, a .kconfig extern the
// loader answers with 1, so the `__bpf_usdt_ip_to_spec_id` map is not used). The spec
// layout is libbpf 1.1's struct __bpf_usdt_spec (Debian 12's usdt.bpf.h), checked
// against the object's BTF:
//   struct __bpf_usdt_arg_spec {        16 bytes
//     u64   val_off;       0   constant value, or the memory operand's offset
//     enum  arg_type;      8   0 const, 1 register, 2 memory at register + val_off
//     short reg_off;      12   the register's offset in struct pt_regs (kPtRegsFields)
//     bool  arg_signed;   14
//     char  arg_bitshift; 15   64 - 8 * size: the value is shifted left and back
//   };
//   struct __bpf_usdt_spec { arg_spec args[12]; u64 usdt_cookie @192; short arg_cnt @200; }
// libbpf 1.1 has no base+index*scale kind: such an operand (gcc -O2 emits them for an
// array element) is refused, naming the site and the operand, as libbpf 1.1 refuses it.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

struct btf;

namespace utramp::os {
class ElfFile;
}

namespace utramp::ebpf {

struct Object;

struct UsdtArg {
  enum class Kind : uint8_t { constant = 0, reg = 1, reg_deref = 2 };
  Kind kind = Kind::constant;
  uint32_t size = 8;    // bytes: 1, 2, 4 or 8
  bool is_signed = false;
  int64_t val_off = 0;  // the constant, or the memory operand's offset
  std::string reg;      // the pt_regs field ("di" for %dil, %edi, %rdi)
};

// One note of .note.stapsdt.
struct UsdtSite {
  uint64_t pc = 0;         // link-time address of the nop (prelink's move undone)
  uint64_t semaphore = 0;  // link-time address of the u16 semaphore, 0 if none
  std::string provider, name;
  std::string args;        // as in the note
  std::vector<UsdtArg> parsed;
};

// Every USDT note of `elf` (none: an empty list). Malformed notes are errors naming
// the note's position.
Result<std::vector<UsdtSite>> read_usdt_notes(const os::ElfFile& elf);

// One argument operand ("-4@-16(%rbp)"); the message says what is wrong with it.
Result<UsdtArg> parse_usdt_arg(std::string_view text);
// A note's argument string, at most 12 operands (usdt.bpf.h's BPF_USDT_MAX_ARG_CNT).
Result<std::vector<UsdtArg>> parse_usdt_args(std::string_view args);

inline constexpr size_t kUsdtMaxArgs = 12;
inline constexpr size_t kUsdtSpecSize = 208;  // sizeof(struct __bpf_usdt_spec), libbpf 1.1
// The spec the program reads for a site with these arguments.
std::array<uint8_t, kUsdtSpecSize> encode_usdt_spec(std::span<const UsdtArg> args, uint64_t usdt_cookie);

// "PROVIDER:NAME" of a usdt program's target, split.
struct UsdtName {
  std::string provider, name;
};
UsdtName split_usdt_target(std::string_view target);

// Where the usdt programs of an object go in one binary: for each usdt program (by
// index in obj.programs), its sites and the spec id of the first (the others follow).
struct UsdtPlan {
  size_t prog = 0;
  std::vector<UsdtSite> sites;
  uint32_t first_spec = 0;
};
// Checks that obj can run USDT programs (the maps and spec layout of usdt.bpf.h) and
// finds each usdt program's sites in `elf` (the traced binary): at least one per
// program, every argument decodable, all specs fitting in `__bpf_usdt_specs`. The CLI
// runs it before the target starts, the agent again to attach.
Result<std::vector<UsdtPlan>> plan_usdt(const Object& obj, const os::ElfFile& elf);
// The map index of `__bpf_usdt_specs` in obj, or -1.
int usdt_specs_map(const Object& obj);
// Whether a map is one of usdt.bpf.h's own (not the program's data: not printed).
bool is_usdt_internal_map(std::string_view name);

}  // namespace utramp::ebpf
