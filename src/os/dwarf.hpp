// Function signatures from DWARF: where each argument of a user-space function arrives
// and how its value returns, per the System V x86-64 psABI (§3.2.3), read with libdw
// from the ELF file's own debug info or from its separate debug file.
//
// Where the debug info comes from: libdwfl's standard lookup (dwfl_standard_find_debuginfo):
// the file itself, then by build-id <dir>/.build-id/xx/yyyy.debug, then by
// .gnu_debuglink in the file's directory, its .debug/ and <dir>/<file's directory>, for
// each <dir> of the debuginfo path ":.debug:/usr/lib/debug" (elfutils' default;
// UTRAMP_DEBUGINFO_PATH replaces it, same syntax), then debuginfod when DEBUGINFOD_URLS
// is set.
//
// Classification (what the Signature says for each C/C++ type):
//   integers, _Bool, char*_t, enums, pointers, references, nullptr_t,
//   pointers to data members                   INTEGER, one eightbyte
//   __int128, pointers to member functions     INTEGER, INTEGER
//   float, double, _Float16                    SSE; _Complex float one SSE eightbyte,
//                                              _Complex double two
//   long double                                argument in memory (16, align 16),
//                                              returned in st(0)
//   _Complex long double                       argument in memory; as a return value
//                                              refused (st(0):st(1) has no ctx form)
//   structs, unions, classes (size <= 16)      one class per eightbyte, merged over every
//                                              member, base class, array element and
//                                              bitfield (§3.2.3 rules 4 and 5); a field at
//                                              an offset its type's alignment does not
//                                              divide makes the whole value MEMORY
//   structs over 16 bytes, MEMORY class        argument in memory; returned through the
//                                              hidden pointer (RetType::memory)
//   empty structs and classes (no eightbyte    no argument at all: neither gcc nor clang
//   with a class: C's size 0, C++'s size 1)    passes them in a register or stack slot,
//                                              so they take no ctx slot; as a return
//                                              value, void
//   C++ classes not trivially copyable for     a pointer argument (the caller's copy);
//   calls (DW_CC_pass_by_reference; or, where  returned through the hidden pointer
//   the compiler does not say, as gcc does
//   not, a user-provided or virtual copy/move
//   constructor or destructor, a virtual base
//   or function, such a member or base, or
//   every copy/move constructor deleted)
//   K&R (unprototyped) C definitions           default argument promotions: float as
//                                              double, narrow integers as int
//   a C struct/union DWARF gives no members    the class of the argument register DWARF
//   (gcc does so for transparent unions,       names at the entry, else refused
//   e.g. glibc's __CONST_SOCKADDR_ARG)
//   vectors, __float128, _Float128,            refused: no ctx form
//   _Decimal128 (SSEUP)
// An ArgType of kind reg is the type's classification: an argument that finds too few
// registers left (psABI: then the whole argument goes on the stack) is for the caller of
// this API to place, as for any seventh integer.
//
// Refused with the evidence, because DWARF then describes a convention the code does not
// follow: gcc clones (f.isra.0, f.constprop.0, f.part.0 at the entry), DW_CC_nocall, and
// clang's local functions whose arguments it removed in place (a parameter that DWARF
// places, at the entry, in another argument register than the ABI assigns, or one folded
// to DW_AT_const_value).
//
// Not found: no DWARF (the message gives the build-id and .gnu_debuglink looked for),
// assembly (gas's DWARF has no types), gcc -g1 / clang -gmlt (no types), IFUNCs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "common/result.hpp"
#include "abi/signature.hpp"

namespace utramp::os {

// The signature of the function whose entry is at `func_vaddr` (link-time address in
// the file) of the ELF object at `path`, from its DWARF. Errc::not_found when the file
// has no DWARF for it ("no debug info for X in PATH", with why); Errc::unsupported for a
// type or a function it cannot classify, naming the parameter and the type;
// Errc::io/bad_format when the file cannot be read as ELF.
Result<abi::Signature> signature_from_dwarf(const std::string& path, uint64_t func_vaddr);

// Says that about N functions of the ELF object at PATH are about to be looked up by
// address (a tracer attaching to each): with more than a few, the file's index of
// function entries is built by the first lookup rather than after several lookups each
// walked the units. Opens the file (its errors are the lookups' to report).
void expect_lookups(const std::string& path, size_t n);
// Says that the N lookups expect_lookups(PATH, N) announced are done: with as many as
// made it build the index, the file's debug info and that index are let go (opened again
// by a later lookup). A tracer's attach lets them go before it makes its images, whose
// memory then reuses theirs (docs/benchmarks.md, "The agent's start-up heap").
void lookups_done(const std::string& path, size_t n);

// Same, by symbol name: DW_AT_linkage_name (a C++ mangled name) or DW_AT_name, else the
// ELF function symbol of that name (aliases such as glibc's malloc for __libc_malloc,
// gcc clones). A name that several functions share (overloads, static functions of
// different files) is Errc::invalid_argument, listing them with their addresses.
Result<abi::Signature> signature_from_dwarf(const std::string& path, std::string_view name);

// The GNU build-id of the ELF file at PATH in hex, "" when it has none or cannot be read.
std::string build_id_hex(const std::string& path);

// The code range [start, end) (link-time addresses) of the call frame information row
// (.eh_frame, else .debug_frame) that covers `vaddr` in the ELF file at `path`: a range
// that starts on an instruction boundary (CFI rows begin where an instruction does),
// found in stripped files too, where no symbol names the code (gcc's .cold parts, static
// functions). Errc::not_found when no CFI covers it.
Result<std::pair<uint64_t, uint64_t>> cfi_row_range(const std::string& path, uint64_t vaddr);

}  // namespace utramp::os
