#include "os/elf_file.hpp"

#include <elf.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string_view>
#include <tuple>
#include <unordered_set>

#include "os/file.hpp"

namespace utramp::os {

namespace {
Elf* E(void* p) { return static_cast<Elf*>(p); }
}  // namespace

Result<ElfOutline> read_outline(const std::string& path) {
  auto fd = open_regular(path);
  if (!fd) return std::move(fd).error();
  elf_version(EV_CURRENT);
  Elf* elf = elf_begin(*fd, ELF_C_READ_MMAP, nullptr);
  struct Closer {
    Elf* elf;
    int fd;
    ~Closer() {
      if (elf) elf_end(elf);
      ::close(fd);
    }
  } closer{elf, *fd};
  size_t shstrndx = 0;
  if (!elf || elf_kind(elf) != ELF_K_ELF || elf_getshdrstrndx(elf, &shstrndx) != 0)
    return make_error(Errc::bad_format, fmt::format("{}: not an ELF file: {}", path, elf_errmsg(-1)));
  ElfOutline out;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) continue;
    if (const char* name = elf_strptr(elf, shstrndx, sh.sh_name)) out.sections.emplace_back(name);
    if (sh.sh_type != SHT_DYNSYM || sh.sh_entsize == 0) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data) continue;
    const size_t n = sh.sh_size / sh.sh_entsize;
    for (size_t i = 1; i < n; ++i) {
      GElf_Sym sym;
      if (!gelf_getsym(data, static_cast<int>(i), &sym) || sym.st_shndx != SHN_UNDEF) continue;
      if (const char* name = elf_strptr(elf, sh.sh_link, sym.st_name); name && *name)
        out.undefined_dynamic.emplace_back(name);
    }
  }
  return out;
}

Result<std::unique_ptr<ElfFile>> ElfFile::open(const std::string& path) {
  std::unique_ptr<ElfFile> f(new ElfFile());
  f->path_ = path;
  auto fd = open_regular(path);
  if (!fd) return std::move(fd).error();
  f->fd_ = *fd;
  struct stat st;
  if (fstat(f->fd_, &st) != 0)
    return make_error(Errc::io, fmt::format("{}: {}", path, strerror(errno)));
  f->image_size_ = static_cast<size_t>(st.st_size);
  if (f->image_size_ > 0) {
    void* m = mmap(nullptr, f->image_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, f->fd_, 0);
    if (m == MAP_FAILED) {
      f->image_size_ = 0;
      return make_error(Errc::io, fmt::format("{}: cannot map it: {}", path, strerror(errno)));
    }
    f->image_ = static_cast<uint8_t*>(m);
  }
  UTRAMP_TRY(f->load());
  return f;
}

ElfFile::~ElfFile() {
  if (elf_) elf_end(E(elf_));
  if (image_ != nullptr) munmap(image_, image_size_);
  if (fd_ >= 0) close(fd_);
}

Result<void> ElfFile::load() {
  elf_version(EV_CURRENT);
  if (image_size_ < SELFMAG || memcmp(image_, ELFMAG, SELFMAG) != 0)
    return make_error(Errc::bad_format, fmt::format("{}: not an ELF file", path_));
  elf_ = elf_memory(reinterpret_cast<char*>(image_), image_size_);
  if (!elf_ || elf_kind(E(elf_)) != ELF_K_ELF)
    return make_error(Errc::bad_format, fmt::format("{}: not an ELF file: {}", path_, elf_errmsg(-1)));
  GElf_Ehdr eh;
  if (!gelf_getehdr(E(elf_), &eh))
    return make_error(Errc::bad_format, fmt::format("{}: bad ELF header: {}", path_, elf_errmsg(-1)));
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64)
    return make_error(Errc::unsupported, fmt::format("{}: not an x86-64 ELF file", path_));
  if (eh.e_type != ET_EXEC && eh.e_type != ET_DYN)
    return make_error(Errc::unsupported,
                      fmt::format("{}: ELF type {} is neither an executable nor a shared object",
                                  path_, eh.e_type));
  is_dyn_ = eh.e_type == ET_DYN;
  // libelf quietly shows no sections when their table lies past the end of the image;
  // a truncated file must be refused, not listed as empty.
  size_t shnum = 0, phnum = 0;
  if (elf_getshdrnum(E(elf_), &shnum) != 0 || elf_getphdrnum(E(elf_), &phnum) != 0)
    return make_error(Errc::bad_format, fmt::format("{}: bad ELF header: {}", path_, elf_errmsg(-1)));
  auto outside = [&](uint64_t off, uint64_t n, uint64_t entsize) {
    return off > image_size_ || (entsize && n > (image_size_ - off) / entsize);
  };
  if (outside(eh.e_shoff, shnum, eh.e_shentsize) || outside(eh.e_phoff, phnum, eh.e_phentsize))
    return make_error(Errc::bad_format,
                      fmt::format("{}: the section or program header table lies outside the "
                                  "file ({} bytes; truncated?)",
                                  path_, image_size_));
  for (size_t i = 0; i < phnum; ++i) {
    GElf_Phdr ph;
    if (!gelf_getphdr(E(elf_), static_cast<int>(i), &ph)) continue;
    if (ph.p_type == PT_DYNAMIC) has_dynamic_ = true;
    if (ph.p_type == PT_LOAD && ph.p_offset == 0) first_load_vaddr_ = ph.p_vaddr & ~uint64_t{0xfff};
    if (ph.p_type != PT_INTERP) continue;
    has_interp_ = true;
    if (ph.p_offset < image_size_ && ph.p_filesz <= image_size_ - ph.p_offset) {
      const char* p = reinterpret_cast<const char*>(image_ + ph.p_offset);
      interp_.assign(p, strnlen(p, ph.p_filesz));
    }
  }
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(E(elf_), &shstrndx) != 0)
    return make_error(Errc::bad_format, fmt::format("{}: no section name table", path_));

  for (Elf_Scn* scn = nullptr; (scn = elf_nextscn(E(elf_), scn));) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) continue;
    ElfSection s;
    const char* name = elf_strptr(E(elf_), shstrndx, sh.sh_name);
    s.name = name ? name : "";
    s.type = sh.sh_type;
    s.flags = sh.sh_flags;
    s.addr = sh.sh_addr;
    s.offset = sh.sh_offset;
    s.size = sh.sh_size;
    s.index = elf_ndxscn(scn);
    if (sh.sh_type != SHT_NOBITS && (s.offset > image_size_ || s.size > image_size_ - s.offset))
      return make_error(Errc::bad_format,
                        fmt::format("{}: section {} lies outside the file (truncated?)", path_, s.name));
    sections_.push_back(s);
    if (sh.sh_type == SHT_SYMTAB) {
      has_symtab_ = true;
      symtab_scns_.insert(symtab_scns_.begin(), s.index);
    } else if (sh.sh_type == SHT_DYNSYM) {
      symtab_scns_.push_back(s.index);
    } else if (sh.sh_type == SHT_RELA) {
      rela_scns_.push_back(s.index);
    }
  }
  return {};
}

void ElfFile::tables() const {
  std::call_once(tables_once_, [this] { load_tables(); });
}

void ElfFile::load_tables() const {
  std::vector<Elf_Scn*> symtabs, relas;
  for (size_t i : symtab_scns_) symtabs.push_back(elf_getscn(E(elf_), i));
  for (size_t i : rela_scns_) relas.push_back(elf_getscn(E(elf_), i));
  // .symtab first, then .dynsym for what it adds (a stripped file has only .dynsym).
  // (address, name) pairs seen, the names in the image's string tables (a set of
  // strings made one allocation per function: 18% of ElfFile::open for 1,000).
  struct SeenHash {
    size_t operator()(const std::pair<uint64_t, std::string_view>& k) const {
      return std::hash<std::string_view>()(k.second) ^ (k.first * 0x9e3779b97f4a7c15ull);
    }
  };
  std::unordered_set<std::pair<uint64_t, std::string_view>, SeenHash> seen;
  std::map<size_t, std::vector<std::string>> dynsym_names;  // by section index
  for (Elf_Scn* scn : symtabs) {
    GElf_Shdr sh;
    gelf_getshdr(scn, &sh);
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data || sh.sh_entsize == 0) continue;
    const size_t n = sh.sh_size / sh.sh_entsize;
    const bool dyn = sh.sh_type == SHT_DYNSYM;
    std::vector<std::string>* names = dyn ? &dynsym_names[elf_ndxscn(scn)] : nullptr;
    if (names) names->reserve(n);
    seen.reserve(seen.size() + n);
    for (size_t i = 0; i < n; ++i) {
      GElf_Sym sym;
      if (!gelf_getsym(data, static_cast<int>(i), &sym)) continue;
      const char* nm = elf_strptr(E(elf_), sh.sh_link, sym.st_name);
      if (names) names->push_back(nm ? nm : "");
      if (GELF_ST_TYPE(sym.st_info) != STT_FUNC && GELF_ST_TYPE(sym.st_info) != STT_GNU_IFUNC)
        continue;
      if (sym.st_shndx == SHN_UNDEF || !nm || !*nm) continue;
      if (!seen.insert({sym.st_value, std::string_view(nm)}).second) continue;
      ElfSymbol s;
      s.name = nm;
      s.value = sym.st_value;
      s.size = sym.st_size;
      s.type = GELF_ST_TYPE(sym.st_info);
      s.bind = GELF_ST_BIND(sym.st_info);
      s.shndx = sym.st_shndx;
      s.dynamic = dyn;
      symbols_.push_back(std::move(s));
    }
  }
  // Aliases share an address and the first name listed there stands for the function
  // (sites are keyed by address). Prefer the name a user would type: global over local
  // (gcc -fPIC adds a local "fx.localalias" for a function's self-calls), no compiler
  // suffix, fewest leading underscores ("malloc" over "__libc_malloc"); stable otherwise.
  auto rank = [](const ElfSymbol& s) {
    const size_t underscores = std::min<size_t>(s.name.find_first_not_of('_'), 9);
    return (s.bind == STB_LOCAL ? 100 : 0) + (s.name.find('.') != std::string::npos ? 10 : 0) +
           static_cast<int>(underscores);
  };
  // Sorted through keys made once, the index last keeping the order stable: the rank's
  // string scans in every comparison, and moving the symbols about while sorting, were
  // half of this function's instructions for 1,000 functions.
  std::vector<std::tuple<uint64_t, int, size_t>> keys;
  keys.reserve(symbols_.size());
  for (size_t i = 0; i < symbols_.size(); ++i) keys.emplace_back(symbols_[i].value, rank(symbols_[i]), i);
  std::sort(keys.begin(), keys.end());
  // Position i takes the symbol at index get<2>(keys[i]): applied cycle by cycle in
  // place (a moved-from index is marked done), with no second vector of symbols.
  constexpr size_t kDone = ~size_t{0};
  for (size_t i = 0; i < keys.size(); ++i) {
    if (std::get<2>(keys[i]) == kDone || std::get<2>(keys[i]) == i) continue;
    ElfSymbol first = std::move(symbols_[i]);
    size_t j = i;
    for (size_t from = std::get<2>(keys[j]); from != i; j = from, from = std::get<2>(keys[j])) {
      symbols_[j] = std::move(symbols_[from]);
      std::get<2>(keys[j]) = kDone;
    }
    symbols_[j] = std::move(first);
    std::get<2>(keys[j]) = kDone;
  }

  for (Elf_Scn* scn : relas) {
    GElf_Shdr sh;
    gelf_getshdr(scn, &sh);
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data || sh.sh_entsize == 0) continue;
    // Only dynamic relocations describe the loaded image.
    if (!(sh.sh_flags & SHF_ALLOC)) continue;
    auto dn = dynsym_names.find(sh.sh_link);
    const size_t n = sh.sh_size / sh.sh_entsize;
    for (size_t i = 0; i < n; ++i) {
      GElf_Rela r;
      if (!gelf_getrela(data, static_cast<int>(i), &r)) continue;
      const auto type = GELF_R_TYPE(r.r_info);
      const auto symi = GELF_R_SYM(r.r_info);
      if (type == R_X86_64_RELATIVE) {
        relative_.emplace_back(r.r_offset, static_cast<uint64_t>(r.r_addend));
      } else if ((type == R_X86_64_GLOB_DAT || type == R_X86_64_JUMP_SLOT || type == R_X86_64_64) &&
                 dn != dynsym_names.end() && symi < dn->second.size()) {
        got_syms_[r.r_offset] = dn->second[symi];
      }
    }
  }
  // Usually sorted already (the linker sorts .rela.dyn); of two at one offset the last
  // listed counts, as the loader applies them in order.
  auto by_offset = [](const auto& a, const auto& b) { return a.first < b.first; };
  if (!std::is_sorted(relative_.begin(), relative_.end(), by_offset))
    std::stable_sort(relative_.begin(), relative_.end(), by_offset);
}

const std::vector<ElfSymbol>& ElfFile::symbols() const {
  tables();
  return symbols_;
}

const ElfSection* ElfFile::section(std::string_view name) const {
  for (const auto& s : sections_)
    if (s.name == name) return &s;
  return nullptr;
}

std::span<const uint8_t> ElfFile::section_data(const ElfSection& s) const {
  if (s.type == SHT_NOBITS) return {};
  return {image_ + s.offset, s.size};
}

std::span<const uint8_t> ElfFile::bytes_at(uint64_t vaddr, uint64_t len) const {
  for (const auto& s : sections_) {
    if (s.type != SHT_PROGBITS || !(s.flags & SHF_ALLOC)) continue;
    if (vaddr >= s.addr && vaddr < s.addr + s.size) {
      const uint64_t off = vaddr - s.addr;
      const uint64_t n = std::min<uint64_t>(len, s.size - off);
      return {image_ + s.offset + off, n};
    }
  }
  return {};
}

bool ElfFile::relative_reloc(uint64_t vaddr, uint64_t* addend) const {
  tables();
  auto it = std::upper_bound(relative_.begin(), relative_.end(), vaddr,
                             [](uint64_t v, const auto& r) { return v < r.first; });
  if (it == relative_.begin() || (--it)->first != vaddr) return false;
  *addend = it->second;
  return true;
}

std::string ElfFile::got_symbol(uint64_t slot) const {
  tables();
  auto it = got_syms_.find(slot);
  return it == got_syms_.end() ? std::string() : it->second;
}

bool ElfFile::imports(std::string_view name) const {
  tables();
  for (const auto& [slot, sym] : got_syms_)
    if (sym == name) return true;
  return false;
}

std::vector<uint64_t> ElfFile::address_table(std::string_view name) const {
  std::vector<uint64_t> out;
  for (const auto& s : sections_) {
    if (s.name != name) continue;  // a partially linked file may carry several
    auto data = section_data(s);
    for (size_t off = 0; off + 8 <= data.size(); off += 8) {
      uint64_t v;
      memcpy(&v, data.data() + off, 8);
      uint64_t add;
      if (relative_reloc(s.addr + off, &add)) v = add;
      if (v) out.push_back(v);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace utramp::os
