// CO-RE relocations ("compile once, run everywhere") for user-space targets.
//
// clang records, for each instruction that reads a field through
// __builtin_preserve_access_index (BPF_CORE_READ, bpf_core_field_exists, ...), a
// bpf_core_relo in .BTF.ext: the instruction, a kind, the root type in the object's BTF
// and an access string ("0:2:1": index into the root as an array, then member and array
// indices). The kernel's libbpf resolves it against the kernel's BTF; a user-space
// target has no BTF, so the same questions are answered from the target's DWARF
// (libdw), matching the object's types by name (a "___flavour" suffix ignored):
//
//   kind                  value                           target lookup
//   field_byte_offset     byte offset of the field        root struct/union by name, then
//   field_byte_size       its size                        each member by name (through
//   field_exists          1 if every member is there      anonymous members), arrays by
//   field_signed          1 for a signed integer or enum  element size
//   type_id_local         the object's own type id        (none)
//   type_exists           1 if the type is there          struct, union, enum, typedef or
//   type_size             its size                        base type of that name
//   enumval_exists        1 if the enumerator is there    enum by name, enumerator by name
//   enumval_value         its value
// Not supported (the load fails naming the instruction and the kind): bitfields
// (field_lshift_u64, field_rshift_u64, or any relocation landing on a bitfield),
// type_id_target (there is no target BTF to give an id in) and type_matches.
//
// Patching, as libbpf does: an ALU instruction with an immediate gets the value in imm,
// a load or store gets a field offset in off (the field's size must not change), lddw
// gets the 64-bit value. The instruction must hold the value the object's own BTF gives
// (what clang emitted), else the record does not describe it and the load fails.
//
// A uprobe program's `struct pt_regs` is not the target's: it is the context utramp
// builds at each hit (loader.hpp kPtRegsFields), so relocations rooted at it resolve
// against that layout whatever the target's DWARF says: each register an unsigned
// 8-byte word, the struct 168 bytes; a register utramp's context lacks does not exist
// (field_exists 0; any other kind fails naming it).
//
// Without the target's DWARF the object's BTF is the reference: the values clang
// emitted stay, each checked as above. A field, type or enumerator the target's DWARF
// lacks makes field_exists/type_exists/enumval_exists 0; any other kind on it fails.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/result.hpp"
#include "ebpf/loader.hpp"

namespace utramp::ebpf {

const char* core_kind_name(uint32_t kind);
bool core_kind_supported(uint32_t kind);
std::string core_supported_kinds();

// The named types of an ELF file's DWARF (read from the file itself).
class TargetTypes {
 public:
  // Errc::not_found when `path` has no DWARF.
  static Result<std::shared_ptr<TargetTypes>> open(const std::string& path);
  ~TargetTypes();
  TargetTypes(const TargetTypes&) = delete;
  TargetTypes& operator=(const TargetTypes&) = delete;
  const std::string& path() const;

  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  TargetTypes() = default;
  std::unique_ptr<Impl> impl_;
};

// Applies p.core to p.insns against `target` (null: the object's BTF `local`). Errors
// name the program, the instruction index, the kind and the access path.
Result<void> apply_core(LoadedProgram& p, const btf* local, const TargetTypes* target);

}  // namespace utramp::ebpf
