// The DWARF of an eBPF object (clang -g -target bpf), read with libdw: the typed
// prototype of BPF_PROG's inner function.
//
// BPF_PROG(name, args...) defines `name(ctx)`, which calls the always-inline
// `____name(ctx, args...)`. BTF describes ____name only when clang kept it out of line;
// DWARF describes it either way: as a DW_TAG_subprogram with DW_AT_inline (the abstract
// instance, with typed DW_TAG_formal_parameters) whose DW_TAG_inlined_subroutine sits in
// name(), or as an out-of-line subprogram (possibly pointing at its abstract origin).
//
// The object is relocatable: its .debug_* sections carry REL relocations against section
// symbols, whose addends are the bytes in place. Read unrelocated, the string and
// abbreviation offsets are therefore already right; addresses are not needed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/result.hpp"

struct btf;

namespace utramp::ebpf {

struct Prototype;

class ObjectDwarf {
 public:
  // Errc::not_found when the object has no .debug_info (compiled without -g).
  static Result<std::unique_ptr<ObjectDwarf>> open(std::span<const uint8_t> elf_bytes);
  ~ObjectDwarf();
  ObjectDwarf(const ObjectDwarf&) = delete;
  ObjectDwarf& operator=(const ObjectDwarf&) = delete;

  // The arguments after the first (ctx) of the function `name`, with their C types:
  // "(int n, long ret)". nullopt when no function of that name has typed parameters.
  std::optional<Prototype> prototype(const std::string& name) const;

  // Every named struct and union the DWARF describes, with the types they are made of,
  // as BTF (pointers become `void *`, as only their value is of use): what decodes a
  // ring buffer record whose struct is a local variable's type, which clang leaves out
  // of .BTF (it describes only types that globals, maps and functions use). A type
  // libbpf refuses is void there (its values print as bytes).
  Result<std::shared_ptr<const btf>> named_types_as_btf() const;

 private:
  ObjectDwarf() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace utramp::ebpf
