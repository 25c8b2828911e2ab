#include "ebpf/loader.hpp"

#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <elf.h>
#include <linux/bpf.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include "ebpf/check.hpp"
#include "ebpf/core.hpp"
#include "ebpf/engine.hpp"
#include "ebpf/libbpf.hpp"
#include "ebpf/object_dwarf.hpp"
#include "abi/signature.hpp"
#include "os/file.hpp"

namespace utramp::ebpf {

namespace {

constexpr uint32_t kR_BPF_64_64 = 1, kR_BPF_64_32 = 10;
constexpr uint16_t kEM_BPF = 247;

struct Sec {
  std::string name;
  const Elf64_Shdr* sh = nullptr;
  std::span<const uint8_t> data;  // empty for NOBITS
  enum class Role { ignore, text, prog, maps, data, rel } role = Role::ignore;
  int map = -1;  // data sections: index in Object::maps
};

struct Sym {
  std::string name;
  uint64_t value = 0, size = 0;
  uint16_t shndx = 0;
  uint8_t type = 0, bind = 0;
};


class Parser {
 public:
  Parser(std::span<const uint8_t> b, std::string name, const HelperTable& h)
      : bytes_(b), name_(std::move(name)), helpers_(h) {}
  Result<Object> run();

 private:
  Error err(Errc c, const std::string& what) const {
    return make_error(c, fmt::format("{}: {}", name_, what));
  }
  Result<void> read_elf();
  Result<void> classify();
  Result<void> read_maps();
  Result<void> read_kconfig();
  Result<void> read_programs();
  Result<void> read_prog_slots();
  Result<void> relocate(size_t sec, uint64_t lo, uint64_t hi, size_t base, LoadedProgram& p,
                        bool* needs_text);
  std::optional<Prototype> prototype(const std::string& fn) const;
  Result<void> read_core_relos();
  Result<void> read_line_info();
  void take_lines(size_t sec, uint64_t lo, uint64_t hi, size_t base, LoadedProgram& p) const;
  Result<void> parse_target(const Sec& s, LoadedProgram& p) const;
  Result<void> take_core(size_t sec, uint64_t lo, uint64_t hi, size_t base, LoadedProgram& p) const;
  std::vector<GlobalVar> data_vars(size_t sec, uint64_t size) const;

  std::span<const uint8_t> bytes_;
  std::string name_;
  const HelperTable& helpers_;
  std::vector<Sec> secs_;
  std::vector<Sym> syms_;
  std::map<size_t, size_t> rel_for_;  // section index -> its SHT_REL section index
  std::shared_ptr<btf> btf_;
  std::unique_ptr<ObjectDwarf> dwarf_;
  // CO-RE records by section index: (byte offset of the instruction, record).
  std::map<size_t, std::vector<std::pair<uint64_t, CoreRelo>>> core_;
  // Line info records by section index: (byte offset of the instruction, line).
  std::map<size_t, std::vector<std::pair<uint64_t, LineInfo>>> lines_;
  std::map<std::string, size_t> maps_by_sym_;  // .maps symbol -> map index
  std::map<size_t, uint32_t> values_off_;      // map index -> byte offset of its `values` member
  std::map<std::string, uint64_t> kconfig_off_;  // __kconfig extern -> offset in map kconfig_map_
  int kconfig_map_ = -1;
  int maps_sec_ = -1, text_sec_ = -1;
  Object obj_;
};

bool starts(const std::string& s, std::string_view p) { return s.rfind(p, 0) == 0; }

// What `extern ... __kconfig` variables read here. libbpf fills them from the running
// kernel's configuration; there is no kernel here, only what this runtime provides:
// usdt.bpf.h asks whether bpf_get_attach_cookie exists (it does: helpers.cpp), and
// then takes each USDT site's spec id from it.
constexpr std::pair<std::string_view, uint64_t> kKconfig[] = {{"LINUX_HAS_BPF_COOKIE", 1}};

// The program sections, as libbpf names them: "KIND" alone (bare: the attach spec
// names the function) or "KIND/PLACE". kprobe/kretprobe are uprobes here (there is no
// kernel): libbpf-tools programs name user functions so.
constexpr const char* kSectionForms =
    "fentry/FUNC, fexit/FUNC, fmod_ret/FUNC, uprobe/[BINARY:]FUNC[+OFFSET], uretprobe/[BINARY:]FUNC, "
    "kprobe/FUNC[+OFFSET], kretprobe/FUNC, usdt/BINARY:PROVIDER:NAME, or any of these kinds bare with --attach";

std::optional<ProgKind> section_kind(const std::string& name) {
  static const std::pair<std::string_view, ProgKind> kinds[] = {
      {"fentry", ProgKind::fentry},    {"fexit", ProgKind::fexit},         {"fmod_ret", ProgKind::fmod_ret},
      {"uprobe", ProgKind::uprobe},    {"uretprobe", ProgKind::uretprobe}, {"kprobe", ProgKind::uprobe},
      {"kretprobe", ProgKind::uretprobe}, {"usdt", ProgKind::usdt}};
  for (const auto& [k, kind] : kinds)
    if (name == k || (starts(name, k) && name.size() > k.size() && name[k.size()] == '/')) return kind;
  return std::nullopt;
}

struct Place {
  std::string binary, func;
  uint64_t offset = 0;
};

// A function's place: FUNC for tracing kinds; [BINARY:]FUNC[+OFFSET] for uprobes
// (BINARY only where `with_binary`; OFFSET decimal or 0x hex, none for a return probe).
Result<Place> parse_place(std::string rest, ProgKind kind, bool with_binary) {
  Place pl;
  if (kind == ProgKind::usdt) {
    // BINARY:PROVIDER:NAME, as libbpf's usdt/ sections: the binary may hold colons, the
    // provider and name do not. func is "PROVIDER:NAME".
    const size_t name_at = rest.rfind(':');
    const size_t prov_at = name_at == std::string::npos || name_at == 0 ? std::string::npos
                                                                        : rest.rfind(':', name_at - 1);
    if (prov_at == std::string::npos)
      return make_error(Errc::invalid_argument,
                        fmt::format("'{}' is not BINARY:PROVIDER:NAME (a USDT probe names its binary, provider and "
                                    "name)",
                                    rest));
    pl.binary = rest.substr(0, prov_at);
    const std::string provider = rest.substr(prov_at + 1, name_at - prov_at - 1), name = rest.substr(name_at + 1);
    if (pl.binary.empty() || provider.empty() || name.empty())
      return make_error(Errc::invalid_argument,
                        fmt::format("'{}': empty {} in BINARY:PROVIDER:NAME", rest,
                                    pl.binary.empty() ? "binary" : provider.empty() ? "provider" : "name"));
    pl.func = provider + ":" + name;
    return pl;
  }
  if (is_uprobe(kind)) {
    if (const size_t colon = rest.rfind(':'); with_binary && colon != std::string::npos) {
      pl.binary = rest.substr(0, colon);
      rest = rest.substr(colon + 1);
      if (pl.binary.empty()) return make_error(Errc::invalid_argument, "empty binary before ':' (a path, or *)");
    }
    if (const size_t plus = rest.rfind('+'); plus != std::string::npos) {
      const std::string off = rest.substr(plus + 1);
      rest = rest.substr(0, plus);
      char* end = nullptr;
      errno = 0;
      const unsigned long long v = off.empty() || off[0] == '-' ? 0 : std::strtoull(off.c_str(), &end, 0);
      if (off.empty() || off[0] == '-' || errno || !end || *end)
        return make_error(Errc::invalid_argument, fmt::format("offset '{}' is not a number (decimal or 0x hex)", off));
      pl.offset = v;
      if (kind == ProgKind::uretprobe && pl.offset != 0)
        return make_error(Errc::invalid_argument,
                          fmt::format("a return probe attaches at the function's entry, not at +{:#x}", pl.offset));
    }
  }
  if (rest.empty()) return make_error(Errc::invalid_argument, "no function named");
  pl.func = rest;
  return pl;
}

Result<void> Parser::read_elf() {
  if (bytes_.size() < sizeof(Elf64_Ehdr))
    return err(Errc::bad_format, fmt::format("truncated: {} bytes, an ELF header needs {}",
                                             bytes_.size(), sizeof(Elf64_Ehdr)));
  Elf64_Ehdr eh;
  std::memcpy(&eh, bytes_.data(), sizeof eh);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return err(Errc::bad_format, "not an ELF file");
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB)
    return err(Errc::bad_format, "not a 64-bit little-endian ELF (compile with -target bpf, or bpfel)");
  if (eh.e_machine != kEM_BPF)
    return err(Errc::bad_format, fmt::format("ELF machine {} is not BPF ({}): compile with clang -target bpf",
                                             eh.e_machine, kEM_BPF));
  if (eh.e_type != ET_REL) return err(Errc::bad_format, "not a relocatable object (clang -c)");
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0)
    return err(Errc::bad_format, "no section headers");
  if (eh.e_shoff > bytes_.size() || (bytes_.size() - eh.e_shoff) / sizeof(Elf64_Shdr) < eh.e_shnum)
    return err(Errc::bad_format, fmt::format("truncated: section headers at {:#x} ({} of them) past the "
                                             "end of the file ({} bytes)",
                                             eh.e_shoff, eh.e_shnum, bytes_.size()));
  if (eh.e_shoff % alignof(Elf64_Shdr)) return err(Errc::bad_format, "misaligned section headers");
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(bytes_.data() + eh.e_shoff);
  if (eh.e_shstrndx >= eh.e_shnum) return err(Errc::bad_format, "bad section name table index");
  auto sec_bytes = [&](const Elf64_Shdr& s, size_t i) -> Result<std::span<const uint8_t>> {
    if (s.sh_type == SHT_NOBITS) return std::span<const uint8_t>();
    if (s.sh_offset > bytes_.size() || s.sh_size > bytes_.size() - s.sh_offset)
      return err(Errc::bad_format, fmt::format("truncated: section {} at {:#x}+{:#x} past the end of the "
                                               "file ({} bytes)",
                                               i, s.sh_offset, s.sh_size, bytes_.size()));
    return bytes_.subspan(s.sh_offset, s.sh_size);
  };
  auto strtab = sec_bytes(sh[eh.e_shstrndx], eh.e_shstrndx);
  if (!strtab) return std::move(strtab).error();
  auto str_at = [](std::span<const uint8_t> tab, uint64_t off) -> std::optional<std::string> {
    if (off >= tab.size()) return std::nullopt;
    const auto* p = reinterpret_cast<const char*>(tab.data() + off);
    const size_t n = strnlen(p, tab.size() - off);
    if (off + n >= tab.size()) return std::nullopt;
    return std::string(p, n);
  };
  secs_.resize(eh.e_shnum);
  int symtab = -1;
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    auto n = str_at(*strtab, sh[i].sh_name);
    if (!n) return err(Errc::bad_format, fmt::format("section {}: name offset {:#x} outside the name table",
                                                     i, sh[i].sh_name));
    auto d = sec_bytes(sh[i], i);
    if (!d) return std::move(d).error();
    secs_[i] = Sec{*n, &sh[i], *d};
    if (sh[i].sh_type == SHT_SYMTAB) symtab = static_cast<int>(i);
  }
  if (symtab < 0) return err(Errc::bad_format, "no symbol table");
  const Elf64_Shdr& st = sh[symtab];
  if (st.sh_link >= eh.e_shnum) return err(Errc::bad_format, "symbol table: bad string table link");
  const auto names = secs_[st.sh_link].data;
  const auto sd = secs_[symtab].data;
  if (st.sh_entsize != sizeof(Elf64_Sym) || sd.size() % sizeof(Elf64_Sym))
    return err(Errc::bad_format, "symbol table: bad entry size");
  for (size_t k = 0; k < sd.size() / sizeof(Elf64_Sym); ++k) {
    Elf64_Sym s;
    std::memcpy(&s, sd.data() + k * sizeof s, sizeof s);
    auto n = str_at(names, s.st_name);
    if (!n) return err(Errc::bad_format, fmt::format("symbol {}: name offset {:#x} out of range", k, s.st_name));
    syms_.push_back({*n, s.st_value, s.st_size, s.st_shndx, static_cast<uint8_t>(ELF64_ST_TYPE(s.st_info)),
                     static_cast<uint8_t>(ELF64_ST_BIND(s.st_info))});
  }
  for (size_t i = 0; i < secs_.size(); ++i) {
    if (sh[i].sh_type != SHT_REL) continue;
    if (sh[i].sh_info >= secs_.size() || sh[i].sh_link != static_cast<uint32_t>(symtab))
      return err(Errc::bad_format, fmt::format("relocation section '{}': bad links", secs_[i].name));
    if (sh[i].sh_entsize != sizeof(Elf64_Rel) || secs_[i].data.size() % sizeof(Elf64_Rel))
      return err(Errc::bad_format, fmt::format("relocation section '{}': bad entry size", secs_[i].name));
    rel_for_[sh[i].sh_info] = i;
  }
  return {};
}

Result<void> Parser::classify() {
  for (size_t i = 1; i < secs_.size(); ++i) {
    Sec& s = secs_[i];
    const auto& n = s.name;
    const uint64_t f = s.sh->sh_flags;
    if (s.sh->sh_type == SHT_REL) s.role = Sec::Role::rel;
    else if (n == ".text") s.role = Sec::Role::text, text_sec_ = static_cast<int>(i);
    else if (section_kind(n))
      s.role = Sec::Role::prog;
    else if (n == ".maps") s.role = Sec::Role::maps, maps_sec_ = static_cast<int>(i);
    else if (n == "maps")
      return err(Errc::unsupported, "section 'maps': legacy map definitions are not supported; declare "
                                    "maps in SEC(\".maps\") with __uint/__type (BTF-defined maps)");
    else if (starts(n, ".data") || starts(n, ".rodata") || starts(n, ".bss")) s.role = Sec::Role::data;
    else if (n == "license" || n == "version" || starts(n, ".BTF") || starts(n, ".debug") ||
             n == ".llvm_addrsig" || n == ".symtab" || n == ".strtab" || n.empty())
      s.role = Sec::Role::ignore;
    else if (f & SHF_EXECINSTR)
      return err(Errc::unsupported,
                 fmt::format("section '{}': unknown program type (supported: {})", n, kSectionForms));
    else if (f & SHF_ALLOC)
      return err(Errc::unsupported, fmt::format("section '{}': unknown section", n));
    if ((s.role == Sec::Role::prog || s.role == Sec::Role::text) && s.data.size() % 8)
      return err(Errc::bad_format, fmt::format("section '{}': size {} is not a multiple of 8 (an "
                                               "instruction)",
                                               n, s.data.size()));
    if (n == "license") {
      obj_.license.assign(reinterpret_cast<const char*>(s.data.data()),
                          strnlen(reinterpret_cast<const char*>(s.data.data()), s.data.size()));
    }
  }
  return {};
}

// __uint(name, v) is `int (*name)[v]`: the number is the array's element count.
std::optional<uint32_t> btf_uint(const btf* b, uint32_t type_id) {
  const btf_type* t = libbpf().btf__type_by_id(b, type_id);
  if (!t || !btf_is_ptr(t)) return std::nullopt;
  const btf_type* a = libbpf().btf__type_by_id(b, t->type);
  if (!a || !btf_is_array(a)) return std::nullopt;
  return btf_array(a)->nelems;
}

// __type(name, T) is `T *name`: the size of T.
std::optional<uint32_t> btf_pointee_size(const btf* b, uint32_t type_id) {
  const btf_type* t = libbpf().btf__type_by_id(b, type_id);
  if (!t || !btf_is_ptr(t)) return std::nullopt;
  const long sz = libbpf().btf__resolve_size(b, t->type);
  if (sz < 0) return std::nullopt;
  return static_cast<uint32_t>(sz);
}

GlobalVar::Kind var_kind(const btf* b, uint32_t type_id) {
  const int id = libbpf().btf__resolve_type(b, type_id);  // through typedefs and qualifiers
  const btf_type* t = id > 0 ? libbpf().btf__type_by_id(b, static_cast<uint32_t>(id)) : nullptr;
  if (!t) return GlobalVar::Kind::bytes;
  if (btf_is_int(t)) {
    const uint8_t enc = btf_int_encoding(t);
    if (enc & BTF_INT_BOOL) return GlobalVar::Kind::boolean;
    return enc & BTF_INT_SIGNED ? GlobalVar::Kind::signed_int : GlobalVar::Kind::unsigned_int;
  }
  if (btf_is_enum(t)) return GlobalVar::Kind::signed_int;
  if (btf_is_ptr(t)) return GlobalVar::Kind::unsigned_int;
  if (btf_is_array(t)) {
    const int e = libbpf().btf__resolve_type(b, btf_array(t)->type);
    const btf_type* et = e > 0 ? libbpf().btf__type_by_id(b, static_cast<uint32_t>(e)) : nullptr;
    if (et && btf_is_int(et) && et->size == 1) return GlobalVar::Kind::chars;  // char[], u8[]
  }
  return GlobalVar::Kind::bytes;
}

struct DatasecVar {
  std::string name;
  uint32_t type = 0;    // the variable's type id
  long size = 0;        // its size, or < 0 when BTF cannot say
  uint64_t offset = 0;  // the DATASEC's offset
};

// The named variables of BTF DATASEC `sec` (none without BTF or such a DATASEC).
std::vector<DatasecVar> datasec_vars(const btf* b, const std::string& sec) {
  std::vector<DatasecVar> out;
  const int id = b ? libbpf().btf__find_by_name_kind(b, sec.c_str(), BTF_KIND_DATASEC) : -1;
  const btf_type* ds = id > 0 ? libbpf().btf__type_by_id(b, static_cast<uint32_t>(id)) : nullptr;
  if (!ds) return out;
  const btf_var_secinfo* vs = btf_var_secinfos(ds);
  for (uint16_t k = 0; k < btf_vlen(ds); ++k) {
    const btf_type* v = libbpf().btf__type_by_id(b, vs[k].type);
    if (!v || !btf_is_var(v)) continue;
    const char* n = libbpf().btf__name_by_offset(b, v->name_off);
    if (!n || !*n) continue;
    out.push_back({n, v->type, libbpf().btf__resolve_size(b, v->type), vs[k].offset});
  }
  return out;
}

// The named variables of data section `sec` (`size` bytes), from its BTF DATASEC. The
// offset comes from the variable's symbol (clang leaves DATASEC offsets for libbpf to
// fix up); a variable that does not fit in the section is left out, never trusted.
std::vector<GlobalVar> Parser::data_vars(size_t sec, uint64_t size) const {
  std::vector<GlobalVar> out;
  for (const DatasecVar& dv : datasec_vars(btf_.get(), secs_[sec].name)) {
    const long sz = dv.size;
    if (sz <= 0) continue;
    GlobalVar g;
    g.name = dv.name;
    uint64_t off = dv.offset;
    for (const Sym& y : syms_)
      if (y.shndx == sec && y.name == g.name) {
        off = y.value;
        break;
      }
    if (off > size || static_cast<uint64_t>(sz) > size - off) continue;
    g.offset = static_cast<uint32_t>(off);
    g.size = static_cast<uint32_t>(sz);
    g.kind = var_kind(btf_.get(), dv.type);
    g.type_id = dv.type;
    out.push_back(std::move(g));
  }
  std::sort(out.begin(), out.end(), [](const GlobalVar& a, const GlobalVar& b) { return a.offset < b.offset; });
  return out;
}

Result<void> Parser::read_maps() {
  // Global data sections first: a one-entry array each.
  for (size_t i = 1; i < secs_.size(); ++i) {
    Sec& s = secs_[i];
    if (s.role != Sec::Role::data) continue;
    const uint64_t size = s.sh->sh_size;
    if (size == 0) continue;
    if (size > (1u << 20))
      return err(Errc::too_big, fmt::format("section '{}': {} bytes of global data (at most 1 MiB)", s.name, size));
    MapSpec m;
    m.name = s.name;
    m.type = static_cast<uint32_t>(MapType::array);
    m.key_size = 4;
    m.value_size = static_cast<uint32_t>(size);
    m.max_entries = 1;
    m.global_data = true;
    m.readonly = starts(s.name, ".rodata");
    m.init.assign(s.data.begin(), s.data.end());
    m.vars = data_vars(i, size);
    s.map = static_cast<int>(obj_.maps.size());
    obj_.maps.push_back(std::move(m));
  }
  UTRAMP_TRY(read_kconfig());
  if (maps_sec_ < 0) return {};
  if (!btf_) return err(Errc::bad_format, "section '.maps' but no .BTF to describe its maps (compile with -g)");
  for (const Sym& sym : syms_) {
    if (sym.shndx != maps_sec_ || sym.type == STT_SECTION || sym.name.empty()) continue;
    const std::string where = fmt::format("map '{}'", sym.name);
    const int var = libbpf().btf__find_by_name_kind(btf_.get(), sym.name.c_str(), BTF_KIND_VAR);
    if (var < 0) return err(Errc::bad_format, where + ": no BTF variable of that name");
    const btf_type* v = libbpf().btf__type_by_id(btf_.get(), static_cast<uint32_t>(var));
    const btf_type* st = libbpf().btf__type_by_id(btf_.get(), v->type);
    while (st && (btf_is_typedef(st) || btf_is_mod(st))) st = libbpf().btf__type_by_id(btf_.get(), st->type);
    if (!st || !btf_is_struct(st)) return err(Errc::bad_format, where + ": its BTF type is not a struct");
    MapSpec m;
    m.name = sym.name;
    const btf_member* mem = btf_members(st);
    std::string unknown_field;  // reported after the type: an unsupported type is the real reason
    std::optional<uint32_t> values_off;  // __array(values, ...): a prog_array's initialiser
    for (uint16_t k = 0; k < btf_vlen(st); ++k) {
      const char* mn = libbpf().btf__name_by_offset(btf_.get(), mem[k].name_off);
      const std::string field = mn ? mn : "";
      auto num = [&](uint32_t* out) -> Result<void> {
        auto n = btf_uint(btf_.get(), mem[k].type);
        if (!n) return err(Errc::bad_format, fmt::format("{}: field '{}' is not __uint(...)", where, field));
        *out = *n;
        return {};
      };
      auto type_size = [&](uint32_t* out, uint32_t* type) -> Result<void> {
        auto n = btf_pointee_size(btf_.get(), mem[k].type);
        if (!n) return err(Errc::bad_format, fmt::format("{}: field '{}' is not __type(...)", where, field));
        *out = *n;
        *type = libbpf().btf__type_by_id(btf_.get(), mem[k].type)->type;  // the pointer's target
        return {};
      };
      if (field == "type") UTRAMP_TRY(num(&m.type));
      else if (field == "max_entries") UTRAMP_TRY(num(&m.max_entries));
      else if (field == "key_size") UTRAMP_TRY(num(&m.key_size));
      else if (field == "value_size") UTRAMP_TRY(num(&m.value_size));
      else if (field == "map_flags") UTRAMP_TRY(num(&m.flags));
      else if (field == "map_extra") {
        uint32_t x = 0;
        UTRAMP_TRY(num(&x));
        m.map_extra = x;
      }
      else if (field == "key") UTRAMP_TRY(type_size(&m.key_size, &m.key_type));
      else if (field == "value") UTRAMP_TRY(type_size(&m.value_size, &m.value_type));
      else if (field == "pinning" || field == "numa_node") continue;
      else if (field == "values") values_off = btf_member_bit_offset(st, k) / 8;
      else if (unknown_field.empty())
        unknown_field = field;
    }
    complete_map_spec(m);
    if (values_off && m.type != uint32_t(MapType::prog_array) && unknown_field.empty()) unknown_field = "values";
    if (values_off) values_off_[obj_.maps.size()] = *values_off;
    if (!unknown_field.empty() && map_type_supported(m.type))
      return err(Errc::unsupported, fmt::format("{}: unsupported map field '{}'", where, unknown_field));
    if (auto r = check_map_spec(m); !r) return err(r.error().code, r.error().message);
    maps_by_sym_[sym.name] = obj_.maps.size();
    obj_.maps.push_back(std::move(m));
  }
  return {};
}

// The `__kconfig` externs (BTF variables of DATASEC .kconfig, undefined symbols in the
// ELF): one read-only global-data map ".kconfig", each variable at its natural
// alignment, as libbpf lays them out. Known names get kKconfig's value, unknown weak
// ones 0 (libbpf's rule for a weak extern the kernel lacks); an unknown strong one is
// refused. Nothing of it is printed (no vars).
Result<void> Parser::read_kconfig() {
  std::vector<uint8_t> bytes;
  for (const DatasecVar& dv : datasec_vars(btf_.get(), ".kconfig")) {
    const char* n = dv.name.c_str();
    const long sz = dv.size;
    if (sz <= 0 || sz > 8)
      return err(Errc::unsupported, fmt::format("__kconfig extern '{}': {} bytes (only numbers of 1 to 8 bytes)", n, sz));
    const Sym* sym = nullptr;
    for (const Sym& y : syms_)
      if (y.shndx == SHN_UNDEF && y.name == n) sym = &y;
    if (!sym) continue;  // declared, never used
    std::optional<uint64_t> value;
    for (const auto& [name, val] : kKconfig)
      if (name == n) value = val;
    if (!value && sym->bind != STB_WEAK) {
      std::string have;
      for (const auto& [name, val] : kKconfig) have += fmt::format("{}{}", have.empty() ? "" : ", ", name);
      return err(Errc::unsupported,
                 fmt::format("__kconfig extern '{}' is not provided here (there is no kernel configuration; "
                             "provided: {}; a __weak extern reads 0)",
                             n, have));
    }
    const size_t off = (bytes.size() + static_cast<size_t>(sz) - 1) / static_cast<size_t>(sz) * static_cast<size_t>(sz);
    bytes.resize(off + static_cast<size_t>(sz), 0);
    const uint64_t val = value.value_or(0);
    std::memcpy(bytes.data() + off, &val, static_cast<size_t>(sz));  // little-endian: the low bytes
    kconfig_off_[n] = off;
  }
  if (bytes.empty()) return {};
  MapSpec m;
  m.name = ".kconfig";
  m.type = static_cast<uint32_t>(MapType::array);
  m.key_size = 4;
  m.value_size = static_cast<uint32_t>(bytes.size());
  m.max_entries = 1;
  m.global_data = true;
  m.readonly = true;
  m.init = std::move(bytes);
  kconfig_map_ = static_cast<int>(obj_.maps.size());
  obj_.maps.push_back(std::move(m));
  return {};
}

// Applies the relocations of section `sec` that fall in [lo, hi) (bytes) to p.insns,
// where the section's instruction at `lo` is p.insns[base].
Result<void> Parser::relocate(size_t sec, uint64_t lo, uint64_t hi, size_t base, LoadedProgram& p,
                              bool* needs_text) {
  auto it = rel_for_.find(sec);
  if (it == rel_for_.end()) return {};
  const auto rd = secs_[it->second].data;
  for (size_t k = 0; k < rd.size() / sizeof(Elf64_Rel); ++k) {
    Elf64_Rel r;
    std::memcpy(&r, rd.data() + k * sizeof r, sizeof r);
    if (r.r_offset < lo || r.r_offset >= hi) continue;
    const std::string where =
        fmt::format("section '{}' offset {:#x}", secs_[sec].name, r.r_offset);
    if (r.r_offset % 8)
      return err(Errc::bad_format, where + ": relocation not on an instruction boundary");
    const size_t at = base + (r.r_offset - lo) / 8;
    const uint32_t type = ELF64_R_TYPE(r.r_info);
    const size_t si = ELF64_R_SYM(r.r_info);
    if (si >= syms_.size()) return err(Errc::bad_format, fmt::format("{}: symbol {} out of range", where, si));
    const Sym& sym = syms_[si];
    Insn& n = p.insns[at];
    const std::string iwhere = fmt::format("{} (insn {} of {})", where, at, p.name);
    if (type == kR_BPF_64_64) {
      if (n.code != op::kLddw || at + 1 >= p.insns.size())
        return err(Errc::bad_format, iwhere + ": map relocation on an instruction that is not lddw");
      if (sym.shndx == SHN_UNDEF) {
        auto k = kconfig_off_.find(sym.name);
        if (k == kconfig_off_.end())
          return err(Errc::unsupported,
                     fmt::format("{}: extern '{}' is not supported (only __kconfig variables: {})", iwhere, sym.name,
                                 kKconfig[0].first));
        p.refs.push_back({static_cast<uint32_t>(at), static_cast<uint32_t>(kconfig_map_), true,
                          k->second + static_cast<uint32_t>(n.imm)});
        continue;
      }
      if (sym.shndx >= secs_.size())
        return err(Errc::bad_format, fmt::format("{}: symbol '{}' has no section", iwhere, sym.name));
      const Sec& ts = secs_[sym.shndx];
      if (static_cast<int>(sym.shndx) == maps_sec_) {
        auto m = maps_by_sym_.find(sym.name);
        if (m == maps_by_sym_.end())
          return err(Errc::bad_format, fmt::format("{}: '{}' is not a map", iwhere, sym.name));
        p.refs.push_back({static_cast<uint32_t>(at), static_cast<uint32_t>(m->second), false, 0});
      } else if (ts.role == Sec::Role::data) {
        const uint64_t off = sym.value + static_cast<uint32_t>(n.imm);
        if (ts.map < 0 || off > ts.sh->sh_size)
          return err(Errc::out_of_range, fmt::format("{}: offset {} outside section '{}'", iwhere, off, ts.name));
        p.refs.push_back({static_cast<uint32_t>(at), static_cast<uint32_t>(ts.map), true, off});
      } else {
        return err(Errc::unsupported, fmt::format("{}: reference to '{}' in section '{}' is not supported",
                                                  iwhere, sym.name.empty() ? ts.name : sym.name, ts.name));
      }
    } else if (type == kR_BPF_64_32) {
      if (n.code != op::kCallOp || n.src != op::kCallLocal)
        return err(Errc::bad_format, iwhere + ": call relocation on an instruction that is not a local call");
      // libbpf's rule: the callee is instruction sym.value / 8 + imm + 1 of the symbol's
      // section.
      const int64_t callee = static_cast<int64_t>(sym.value / 8) + n.imm + 1;
      if (sym.shndx == sec) {  // within the section: within this program's slice
        const int64_t in_prog = callee - static_cast<int64_t>(lo / 8);
        if (callee < static_cast<int64_t>(lo / 8) || callee >= static_cast<int64_t>(hi / 8))
          return err(Errc::out_of_range, fmt::format("{}: call to '{}' outside the program", iwhere, sym.name));
        n.imm = static_cast<int32_t>(in_prog + static_cast<int64_t>(base) - static_cast<int64_t>(at + 1));
        continue;
      }
      if (static_cast<int>(sym.shndx) != text_sec_)
        return err(Errc::unsupported, fmt::format("{}: call to '{}' outside .text", iwhere, sym.name));
      const int64_t text_n = static_cast<int64_t>(secs_[text_sec_].data.size() / 8);
      if (callee < 0 || callee >= text_n)
        return err(Errc::out_of_range, fmt::format("{}: callee {} outside .text (0..{})", iwhere, callee, text_n - 1));
      *needs_text = true;
      // The text is appended at the end: fixed once its position is known.
      n.imm = static_cast<int32_t>(callee);
      n.off = 0x7fff;  // marker, replaced before the check
    } else {
      return err(Errc::unsupported, fmt::format("{}: relocation type {}", where, type));
    }
  }
  return {};
}

std::optional<Prototype> Parser::prototype(const std::string& fn) const {
  if (dwarf_)
    if (auto p = dwarf_->prototype("____" + fn)) return p;
  if (!btf_) return std::nullopt;
  // BPF_PROG(name, args...) wraps `____name(ctx, args...)`: its BTF, when it was not
  // inlined away, has the typed arguments after ctx.
  const int id = libbpf().btf__find_by_name_kind(btf_.get(), ("____" + fn).c_str(), BTF_KIND_FUNC);
  if (id < 0) return std::nullopt;
  const btf_type* f = libbpf().btf__type_by_id(btf_.get(), static_cast<uint32_t>(id));
  const btf_type* proto = f ? libbpf().btf__type_by_id(btf_.get(), f->type) : nullptr;
  if (!proto || !btf_is_func_proto(proto) || btf_vlen(proto) < 1) return std::nullopt;
  Prototype p;
  const btf_param* ps = btf_params(proto);
  p.text = "(";
  for (uint16_t k = 1; k < btf_vlen(proto); ++k) {
    const long sz = libbpf().btf__resolve_size(btf_.get(), ps[k].type);
    if (sz < 0) return std::nullopt;
    p.arg_sizes.push_back(static_cast<uint32_t>(sz));
    const char* n = libbpf().btf__name_by_offset(btf_.get(), ps[k].name_off);
    p.text += fmt::format("{}{} bytes{}{}", k > 1 ? ", " : "", sz, n && *n ? " " : "", n ? n : "");
  }
  p.text += ")";
  return p;
}

// SEC("kind[/rest]"): the place, as section_kind() and parse_place() read it.
Result<void> Parser::parse_target(const Sec& s, LoadedProgram& p) const {
  p.kind = *section_kind(s.name);
  const size_t slash = s.name.find('/');
  if (slash == std::string::npos) return {};  // bare: apply_attach needs a spec for it
  const bool libbpf_uprobe = starts(s.name, "uprobe/") || starts(s.name, "uretprobe/") || starts(s.name, "usdt/");
  auto place = parse_place(s.name.substr(slash + 1), p.kind, libbpf_uprobe);
  if (!place) return err(place.error().code, fmt::format("section '{}': {}", s.name, place.error().message));
  p.binary = place->binary;
  p.target = place->func;
  p.offset = place->offset;
  return {};
}

// .BTF.ext's CO-RE records (struct bpf_core_relo of linux/bpf.h), by section. libbpf's
// btf_ext__new checks the header and the bounds of every subsection; it has no public
// accessor for the records, so they are read here from the subsection it checked.
Result<void> Parser::read_core_relos() {
  int ext = -1;
  for (size_t i = 1; i < secs_.size(); ++i)
    if (secs_[i].name == ".BTF.ext") ext = static_cast<int>(i);
  if (ext < 0) return {};
  if (!btf_) return err(Errc::bad_format, "section '.BTF.ext' but no .BTF");
  const auto d = secs_[ext].data;
  errno = 0;
  btf_ext* e = libbpf().btf_ext__new(d.data(), static_cast<uint32_t>(d.size()));
  if (!e) return err(Errc::bad_format, fmt::format("section '.BTF.ext': libbpf cannot parse it ({})", strerror(errno)));
  libbpf().btf_ext__free(e);
  auto u32_at = [&](size_t o) {
    uint32_t v;
    std::memcpy(&v, d.data() + o, 4);
    return v;
  };
  // Header: magic(2) version(1) flags(1) hdr_len, func_info off/len, line_info off/len,
  // core_relo off/len (u32 each; offsets from the end of the header).
  constexpr size_t kCoreLenEnd = 32;
  if (d.size() < 8) return {};
  const uint32_t hdr_len = u32_at(4);
  if (hdr_len < kCoreLenEnd || hdr_len > d.size()) return {};
  const uint64_t off = u32_at(24), len = u32_at(28);
  if (len == 0) return {};
  const auto bad = [&](const std::string& why) {
    return err(Errc::bad_format, "section '.BTF.ext': CO-RE records: " + why);
  };
  size_t pos = hdr_len + off;
  const size_t end = pos + len;
  if (end > d.size() || len < 4) return bad("outside the section");
  const uint32_t rec = u32_at(pos);
  pos += 4;
  if (rec < sizeof(bpf_core_relo)) return bad(fmt::format("record size {} < {}", rec, sizeof(bpf_core_relo)));
  while (pos < end) {
    if (end - pos < 8) return bad("truncated section header");
    const char* sn = libbpf().btf__name_by_offset(btf_.get(), u32_at(pos));
    const uint32_t n = u32_at(pos + 4);
    pos += 8;
    if ((end - pos) / rec < n) return bad(fmt::format("{} records past the end", n));
    size_t sec = 0;
    for (size_t i = 1; i < secs_.size() && sn; ++i)
      if (secs_[i].name == sn) sec = i;
    if (!sec) return bad(fmt::format("section '{}' not in the object", sn ? sn : "?"));
    for (uint32_t k = 0; k < n; ++k, pos += rec) {
      bpf_core_relo r;
      std::memcpy(&r, d.data() + pos, sizeof r);
      const char* a = libbpf().btf__name_by_offset(btf_.get(), r.access_str_off);
      if (!a || r.insn_off % 8) return bad(fmt::format("section '{}' offset {:#x}: bad record", sn, r.insn_off));
      core_[sec].push_back({r.insn_off, CoreRelo{0, static_cast<uint32_t>(r.kind), r.type_id, a}});
    }
  }
  return {};
}

// .BTF.ext's line info (struct bpf_line_info of linux/bpf.h: insn_off, file_name_off,
// line_off, line_col = line << 10 | column), by section, for the verifier's messages.
// Read from the subsection libbpf's btf_ext__new has checked (read_core_relos());
// records that make no sense are skipped: line info only decorates messages.
Result<void> Parser::read_line_info() {
  int ext = -1;
  for (size_t i = 1; i < secs_.size(); ++i)
    if (secs_[i].name == ".BTF.ext") ext = static_cast<int>(i);
  if (ext < 0 || !btf_) return {};
  const auto d = secs_[ext].data;
  auto u32_at = [&](size_t o) {
    uint32_t v;
    std::memcpy(&v, d.data() + o, 4);
    return v;
  };
  constexpr size_t kLineLenEnd = 24;  // header: ... line_info off (16), len (20)
  if (d.size() < 8) return {};
  const uint32_t hdr_len = u32_at(4);
  if (hdr_len < kLineLenEnd || hdr_len > d.size()) return {};
  const uint64_t off = u32_at(16), len = u32_at(20);
  size_t pos = hdr_len + off;
  const size_t end = pos + len;
  if (len < 4 || end > d.size()) return {};
  const uint32_t rec = u32_at(pos);
  pos += 4;
  if (rec < 16) return {};
  auto trim = [](std::string t) {
    t.erase(0, t.find_first_not_of(" \t"));
    t.erase(t.find_last_not_of(" \t\r\n") + 1);
    return t;
  };
  while (end - pos >= 8) {
    const char* sn = libbpf().btf__name_by_offset(btf_.get(), u32_at(pos));
    const uint32_t n = u32_at(pos + 4);
    pos += 8;
    if ((end - pos) / rec < n) return {};
    size_t sec = 0;
    for (size_t i = 1; i < secs_.size() && sn; ++i)
      if (secs_[i].name == sn) sec = i;
    for (uint32_t k = 0; k < n; ++k, pos += rec) {
      if (!sec) continue;
      LineInfo l;
      const char* file = libbpf().btf__name_by_offset(btf_.get(), u32_at(pos + 4));
      const char* text = libbpf().btf__name_by_offset(btf_.get(), u32_at(pos + 8));
      l.file = file ? file : "";
      l.file = l.file.substr(l.file.rfind('/') + 1);
      l.text = text ? trim(text) : "";
      l.line = u32_at(pos + 12) >> 10;
      l.col = u32_at(pos + 12) & 0x3ff;
      lines_[sec].push_back({u32_at(pos), std::move(l)});
    }
  }
  return {};
}

void Parser::take_lines(size_t sec, uint64_t lo, uint64_t hi, size_t base, LoadedProgram& p) const {
  auto it = lines_.find(sec);
  if (it == lines_.end()) return;
  for (const auto& [off, l] : it->second) {
    if (off < lo || off >= hi || off % 8) continue;
    LineInfo x = l;
    x.insn = static_cast<uint32_t>(base + (off - lo) / 8);
    p.lines.push_back(std::move(x));
  }
}

// The CO-RE records of section `sec` in [lo, hi) (bytes), on p.insns from `base`.
Result<void> Parser::take_core(size_t sec, uint64_t lo, uint64_t hi, size_t base, LoadedProgram& p) const {
  auto it = core_.find(sec);
  if (it == core_.end()) return {};
  for (const auto& [off, r] : it->second) {
    if (off < lo || off >= hi) continue;
    CoreRelo c = r;
    c.insn = static_cast<uint32_t>(base + (off - lo) / 8);
    if (!core_kind_supported(c.kind))
      return err(Errc::unsupported,
                 fmt::format("program '{}' insn {} (section '{}' offset {:#x}): CO-RE relocation {} (kind {}) is "
                             "not supported (supported: {})",
                             p.name, c.insn, secs_[sec].name, off, core_kind_name(c.kind), c.kind,
                             core_supported_kinds()));
    p.core.push_back(std::move(c));
  }
  return {};
}

Result<void> Parser::read_programs() {
  for (size_t i = 1; i < secs_.size(); ++i) {
    const Sec& s = secs_[i];
    if (s.role != Sec::Role::prog) continue;
    std::vector<const Sym*> fns;
    for (const Sym& sym : syms_)
      if (sym.shndx == i && sym.type == STT_FUNC && sym.bind == STB_GLOBAL) fns.push_back(&sym);
    if (fns.empty()) return err(Errc::bad_format, fmt::format("section '{}': no global function", s.name));
    for (const Sym* fs : fns) {
      if (fs->value % 8 || fs->size % 8 || fs->size == 0 || fs->value > s.data.size() ||
          fs->size > s.data.size() - fs->value)
        return err(Errc::bad_format, fmt::format("program '{}': bounds {:#x}+{:#x} outside section '{}' ({} "
                                                 "bytes)",
                                                 fs->name, fs->value, fs->size, s.name, s.data.size()));
      LoadedProgram p;
      p.name = fs->name;
      p.section = s.name;
      UTRAMP_TRY(parse_target(s, p));
      p.insns = insns_from_bytes(s.data.subspan(fs->value, fs->size));
      bool needs_text = false;
      UTRAMP_TRY(relocate(i, fs->value, fs->value + fs->size, 0, p, &needs_text));
      UTRAMP_TRY(take_core(i, fs->value, fs->value + fs->size, 0, p));
      take_lines(i, fs->value, fs->value + fs->size, 0, p);
      if (needs_text) {
        const size_t tbase = p.insns.size();
        const auto text = insns_from_bytes(secs_[text_sec_].data);
        for (size_t k = 0; k < tbase; ++k) {
          Insn& n = p.insns[k];
          if (n.code == op::kCallOp && n.src == op::kCallLocal && n.off == 0x7fff) {
            n.imm = static_cast<int32_t>(tbase + n.imm) - static_cast<int32_t>(k + 1);
            n.off = 0;
          }
        }
        p.insns.insert(p.insns.end(), text.begin(), text.end());
        bool unused = false;
        UTRAMP_TRY(relocate(static_cast<size_t>(text_sec_), 0, secs_[text_sec_].data.size(), tbase, p, &unused));
        UTRAMP_TRY(take_core(static_cast<size_t>(text_sec_), 0, secs_[text_sec_].data.size(), tbase, p));
        take_lines(static_cast<size_t>(text_sec_), 0, secs_[text_sec_].data.size(), tbase, p);
      }
      std::stable_sort(p.lines.begin(), p.lines.end(),
                       [](const LineInfo& a, const LineInfo& b) { return a.insn < b.insn; });
      // The structural check, with placeholder addresses in the map references.
      std::vector<Insn> probe = p.insns;
      for (const MapRef& r : p.refs) {
        probe[r.insn].src = 0;
        probe[r.insn].imm = 0x1000;
        probe[r.insn + 1].imm = 0;
      }
      if (auto c = check_program(probe, &helpers_); !c)
        return err(c.error().code, fmt::format("program '{}' (section '{}'): {}", p.name, p.section,
                                               c.error().message));
      p.proto = prototype(p.name);
      obj_.programs.push_back(std::move(p));
    }
  }
  if (obj_.programs.empty())
    return err(Errc::not_found, fmt::format("no programs (sections {})", kSectionForms));
  return {};
}

// A prog_array's `.values = { [i] = &prog }` is, as libbpf reads it, a relocation in
// .rel.maps at the map's symbol + the `values` member + 8 * i, against the program's
// function symbol. Then the tail-call rule of loader.hpp: pt_regs contexts only.
Result<void> Parser::read_prog_slots() {
  if (maps_sec_ >= 0) {
    if (auto it = rel_for_.find(static_cast<size_t>(maps_sec_)); it != rel_for_.end()) {
      const auto rd = secs_[it->second].data;
      for (size_t k = 0; k < rd.size() / sizeof(Elf64_Rel); ++k) {
        Elf64_Rel r;
        std::memcpy(&r, rd.data() + k * sizeof r, sizeof r);
        const std::string where = fmt::format("section '.maps' offset {:#x}", r.r_offset);
        const Sym* map_sym = nullptr;
        for (const Sym& m : syms_)
          if (m.shndx == maps_sec_ && m.type != STT_SECTION && !m.name.empty() && r.r_offset >= m.value &&
              r.r_offset < m.value + m.size)
            map_sym = &m;
        if (!map_sym) return err(Errc::bad_format, where + ": a relocation inside no map");
        const size_t mi = maps_by_sym_.at(map_sym->name);
        MapSpec& m = obj_.maps[mi];
        auto vo = values_off_.find(mi);
        if (m.type != uint32_t(MapType::prog_array) || vo == values_off_.end() ||
            r.r_offset < map_sym->value + vo->second)
          return err(Errc::unsupported, fmt::format("map '{}' ({}): {}: an initialiser that is not a prog_array's "
                                                    "__array(values, ...) is not supported",
                                                    m.name, map_type_name(m.type), where));
        const uint64_t at = r.r_offset - map_sym->value - vo->second;
        if (at % 8 || at / 8 >= m.max_entries)
          return err(Errc::bad_format, fmt::format("map '{}': {}: slot {} of the initialiser is beyond its {} "
                                                   "entries",
                                                   m.name, where, at / 8, m.max_entries));
        const size_t si = ELF64_R_SYM(r.r_info);
        if (si >= syms_.size()) return err(Errc::bad_format, fmt::format("{}: symbol {} out of range", where, si));
        const std::string& fn = syms_[si].name;
        auto p = std::find_if(obj_.programs.begin(), obj_.programs.end(),
                              [&](const LoadedProgram& lp) { return lp.name == fn; });
        if (p == obj_.programs.end())
          return err(Errc::invalid_argument, fmt::format("map '{}': slot {} is '{}', which is not a program of the "
                                                         "object",
                                                         m.name, at / 8, fn));
        m.prog_slots.push_back({static_cast<uint32_t>(at / 8), static_cast<uint32_t>(p - obj_.programs.begin()), fn});
      }
    }
  }
  for (size_t i = 0; i < obj_.programs.size(); ++i) {
    const LoadedProgram& p = obj_.programs[i];
    const bool slot = in_prog_array(obj_, i), calls = calls_helper(p, kTailCallHelper);
    if ((slot || calls) && !is_uprobe(p.kind))
      return err(Errc::unsupported,
                 fmt::format("program '{}' (section '{}') {}: tail calls are supported between programs of the "
                             "struct pt_regs context only (uprobe, uretprobe, usdt, kprobe sections), whose "
                             "context is the same for every program; a {} program's depends on its function",
                             p.name, p.section, slot ? "is in a prog_array" : "calls bpf_tail_call",
                             prog_kind_name(p.kind)));
  }
  return {};
}

Result<Object> Parser::run() {
  UTRAMP_TRY(load_libbpf());
  // libbpf would print its own diagnostics on stderr; ours carry the evidence.
  static const bool quiet = [] {
    libbpf().libbpf_set_print(nullptr);
    return true;
  }();
  (void)quiet;
  UTRAMP_TRY(read_elf());
  UTRAMP_TRY(classify());
  for (size_t i = 1; i < secs_.size(); ++i) {
    if (secs_[i].name != ".BTF") continue;
    errno = 0;
    btf* b = libbpf().btf__new(secs_[i].data.data(), static_cast<uint32_t>(secs_[i].data.size()));
    if (!b) return err(Errc::bad_format, fmt::format("section '.BTF': libbpf cannot parse it ({})", strerror(errno)));
    btf_.reset(b, libbpf().btf__free);
  }
  // The object's DWARF gives BPF_PROG's prototypes; without it (no -g) BTF does.
  if (auto d = ObjectDwarf::open(bytes_); d) dwarf_ = std::move(*d);
  UTRAMP_TRY(read_core_relos());
  UTRAMP_TRY(read_line_info());
  UTRAMP_TRY(read_maps());
  UTRAMP_TRY(read_programs());
  UTRAMP_TRY(read_prog_slots());
  obj_.path = name_;
  obj_.local_btf = btf_;
  return std::move(obj_);
}

}  // namespace

const char* prog_kind_name(ProgKind k) {
  switch (k) {
    case ProgKind::fentry: return "fentry";
    case ProgKind::fexit: return "fexit";
    case ProgKind::fmod_ret: return "fmod_ret";
    case ProgKind::uprobe: return "uprobe";
    case ProgKind::uretprobe: return "uretprobe";
    case ProgKind::usdt: return "usdt";
  }
  return "?";
}

bool is_uprobe(ProgKind k) { return k == ProgKind::uprobe || k == ProgKind::uretprobe || k == ProgKind::usdt; }

bool calls_helper(const LoadedProgram& p, int32_t id) {
  for (size_t i = 0; i < p.insns.size(); ++i) {
    const Insn& n = p.insns[i];
    if (n.code == op::kCallOp && n.src == op::kCallHelper && n.imm == id) return true;
    if (n.code == op::kLddw) ++i;  // lddw's second half is no instruction
  }
  return false;
}

Result<void> check_override(const LoadedProgram& p) {
  if (!calls_helper(p, kOverrideReturnHelper)) return {};
  auto refuse = [&](const std::string& why) {
    return make_error(Errc::unsupported,
                      fmt::format("program '{}' (section '{}') calls bpf_override_return (helper 58), which only a "
                                  "uprobe at a function's entry may: {}",
                                  p.name, p.section, why));
  };
  switch (p.kind) {
    case ProgKind::uprobe:
      if (p.offset != 0)
        return refuse(fmt::format("this one is at {}+{:#x}, where the return address is no longer at the stack "
                                  "pointer (attach it at {})",
                                  p.target, p.offset, p.target));
      return {};
    case ProgKind::uretprobe:
      return refuse("a uretprobe runs after the function returned, when there is nothing left to skip (to change "
                    "the value it returns, attach an fmod_ret program)");
    case ProgKind::fentry:
    case ProgKind::fexit:
      return refuse(fmt::format("{} programs cannot change what the function does (attach an fmod_ret program, "
                                "or a uprobe at the entry)",
                                prog_kind_name(p.kind)));
    case ProgKind::fmod_ret:
      return refuse("an fmod_ret program returns the value itself: return it instead of calling the helper");
    case ProgKind::usdt:
      return refuse("a USDT probe point lies inside its function, where the return address is no longer at the "
                    "stack pointer (attach a uprobe at the function's entry)");
  }
  return {};
}

Result<AttachSpec> parse_attach_spec(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return make_error(Errc::invalid_argument,
                      fmt::format("--attach '{}': {} (forms: PROG=uprobe:BINARY:FUNC[+OFFSET], "
                                  "PROG=uretprobe:BINARY:FUNC, PROG=usdt:BINARY:PROVIDER:NAME, PROG=fentry:FUNC, "
                                  "PROG=fexit:FUNC, PROG=fmod_ret:FUNC)",
                                  text, why));
  };
  AttachSpec a;
  a.text = text;
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) return bad("no program named before '='");
  a.prog = text.substr(0, eq);
  const std::string spec = text.substr(eq + 1);
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  static const std::pair<std::string_view, ProgKind> kinds[] = {
      {"uprobe", ProgKind::uprobe}, {"uretprobe", ProgKind::uretprobe}, {"usdt", ProgKind::usdt},
      {"fentry", ProgKind::fentry}, {"fexit", ProgKind::fexit},         {"fmod_ret", ProgKind::fmod_ret}};
  bool known = false;
  for (const auto& [k, v] : kinds)
    if (kind == k) a.kind = v, known = true;
  if (!known) return bad(fmt::format("unknown kind '{}'", kind));
  if (colon == std::string::npos) return bad("no function named");
  const std::string rest = spec.substr(colon + 1);
  if (is_uprobe(a.kind) && a.kind != ProgKind::usdt && rest.rfind(':') == std::string::npos)
    return bad("a uprobe names its binary: BINARY:FUNC (the traced program's path or name, or /proc/self/exe)");
  auto pl = parse_place(rest, a.kind, true);
  if (!pl) return bad(pl.error().message);
  a.binary = pl->binary;
  a.func = pl->func;
  a.offset = pl->offset;
  return a;
}

Result<void> apply_attach(Object& obj, std::span<const AttachSpec> specs) {
  std::map<std::string, const AttachSpec*> by_prog;
  for (const AttachSpec& a : specs) {
    auto it = std::find_if(obj.programs.begin(), obj.programs.end(),
                           [&](const LoadedProgram& p) { return p.name == a.prog; });
    if (it == obj.programs.end()) {
      std::string names;
      for (const auto& p : obj.programs) names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
      return make_error(Errc::not_found,
                        fmt::format("--attach '{}': no program '{}' in {} (its programs: {})", a.text, a.prog,
                                    obj.path, names));
    }
    if (!by_prog.emplace(a.prog, &a).second)
      return make_error(Errc::invalid_argument,
                        fmt::format("--attach '{}': program '{}' is attached by '{}' already (one spec a program)",
                                    a.text, a.prog, by_prog[a.prog]->text));
    LoadedProgram& p = *it;
    // The context is the section's: pt_regs for the uprobe family, the tracing ctx of
    // exactly this kind otherwise.
    if (is_uprobe(p.kind) != is_uprobe(a.kind) || (!is_uprobe(p.kind) && p.kind != a.kind))
      return make_error(Errc::invalid_argument,
                        fmt::format("--attach '{}': program '{}' (section '{}') is a {} program, it cannot be "
                                    "attached as {}{}",
                                    a.text, p.name, p.section, prog_kind_name(p.kind), prog_kind_name(a.kind),
                                    is_uprobe(p.kind) ? " (uprobe, uretprobe or usdt: its context is struct pt_regs)"
                                                      : fmt::format(" (only {}: its context is fixed by its section)",
                                                                    prog_kind_name(p.kind))));
    p.kind = a.kind;
    p.binary = a.binary;
    p.target = a.func;
    p.offset = a.offset;
  }
  for (size_t i = 0; i < obj.programs.size(); ++i) {
    const LoadedProgram& p = obj.programs[i];
    if (!p.target.empty() || tail_call_only(obj, i)) continue;
    const bool probe = is_uprobe(p.kind);
    if (p.kind == ProgKind::usdt)
      return make_error(Errc::invalid_argument,
                        fmt::format("program '{}' (section '{}') names no USDT probe: attach it with --attach "
                                    "{}=usdt:BINARY:PROVIDER:NAME",
                                    p.name, p.section, p.name));
    return make_error(Errc::invalid_argument,
                      fmt::format("program '{}' (section '{}') names no function: attach it with --attach "
                                  "{}={}:{}FUNC{}",
                                  p.name, p.section, p.name, prog_kind_name(p.kind), probe ? "BINARY:" : "",
                                  p.kind == ProgKind::uprobe ? "[+OFFSET]" : ""));
  }
  return {};
}

bool in_prog_array(const Object& obj, size_t prog) {
  for (const MapSpec& m : obj.maps)
    for (const MapSpec::ProgSlotInit& s : m.prog_slots)
      if (s.prog == prog) return true;
  return false;
}

bool tail_call_only(const Object& obj, size_t prog) {
  return obj.programs[prog].target.empty() && in_prog_array(obj, prog);
}

Result<Object> parse_object(std::span<const uint8_t> bytes, const std::string& name, const HelperTable& helpers) {
  return Parser(bytes, name, helpers).run();
}

Result<Object> load_object_file(const std::string& path, const HelperTable& helpers) {
  // clang's eBPF objects are kilobytes; 256 MiB keeps a wrong file from eating memory.
  auto bytes = os::read_regular(path, uint64_t{256} << 20);
  if (!bytes) return std::move(bytes).error();
  return parse_object(*bytes, path, helpers);
}

void resolve(LoadedProgram& p, std::span<const uint64_t> header_addr, std::span<const uint64_t> value_addr) {
  for (const MapRef& r : p.refs) {
    const uint64_t a = r.value ? value_addr[r.map] + r.offset : header_addr[r.map];
    p.insns[r.insn].src = 0;
    p.insns[r.insn].imm = static_cast<int32_t>(static_cast<uint32_t>(a));
    p.insns[r.insn + 1].imm = static_cast<int32_t>(static_cast<uint32_t>(a >> 32));
  }
}

void program_options(const Object& obj, const LoadedProgram& p, const abi::Signature& sig, ExecOptions& o) {
  if (is_uprobe(p.kind)) {
    o.ctx_kind = CtxKind::pt_regs;
    o.ctx_size = kPtRegsSize;
    o.ctx_what = fmt::format("struct pt_regs at {} of {} ({} bytes)",
                             p.kind == ProgKind::uprobe ? "a probe"
                             : p.kind == ProgKind::usdt ? "a USDT probe"
                                                        : "a return",
                             p.target, kPtRegsSize);
  } else {
    const int args = sig.arg_slots();
    const int ret = p.kind == ProgKind::fentry ? 0 : std::max(1, sig.ret.slots());
    o.ctx_kind = CtxKind::tracing;
    o.ctx_size = 8 * static_cast<uint64_t>(args + ret);
    o.ctx_what = fmt::format("the tracing context of {} ({} argument word{}{}{}: {} bytes)", p.target, args,
                             args == 1 ? "" : "s", ret ? ", then the return value" : "",
                             sig.known ? "" : "; the signature is unknown: six assumed", o.ctx_size);
  }
  o.ctx_writable = false;
  o.maps = obj.maps;
  o.refs = p.refs;
  o.lines = p.lines;
}

Result<void> check_prototype(const LoadedProgram& p, const abi::Signature& sig) {
  // BPF_UPROBE's arguments are registers read from pt_regs, as in the kernel: unchecked.
  if (!p.proto || !sig.known || is_uprobe(p.kind)) return {};
  std::vector<uint32_t> want;
  for (const auto& a : sig.args) want.push_back(a.kind == abi::ArgType::Kind::memory ? 8 : a.size);
  std::vector<uint32_t> have = p.proto->arg_sizes;
  if (p.kind != ProgKind::fentry && have.size() == want.size() + 1 && sig.ret.kind != abi::RetType::Kind::none) {
    const uint32_t rs = sig.ret.kind == abi::RetType::Kind::memory ? 8 : sig.ret.size;
    if (have.back() != rs)
      return make_error(Errc::invalid_argument,
                        fmt::format("program '{}' {}: return value of {} bytes, but {} returns {} ({})",
                                    p.name, p.proto->text, have.back(), p.target, rs, sig.describe()));
    have.pop_back();
  }
  bool ok = have.size() == want.size();
  for (size_t i = 0; ok && i < have.size(); ++i) ok = have[i] == want[i];
  if (!ok)
    return make_error(Errc::invalid_argument,
                      fmt::format("program '{}' declares {} but {} is {} ({} argument{})", p.name,
                                  p.proto->text, p.target, sig.describe(), want.size(),
                                  want.size() == 1 ? "" : "s"));
  return {};
}

}  // namespace utramp::ebpf
