// The calls an object makes into other objects through its global offset table: every
// slot the dynamic loader fills with the address of a function defined elsewhere, read
// from the object as loaded (its dynamic section and relocations), so stripped objects
// have them too.
//
// Two relocations fill such slots on x86-64:
//   - R_X86_64_JUMP_SLOT (.rela.plt): the slot a PLT stub jumps through. Under lazy
//     binding it first holds the address of the stub's own second half (push the
//     relocation's index, jump to the resolver), and the resolver writes the function's
//     address into it on the first call; under BIND_NOW (`-z now`, LD_BIND_NOW) it holds
//     the function from the start, and the slot is read-only after relocation (RELRO).
//   - R_X86_64_GLOB_DAT (.rela.dyn): a slot read by `call *f@GOTPCREL(%rip)` (-fno-plt)
//     or by code taking the function's address; always bound at load, in RELRO.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace utramp::sites {

struct ImportSlot {
  uint64_t got = 0;        // run-time address of the slot
  std::string name;        // the function's symbol (no version)
  bool jump_slot = false;  // JUMP_SLOT (else GLOB_DAT)
  bool lazy = false;       // JUMP_SLOT not bound yet: it holds an address of its own object
};

struct ObjectImports {
  std::string path;  // "" for the main program (dl_iterate_phdr's name)
  uint64_t bias = 0;
  uint64_t relro_lo = 0, relro_hi = 0;  // PT_GNU_RELRO, run-time (read-only once relocated)
  std::vector<std::pair<uint64_t, uint64_t>> loads;  // PT_LOAD ranges, run-time
  std::vector<ImportSlot> slots;
  bool holds(uint64_t addr) const;
  bool in_relro(uint64_t addr) const { return addr >= relro_lo && addr < relro_hi; }
};

// The function imports of every loaded object `want` accepts by path (the main
// program's path is ""). Reads the loader's list with dl_iterate_phdr, which takes the
// loader's lock: call with no utramp lock held (docs/architecture.md, "Locks"). The
// objects' relocations must be done (not for an object announced by dlopen before it is
// relocated: sites/loader_watch.hpp).
std::vector<ObjectImports> loaded_imports(const std::function<bool(std::string_view path)>& want);

}  // namespace utramp::sites
