#include "sites/imports.hpp"

#include <elf.h>
#include <link.h>

namespace utramp::sites {

bool ObjectImports::holds(uint64_t addr) const {
  for (const auto& [lo, hi] : loads)
    if (addr >= lo && addr < hi) return true;
  return false;
}

namespace {

struct Scan {
  const std::function<bool(std::string_view)>* want;
  std::vector<ObjectImports>* out;
};

// A dynamic-section pointer as the loader left it: glibc adds the load bias to the
// entries of a writable dynamic section in place, and leaves a read-only one as linked.
// Link-time addresses of an object with a bias lie below the bias.
uint64_t dyn_ptr(uint64_t p, uint64_t bias) { return bias && p < bias ? p + bias : p; }

void read_relocs(ObjectImports& o, const ElfW(Rela)* rela, uint64_t size, const ElfW(Sym)* symtab,
                 const char* strtab, uint32_t want_type) {
  for (uint64_t i = 0; i < size / sizeof(ElfW(Rela)); ++i) {
    const ElfW(Rela)& r = rela[i];
    if (ELF64_R_TYPE(r.r_info) != want_type) continue;
    const uint32_t si = ELF64_R_SYM(r.r_info);
    if (si == 0) continue;
    const ElfW(Sym)& s = symtab[si];
    const unsigned type = ELF64_ST_TYPE(s.st_info);
    // Imports only: a symbol this object defines is reached by its own code directly.
    if (s.st_shndx != SHN_UNDEF) continue;
    if (type != STT_FUNC && type != STT_GNU_IFUNC &&
        !(type == STT_NOTYPE && want_type == R_X86_64_JUMP_SLOT))
      continue;  // GLOB_DAT of data (a copy-relocated object, a variable)
    const uint64_t got = o.bias + r.r_offset;
    const uint64_t value = *reinterpret_cast<const uint64_t*>(got);
    if (value == 0) continue;  // an undefined weak function: nothing to call
    ImportSlot slot;
    slot.got = got;
    slot.name = strtab + s.st_name;
    slot.jump_slot = want_type == R_X86_64_JUMP_SLOT;
    slot.lazy = slot.jump_slot && o.holds(value);
    o.slots.push_back(std::move(slot));
  }
}

int scan_object(dl_phdr_info* info, size_t, void* data) {
  auto* scan = static_cast<Scan*>(data);
  const std::string_view name = info->dlpi_name ? info->dlpi_name : "";
  if (*scan->want && !(*scan->want)(name)) return 0;
  ObjectImports o;
  o.path = std::string(name);
  o.bias = info->dlpi_addr;
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uint64_t lo = o.bias + ph.p_vaddr, hi = lo + ph.p_memsz;
    if (ph.p_type == PT_LOAD) o.loads.emplace_back(lo, hi);
    if (ph.p_type == PT_DYNAMIC) dyn = reinterpret_cast<const ElfW(Dyn)*>(lo);
    if (ph.p_type == PT_GNU_RELRO) {
      o.relro_lo = lo;
      o.relro_hi = hi;
    }
  }
  if (!dyn) return 0;  // the vdso has one; a static object has none
  uint64_t symtab = 0, strtab = 0, jmprel = 0, pltrelsz = 0, rela = 0, relasz = 0, pltrel = 0;
  for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB: symtab = dyn_ptr(d->d_un.d_ptr, o.bias); break;
      case DT_STRTAB: strtab = dyn_ptr(d->d_un.d_ptr, o.bias); break;
      case DT_JMPREL: jmprel = dyn_ptr(d->d_un.d_ptr, o.bias); break;
      case DT_PLTRELSZ: pltrelsz = d->d_un.d_val; break;
      case DT_PLTREL: pltrel = d->d_un.d_val; break;
      case DT_RELA: rela = dyn_ptr(d->d_un.d_ptr, o.bias); break;
      case DT_RELASZ: relasz = d->d_un.d_val; break;
      default: break;
    }
  }
  if (!symtab || !strtab) return 0;
  const auto* syms = reinterpret_cast<const ElfW(Sym)*>(symtab);
  const auto* strs = reinterpret_cast<const char*>(strtab);
  if (jmprel && pltrel == DT_RELA)
    read_relocs(o, reinterpret_cast<const ElfW(Rela)*>(jmprel), pltrelsz, syms, strs, R_X86_64_JUMP_SLOT);
  if (rela) read_relocs(o, reinterpret_cast<const ElfW(Rela)*>(rela), relasz, syms, strs, R_X86_64_GLOB_DAT);
  scan->out->push_back(std::move(o));
  return 0;
}

}  // namespace

std::vector<ObjectImports> loaded_imports(const std::function<bool(std::string_view)>& want) {
  std::vector<ObjectImports> out;
  Scan scan{&want, &out};
  dl_iterate_phdr(scan_object, &scan);
  return out;
}

}  // namespace utramp::sites
