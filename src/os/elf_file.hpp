// Reading ELF files with libelf: sections, symbols, relocations, bytes at an address.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/result.hpp"

namespace utramp::os {

struct ElfSection {
  std::string name;
  uint32_t type = 0;
  uint64_t flags = 0;
  uint64_t addr = 0;    // virtual address
  uint64_t offset = 0;  // file offset
  uint64_t size = 0;
  size_t index = 0;
};

struct ElfSymbol {
  std::string name;
  uint64_t value = 0;
  uint64_t size = 0;
  uint8_t type = 0;   // STT_*
  uint8_t bind = 0;   // STB_*
  uint16_t shndx = 0;
  bool dynamic = false;  // from .dynsym
};

// What a file's section headers and dynamic symbol table say, read without the rest of
// the file (libelf maps it and touches only those): cheap enough to ask of every
// library a process loads.
struct ElfOutline {
  std::vector<std::string> sections;           // section names
  std::vector<std::string> undefined_dynamic;  // .dynsym symbols the file imports
};
Result<ElfOutline> read_outline(const std::string& path);

class ElfFile {
 public:
  static Result<std::unique_ptr<ElfFile>> open(const std::string& path);
  ~ElfFile();
  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;

  const std::string& path() const { return path_; }
  bool is_dyn() const { return is_dyn_; }      // ET_DYN: PIE or shared library
  bool has_symtab() const { return has_symtab_; }
  bool has_interp() const { return has_interp_; }
  bool has_dynamic() const { return has_dynamic_; }  // PT_DYNAMIC: dynamically linked
  // The program interpreter (PT_INTERP, the dynamic loader), "" if none.
  const std::string& interp() const { return interp_; }
  // The virtual address the file's first byte is mapped at (the PT_LOAD of file offset
  // 0, page-aligned): a process's mapping of offset 0, less this, is the load bias.
  uint64_t first_load_vaddr() const { return first_load_vaddr_; }
  const std::vector<ElfSection>& sections() const { return sections_; }
  const ElfSection* section(std::string_view name) const;
  // Functions from .symtab where present, .dynsym otherwise (both merged, de-duplicated).
  const std::vector<ElfSymbol>& symbols() const;
  // Bytes of the file image at a virtual address (from SHT_PROGBITS sections).
  std::span<const uint8_t> bytes_at(uint64_t vaddr, uint64_t len) const;
  std::span<const uint8_t> section_data(const ElfSection& s) const;
  // Addend of an R_X86_64_RELATIVE relocation at `vaddr` (how PIE fills address tables).
  bool relative_reloc(uint64_t vaddr, uint64_t* addend) const;
  // Symbol named by a GOT slot's relocation (GLOB_DAT/JUMP_SLOT/64), "" if none.
  std::string got_symbol(uint64_t slot) const;
  // Whether some GOT slot's relocation names `name` (the object calls or reads it).
  bool imports(std::string_view name) const;
  // Reads a table of 64-bit addresses (such as __patchable_function_entries), applying
  // RELATIVE relocations where the file leaves zeros.
  std::vector<uint64_t> address_table(std::string_view section) const;

 private:
  ElfFile() = default;
  Result<void> load();

  std::string path_;
  int fd_ = -1;
  void* elf_ = nullptr;  // Elf*
  // The file, mapped private (copy on write) rather than read into the heap: only the
  // pages read (headers, tables, the sections asked for) are faulted in, and they are
  // the page cache's (a program's file is megabytes; its code is read from memory).
  // Writable because libelf's elf_memory takes a char*; nothing writes them. As libdw's
  // own mapping of the file for DWARF, it assumes the file is not truncated meanwhile.
  uint8_t* image_ = nullptr;
  size_t image_size_ = 0;
  bool is_dyn_ = false, has_symtab_ = false, has_interp_ = false, has_dynamic_ = false;
  std::string interp_;
  uint64_t first_load_vaddr_ = 0;
  std::vector<ElfSection> sections_;
  // The symbol and relocation tables are read on first use (tables()): a caller that
  // only checks the headers (utramp record's check of its program) does not pay for a
  // node per symbol.
  void tables() const;
  void load_tables() const;
  std::vector<size_t> symtab_scns_, rela_scns_;  // section indices: .symtab before .dynsym
  mutable std::once_flag tables_once_;
  mutable std::vector<ElfSymbol> symbols_;
  mutable std::vector<std::pair<uint64_t, uint64_t>> relative_;  // offset, addend: by offset
  mutable std::map<uint64_t, std::string> got_syms_;
};

}  // namespace utramp::os
