#include "ustack.hpp"

#include <bpf/btf.h>
#include <elf.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "ebpf/libbpf.hpp"
#include "os/elf_file.hpp"
#include "symbols/names.hpp"

namespace utramp::cli {

struct StackSymbols::File {
  struct Sym {
    uint64_t lo, hi;
    std::string name;
    int rank;  // among aliases of one address, the highest is shown (below)
  };
  std::vector<Sym> syms;  // functions with a size, by address
};

StackSymbols::StackSymbols(std::vector<ebpf::LoadedRange> ranges) : ranges_(std::move(ranges)) {}
StackSymbols::~StackSymbols() = default;
StackSymbols::StackSymbols(StackSymbols&&) noexcept = default;
StackSymbols& StackSymbols::operator=(StackSymbols&&) noexcept = default;

std::string StackSymbols::frame(uint64_t ip) {
  const auto r = std::find_if(ranges_.begin(), ranges_.end(),
                              [&](const ebpf::LoadedRange& x) { return ip >= x.lo && ip < x.hi; });
  if (r == ranges_.end()) return "[unknown]";
  auto& f = files_[r->path];
  if (!f) {
    f = std::make_unique<File>();
    if (auto elf = os::ElfFile::open(r->path)) {
      for (const os::ElfSymbol& s : (*elf)->symbols())
        if (s.type == STT_FUNC && s.size && s.shndx != SHN_UNDEF)
          // Aliases (malloc, __libc_malloc, __malloc): the public name, a global one, then the shortest.
          f->syms.push_back({s.value, s.value + s.size, s.name,
                             (s.name.starts_with("_") ? 0 : 4) + (s.bind == STB_GLOBAL ? 2 : 0)});
      std::sort(f->syms.begin(), f->syms.end(), [](const File::Sym& a, const File::Sym& b) {
        if (a.lo != b.lo) return a.lo < b.lo;
        if (a.rank != b.rank) return a.rank < b.rank;
        return a.name.size() > b.name.size();
      });
    }
  }
  const uint64_t vaddr = ip - r->bias;
  // The last symbol starting at or below vaddr that covers it (nested ones: the innermost
  // start wins, as symbols of one address are aliases).
  auto it = std::upper_bound(f->syms.begin(), f->syms.end(), vaddr,
                             [](uint64_t v, const File::Sym& s) { return v < s.lo; });
  while (it != f->syms.begin()) {
    --it;
    if (vaddr < it->hi) return fmt::format("{}+{}", symbols::demangle(it->name), vaddr - it->lo);
    if (vaddr - it->lo > (1u << 24)) break;
  }
  const size_t slash = r->path.rfind('/');
  return fmt::format("{}+{:#x}", slash == std::string::npos ? r->path : r->path.substr(slash + 1), vaddr);
}

std::vector<std::string> StackSymbols::frames(std::span<const uint8_t> value) {
  std::vector<std::string> out;
  for (size_t k = 0; k + 8 <= value.size(); k += 8) {
    uint64_t ip;
    std::memcpy(&ip, value.data() + k, 8);
    if (!ip) break;
    out.push_back(frame(ip));
  }
  return out;
}

namespace {
bool is_hash(const ebpf::MapSpec& s) {
  return s.type == uint32_t(ebpf::MapType::hash) || s.type == uint32_t(ebpf::MapType::lru_hash) ||
         s.type == uint32_t(ebpf::MapType::percpu_hash);
}
}  // namespace

bool keyed_by_stack(const ebpf::MapSpec& s) {
  return is_hash(s) && s.key_size == 4 && s.name.find("stack") != std::string::npos;
}

std::vector<std::string> stack_id_members(const ebpf::MapSpec& s, const btf* b, uint32_t key_type) {
  std::vector<std::string> out;
  if (!is_hash(s) || !b || !key_type) return out;
  const int32_t id = ebpf::libbpf().btf__resolve_type(b, key_type);  // through typedefs and modifiers
  const btf_type* t = id > 0 ? ebpf::libbpf().btf__type_by_id(b, static_cast<uint32_t>(id)) : nullptr;
  if (!t || !btf_is_struct(t)) return out;
  const btf_member* m = btf_members(t);
  for (uint16_t i = 0; i < btf_vlen(t); ++i, ++m) {
    if (btf_member_bitfield_size(t, i)) continue;
    const int32_t mid = ebpf::libbpf().btf__resolve_type(b, m->type);
    const btf_type* mt = mid > 0 ? ebpf::libbpf().btf__type_by_id(b, static_cast<uint32_t>(mid)) : nullptr;
    if (!mt || !btf_is_int(mt) || (mt->size != 4 && mt->size != 8)) continue;
    std::string name = ebpf::libbpf().btf__name_by_offset(b, m->name_off) ? ebpf::libbpf().btf__name_by_offset(b, m->name_off) : "";
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    if (lower.find("stack") != std::string::npos && lower.ends_with("id")) out.push_back(name);
  }
  return out;
}

}  // namespace utramp::cli
