#include "ebpf/usdt.hpp"

#include <bpf/btf.h>
#include <elf.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "ebpf/libbpf.hpp"
#include "ebpf/loader.hpp"
#include "os/elf_file.hpp"

namespace utramp::ebpf {

namespace {

constexpr uint32_t kNtStapsdt = 3;
constexpr std::string_view kSpecsMap = "__bpf_usdt_specs", kIpMap = "__bpf_usdt_ip_to_spec_id";

// x86-64 register names of every width, to the struct pt_regs field that holds them
// (as libbpf's usdt.c maps them). The high bytes (%ah ...) are not a field's low bits:
// not here, so refused.
struct RegName {
  std::string_view names[4];
  std::string_view field;
};
constexpr RegName kRegs[] = {
    {{"rip", "eip", "", ""}, "ip"},     {{"rax", "eax", "ax", "al"}, "ax"},     {{"rbx", "ebx", "bx", "bl"}, "bx"},
    {{"rcx", "ecx", "cx", "cl"}, "cx"}, {{"rdx", "edx", "dx", "dl"}, "dx"},     {{"rsi", "esi", "si", "sil"}, "si"},
    {{"rdi", "edi", "di", "dil"}, "di"}, {{"rbp", "ebp", "bp", "bpl"}, "bp"},  {{"rsp", "esp", "sp", "spl"}, "sp"},
    {{"r8", "r8d", "r8w", "r8b"}, "r8"}, {{"r9", "r9d", "r9w", "r9b"}, "r9"},   {{"r10", "r10d", "r10w", "r10b"}, "r10"},
    {{"r11", "r11d", "r11w", "r11b"}, "r11"}, {{"r12", "r12d", "r12w", "r12b"}, "r12"},
    {{"r13", "r13d", "r13w", "r13b"}, "r13"}, {{"r14", "r14d", "r14w", "r14b"}, "r14"},
    {{"r15", "r15d", "r15w", "r15b"}, "r15"},
};

std::string_view reg_field(std::string_view name) {
  for (const RegName& r : kRegs)
    for (std::string_view n : r.names)
      if (!n.empty() && n == name) return r.field;
  return {};
}

bool parse_int(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  bool neg = false;
  if (s[0] == '-' || s[0] == '+') {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  }
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (ec != std::errc() || p != s.data() + s.size()) return false;
  *out = static_cast<int64_t>(neg ? 0 - v : v);  // two's complement: $-7, or a u64 constant
  return true;
}

Result<std::string> reg_of(std::string_view operand, std::string_view text) {
  if (operand.empty() || operand[0] != '%')
    return make_error(Errc::invalid_argument, fmt::format("'{}': expected a register (%name)", text));
  const std::string_view f = reg_field(operand.substr(1));
  if (f.empty())
    return make_error(Errc::unsupported,
                      fmt::format("'{}': register {} is not one of struct pt_regs (general-purpose registers only)",
                                  text, operand));
  return std::string(f);
}

uint64_t u64_at(std::span<const uint8_t> d, size_t o) {
  uint64_t v;
  std::memcpy(&v, d.data() + o, 8);
  return v;
}

// The byte offset of member `name` of BTF struct `type_name`, or -1 (no such struct or
// member), -2 when the member is a bitfield.
int64_t member_offset(const btf* b, const char* type_name, std::string_view name) {
  const int id = libbpf().btf__find_by_name_kind(b, type_name, BTF_KIND_STRUCT);
  if (id < 0) return -1;
  const btf_type* t = libbpf().btf__type_by_id(b, static_cast<uint32_t>(id));
  const btf_member* m = btf_members(t);
  for (uint16_t k = 0; k < btf_vlen(t); ++k) {
    const char* n = libbpf().btf__name_by_offset(b, m[k].name_off);
    if (!n || name != n) continue;
    if (btf_member_bitfield_size(t, k)) return -2;
    return btf_member_bit_offset(t, k) / 8;
  }
  return -1;
}

// The object's usdt.bpf.h is the layout encode_usdt_spec() writes (libbpf 1.1's).
Result<void> check_layout(const Object& obj, const MapSpec& specs) {
  const auto bad = [&](const std::string& why) {
    return make_error(Errc::unsupported,
                      fmt::format("{}: map '{}': {}: utramp writes libbpf 1.1's struct __bpf_usdt_spec (Debian 12's "
                                  "usdt.bpf.h; {} bytes: 12 x {{val_off, arg_type, reg_off, arg_signed, "
                                  "arg_bitshift}}, usdt_cookie, arg_cnt)",
                                  obj.path, kSpecsMap, why, kUsdtSpecSize));
  };
  if (specs.type != uint32_t(MapType::array) || specs.key_size != 4)
    return bad(fmt::format("a {} map with {}-byte keys, not an array", map_type_name(specs.type), specs.key_size));
  if (specs.value_size != kUsdtSpecSize) return bad(fmt::format("values of {} bytes", specs.value_size));
  const btf* b = obj.local_btf.get();
  if (!b) return {};
  static const std::pair<const char*, std::pair<std::string_view, int64_t>> kFields[] = {
      {"__bpf_usdt_arg_spec", {"val_off", 0}},       {"__bpf_usdt_arg_spec", {"arg_type", 8}},
      {"__bpf_usdt_arg_spec", {"reg_off", 12}},      {"__bpf_usdt_arg_spec", {"arg_signed", 14}},
      {"__bpf_usdt_arg_spec", {"arg_bitshift", 15}}, {"__bpf_usdt_spec", {"args", 0}},
      {"__bpf_usdt_spec", {"usdt_cookie", 192}},     {"__bpf_usdt_spec", {"arg_cnt", 200}}};
  for (const auto& [type, f] : kFields) {
    if (libbpf().btf__find_by_name_kind(b, type, BTF_KIND_STRUCT) < 0) continue;  // types dropped: the size decides
    const int64_t at = member_offset(b, type, f.first);
    if (at != f.second)
      return bad(fmt::format("struct {}'s '{}' is {} (expected at byte {})", type, f.first,
                             at == -1 ? std::string("missing") : at == -2 ? std::string("a bitfield")
                                                                         : fmt::format("at byte {}", at),
                             f.second));
  }
  return {};
}

}  // namespace

UsdtName split_usdt_target(std::string_view target) {
  const size_t c = target.find(':');
  if (c == std::string_view::npos) return {"", std::string(target)};
  return {std::string(target.substr(0, c)), std::string(target.substr(c + 1))};
}

bool is_usdt_internal_map(std::string_view name) { return name == kSpecsMap || name == kIpMap; }

int usdt_specs_map(const Object& obj) {
  for (size_t i = 0; i < obj.maps.size(); ++i)
    if (obj.maps[i].name == kSpecsMap) return static_cast<int>(i);
  return -1;
}

Result<UsdtArg> parse_usdt_arg(std::string_view text) {
  UsdtArg a;
  const size_t at = text.find('@');
  if (at == std::string_view::npos)
    return make_error(Errc::invalid_argument, fmt::format("'{}': no SIZE@ before the operand", text));
  int64_t size = 0;
  if (!parse_int(text.substr(0, at), &size) || size == 0 ||
      (std::abs(size) != 1 && std::abs(size) != 2 && std::abs(size) != 4 && std::abs(size) != 8))
    return make_error(Errc::invalid_argument,
                      fmt::format("'{}': size '{}' is not 1, 2, 4 or 8 bytes (negative: signed)", text,
                                  text.substr(0, at)));
  a.size = static_cast<uint32_t>(std::abs(size));
  a.is_signed = size < 0;
  const std::string_view op = text.substr(at + 1);
  if (op.starts_with('$')) {
    a.kind = UsdtArg::Kind::constant;
    if (!parse_int(op.substr(1), &a.val_off))
      return make_error(Errc::unsupported,
                        fmt::format("'{}': constant '{}' is not a number (a symbol's address is not known here)",
                                    text, op.substr(1)));
    return a;
  }
  if (op.starts_with('%')) {
    a.kind = UsdtArg::Kind::reg;
    auto r = reg_of(op, text);
    if (!r) return std::move(r).error();
    a.reg = *r;
    return a;
  }
  const size_t open = op.find('(');
  if (open == std::string_view::npos || !op.ends_with(')'))
    return make_error(Errc::invalid_argument,
                      fmt::format("'{}': operand '{}' is none of $CONST, %REG, OFF(%REG)", text, op));
  const std::string_view inner = op.substr(open + 1, op.size() - open - 2);
  if (inner.find(',') != std::string_view::npos)
    return make_error(Errc::unsupported,
                      fmt::format("'{}': a base + index * scale operand: libbpf 1.1's spec (usdt.bpf.h) has no such "
                                  "argument kind",
                                  text));
  a.kind = UsdtArg::Kind::reg_deref;
  if (open > 0 && !parse_int(op.substr(0, open), &a.val_off))
    return make_error(Errc::unsupported,
                      fmt::format("'{}': offset '{}' is not a number (a symbol's address is not known here)", text,
                                  op.substr(0, open)));
  auto r = reg_of(inner, text);
  if (!r) return std::move(r).error();
  a.reg = *r;
  return a;
}

Result<std::vector<UsdtArg>> parse_usdt_args(std::string_view args) {
  std::vector<UsdtArg> out;
  size_t i = 0;
  while (i < args.size()) {
    while (i < args.size() && args[i] == ' ') ++i;
    const size_t j = std::min(args.find(' ', i), args.size());
    if (j == i) break;
    auto a = parse_usdt_arg(args.substr(i, j - i));
    if (!a) return std::move(a).error();
    out.push_back(std::move(*a));
    i = j;
  }
  if (out.size() > kUsdtMaxArgs)
    return make_error(Errc::unsupported,
                      fmt::format("{} arguments: usdt.bpf.h reads at most {}", out.size(), kUsdtMaxArgs));
  return out;
}

std::array<uint8_t, kUsdtSpecSize> encode_usdt_spec(std::span<const UsdtArg> args, uint64_t usdt_cookie) {
  std::array<uint8_t, kUsdtSpecSize> s{};
  for (size_t i = 0; i < args.size() && i < kUsdtMaxArgs; ++i) {
    const UsdtArg& a = args[i];
    uint8_t* p = s.data() + 16 * i;
    const uint64_t val_off = static_cast<uint64_t>(a.val_off);
    const uint32_t type = static_cast<uint32_t>(a.kind);
    const int16_t reg_off = a.reg.empty() ? int16_t{0} : static_cast<int16_t>(pt_regs_offset(a.reg));
    const uint8_t sign = a.is_signed, shift = static_cast<uint8_t>(64 - 8 * a.size);
    std::memcpy(p + 0, &val_off, 8);
    std::memcpy(p + 8, &type, 4);
    std::memcpy(p + 12, &reg_off, 2);
    std::memcpy(p + 14, &sign, 1);
    std::memcpy(p + 15, &shift, 1);
  }
  const int16_t cnt = static_cast<int16_t>(std::min(args.size(), kUsdtMaxArgs));
  std::memcpy(s.data() + 192, &usdt_cookie, 8);
  std::memcpy(s.data() + 200, &cnt, 2);
  return s;
}

Result<std::vector<UsdtSite>> read_usdt_notes(const os::ElfFile& elf) {
  std::vector<UsdtSite> out;
  const os::ElfSection* base_sec = elf.section(".stapsdt.base");
  for (const os::ElfSection& s : elf.sections()) {
    if (s.type != SHT_NOTE || s.name != ".note.stapsdt") continue;
    const auto d = elf.section_data(s);
    size_t pos = 0;
    while (d.size() - pos >= 12) {
      const auto bad = [&](const std::string& why) {
        return make_error(Errc::bad_format,
                          fmt::format("{}: section '{}' note at offset {:#x}: {}", elf.path(), s.name, pos, why));
      };
      uint32_t namesz, descsz, type;
      std::memcpy(&namesz, d.data() + pos, 4);
      std::memcpy(&descsz, d.data() + pos + 4, 4);
      std::memcpy(&type, d.data() + pos + 8, 4);
      const uint64_t name_end = pos + 12 + ((uint64_t{namesz} + 3) & ~uint64_t{3});
      const uint64_t desc_end = name_end + ((uint64_t{descsz} + 3) & ~uint64_t{3});
      if (desc_end > d.size() || name_end + descsz > d.size()) return bad("runs past the section");
      const std::string_view owner(reinterpret_cast<const char*>(d.data() + pos + 12), namesz ? namesz - 1 : 0);
      const auto desc = d.subspan(name_end, descsz);
      const size_t here = pos;
      pos = desc_end;
      if (type != kNtStapsdt || owner != "stapsdt") continue;
      if (desc.size() < 24 + 3) {
        pos = here;
        return bad(fmt::format("{} bytes of description, fewer than 3 addresses and 3 strings", desc.size()));
      }
      UsdtSite site;
      site.pc = u64_at(desc, 0);
      const uint64_t note_base = u64_at(desc, 8);
      site.semaphore = u64_at(desc, 16);
      std::string_view strs(reinterpret_cast<const char*>(desc.data() + 24), desc.size() - 24);
      std::string_view parts[3];
      for (auto& p : parts) {
        const size_t z = strs.find('\0');
        if (z == std::string_view::npos) {
          pos = here;
          return bad("provider, name and arguments not each ended by a NUL");
        }
        p = strs.substr(0, z);
        strs.remove_prefix(z + 1);
      }
      site.provider = parts[0];
      site.name = parts[1];
      site.args = parts[2];
      // A prelinked file moved its sections by (where .stapsdt.base is) - (where it
      // was when the note was written): the nop and the semaphore moved with them.
      if (base_sec && note_base) {
        const uint64_t delta = base_sec->addr - note_base;
        site.pc += delta;
        if (site.semaphore) site.semaphore += delta;
      }
      out.push_back(std::move(site));
    }
  }
  return out;
}

Result<std::vector<UsdtPlan>> plan_usdt(const Object& obj, const os::ElfFile& elf) {
  std::vector<UsdtPlan> plans;
  bool any = false;
  for (const LoadedProgram& p : obj.programs) any = any || p.kind == ProgKind::usdt;
  if (!any) return plans;
  const int specs_map = usdt_specs_map(obj);
  if (specs_map < 0)
    return make_error(Errc::invalid_argument,
                      fmt::format("{}: usdt programs but no map '{}': include <bpf/usdt.bpf.h> (libbpf's USDT "
                                  "support) to read the probes' arguments",
                                  obj.path, kSpecsMap));
  const MapSpec& specs = obj.maps[static_cast<size_t>(specs_map)];
  UTRAMP_TRY(check_layout(obj, specs));
  auto notes = read_usdt_notes(elf);
  if (!notes) return std::move(notes).error();
  uint32_t next_spec = 0;
  for (size_t i = 0; i < obj.programs.size(); ++i) {
    const LoadedProgram& p = obj.programs[i];
    if (p.kind != ProgKind::usdt) continue;
    const UsdtName want = split_usdt_target(p.target);
    UsdtPlan plan;
    plan.prog = i;
    plan.first_spec = next_spec;
    for (const UsdtSite& s : *notes) {
      if (s.provider != want.provider || s.name != want.name) continue;
      UsdtSite site = s;
      auto args = parse_usdt_args(s.args);
      if (!args)
        return make_error(args.error().code,
                          fmt::format("program '{}' ({}): USDT probe {}:{} at {:#x} of {}: argument {}", p.name,
                                      p.section, s.provider, s.name, s.pc, elf.path(), args.error().message));
      site.parsed = std::move(*args);
      // The agent adds 1 to the semaphore in the live process: it must be a u16 of the
      // file's writable data (.probes), never code or read-only data.
      if (site.semaphore) {
        const auto sec = std::find_if(elf.sections().begin(), elf.sections().end(), [&](const os::ElfSection& x) {
          return (x.flags & SHF_ALLOC) && site.semaphore >= x.addr && x.size >= 2 &&
                 site.semaphore - x.addr <= x.size - 2;
        });
        if (sec == elf.sections().end() || !(sec->flags & SHF_WRITE) || site.semaphore % 2)
          return make_error(Errc::bad_format,
                            fmt::format("program '{}' ({}): USDT probe {}:{} at {:#x} of {}: its semaphore at {:#x} "
                                        "is not an aligned u16 of writable data ({})",
                                        p.name, p.section, s.provider, s.name, s.pc, elf.path(), site.semaphore,
                                        sec == elf.sections().end() ? std::string("in no section")
                                                                    : fmt::format("in section '{}'", sec->name)));
      }
      plan.sites.push_back(std::move(site));
    }
    if (plan.sites.empty()) {
      std::vector<std::string> have;
      for (const UsdtSite& s : *notes) {
        std::string n = s.provider + ":" + s.name;
        if (std::find(have.begin(), have.end(), n) == have.end()) have.push_back(std::move(n));
      }
      return make_error(Errc::not_found,
                        fmt::format("program '{}' ({}): no USDT probe '{}' in {} ({})", p.name, p.section, p.target,
                                    elf.path(),
                                    have.empty() ? std::string("it has no .note.stapsdt notes")
                                                 : fmt::format("its probes: {}", fmt::join(have, ", "))));
    }
    next_spec += static_cast<uint32_t>(plan.sites.size());
    plans.push_back(std::move(plan));
  }
  if (next_spec > specs.max_entries)
    return make_error(Errc::too_big,
                      fmt::format("{}: {} USDT sites, but map '{}' holds {} specs (define BPF_USDT_MAX_SPEC_CNT "
                                  "larger before including usdt.bpf.h)",
                                  obj.path, next_spec, kSpecsMap, specs.max_entries));
  return plans;
}

}  // namespace utramp::ebpf
