#include "sites/object.hpp"

#include <elf.h>
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "arch/arch.hpp"

namespace utramp::sites {

namespace {

bool is_fentry_name(const std::string& n) { return n == "__fentry__"; }
// glibc's profiling entry is `mcount` (`_mcount` an alias); `__mcount` is the BSDs'.
bool is_mcount_name(const std::string& n) { return n == "mcount" || n == "_mcount" || n == "__mcount"; }

constexpr std::string_view kPatchableEntries = "__patchable_function_entries";
constexpr std::string_view kMcountLoc = "__mcount_loc";
constexpr std::string_view kXrayMap = "xray_instr_map";
constexpr std::string_view kCygEnter = "__cyg_profile_func_enter";

// PLT stubs that jump to a function `wanted` names: every stub is an indirect jump
// through a GOT slot (after endbr64/bnd where present); the slot's relocation names it.
std::set<uint64_t> plt_stubs_of(const os::ElfFile& elf, uint64_t bias,
                                bool (*wanted)(const std::string&)) {
  std::set<uint64_t> out;
  for (const char* secname : {".plt", ".plt.sec", ".plt.got"}) {
    const os::ElfSection* s = elf.section(secname);
    if (!s) continue;
    auto data = elf.section_data(*s);
    const size_t stride = std::string_view(secname) == ".plt.got" && s->size % 16 ? 8 : 16;
    for (size_t off = 0; off + stride <= data.size(); off += stride) {
      uint64_t a = s->addr + off;
      size_t k = off;
      for (int n = 0; n < 3 && k < off + stride; ++n) {
        auto insn = arch::decode(data.data() + k, off + stride - k, a);
        if (!insn) break;
        if (insn->flow == arch::Flow::indirect_jump && insn->rip_relative) {
          if (wanted(elf.got_symbol(insn->target))) out.insert(s->addr + off + bias);
          break;
        }
        k += insn->length;
        a += insn->length;
      }
    }
  }
  return out;
}

}  // namespace

ObjectSites analyse_object(const os::ElfFile& elf, uint64_t bias, const CodeReader& read) {
  ObjectSites obj;
  obj.path = elf.path();
  obj.bias = bias;
  obj.stripped = !elf.has_symtab();
  // Sorted, unique (address_table's order, kept by the merge).
  std::vector<uint64_t> listed = elf.address_table(kPatchableEntries);
  obj.has_patchable_entries = !listed.empty();
  auto mcount = elf.address_table(kMcountLoc);
  obj.has_mcount_loc = !mcount.empty();
  if (!mcount.empty()) {
    const size_t mid = listed.size();
    listed.insert(listed.end(), mcount.begin(), mcount.end());
    std::inplace_merge(listed.begin(), listed.begin() + static_cast<std::ptrdiff_t>(mid), listed.end());
    listed.erase(std::unique(listed.begin(), listed.end()), listed.end());
  }
  for (uint64_t& a : listed) a += bias;
  obj.has_xray = elf.section(kXrayMap) != nullptr;
  obj.reports_calls = elf.imports(kCygEnter);

  std::set<uint64_t> fentry_targets = plt_stubs_of(elf, bias, is_fentry_name);
  std::set<uint64_t> mcount_targets = plt_stubs_of(elf, bias, is_mcount_name);
  std::set<uint64_t> fentry_slots, mcount_slots;
  for (const auto& sym : elf.symbols()) {
    if (is_fentry_name(sym.name)) fentry_targets.insert(sym.value + bias);
    if (is_mcount_name(sym.name) && sym.value) mcount_targets.insert(sym.value + bias);
  }
  for (const auto& s : elf.sections())
    if (s.name == ".got" || s.name == ".got.plt")
      for (uint64_t a = s.addr; a + 8 <= s.addr + s.size; a += 8) {
        const std::string sym = elf.got_symbol(a);
        if (is_fentry_name(sym)) fentry_slots.insert(a + bias);
        if (is_mcount_name(sym)) mcount_slots.insert(a + bias);
      }

  ObjectContext ctx;
  ctx.listed = [&](uint64_t a) { return std::binary_search(listed.begin(), listed.end(), a); };
  ctx.is_fentry = [&](uint64_t a) { return fentry_targets.count(a) != 0; };
  ctx.is_fentry_slot = [&](uint64_t a) { return fentry_slots.count(a) != 0; };
  // Only an object that can reach mcount has its functions' first calls looked at.
  if (!mcount_targets.empty() || !mcount_slots.empty()) {
    ctx.is_mcount = [&](uint64_t a) { return mcount_targets.count(a) != 0; };
    ctx.is_mcount_slot = [&](uint64_t a) { return mcount_slots.count(a) != 0; };
  }
  ctx.has_xray = obj.has_xray;

  // Sections by index (the last listed with an index wins, as a scan would find it).
  std::vector<const os::ElfSection*> by_index;
  for (const auto& s : elf.sections()) {
    if (s.index >= by_index.size()) by_index.resize(s.index + 1, nullptr);
    by_index[s.index] = &s;
  }
  obj.functions.reserve(elf.symbols().size());
  // symbols() is sorted by address: an alias follows the name that stands for it.
  bool any = false;
  uint64_t last = 0;
  for (const auto& sym : elf.symbols()) {
    const uint64_t func = sym.value + bias;
    if (any && func == last) continue;  // aliases: first name wins
    any = true;
    last = func;
    const os::ElfSection* sec = sym.shndx < by_index.size() ? by_index[sym.shndx] : nullptr;
    if (!sec || !(sec->flags & SHF_EXECINSTR)) continue;
    const uint64_t want = std::max<uint64_t>(sym.size, 16);
    auto code = read(func, std::min<uint64_t>(want, sec->addr + sec->size + bias - func));
    SiteInfo info = classify(sym.name, func, sym.size, code, ctx);
    if (sym.type == STT_GNU_IFUNC) {
      info.attachable = false;
      info.reason = "GNU indirect function resolver";
      info.ifunc = true;
    }
    obj.functions.push_back(std::move(info));
  }
  // Already in order but where a bias wraps an address around.
  auto by_func = [](const SiteInfo& a, const SiteInfo& b) { return a.func < b.func; };
  if (!std::is_sorted(obj.functions.begin(), obj.functions.end(), by_func))
    std::sort(obj.functions.begin(), obj.functions.end(), by_func);
  return obj;
}

bool built_for_tracing(const os::ElfOutline& outline) {
  for (const std::string& s : outline.sections)
    if (s == kPatchableEntries || s == kMcountLoc || s == kXrayMap) return true;
  for (const std::string& s : outline.undefined_dynamic)
    if (is_fentry_name(s) || is_mcount_name(s) || s == kCygEnter) return true;
  return false;
}

Result<ObjectSites> analyse_file(const std::string& path) {
  auto elf = os::ElfFile::open(path);
  if (!elf) return std::move(elf).error();
  const os::ElfFile& e = **elf;
  return analyse_object(e, 0, [&](uint64_t a, uint64_t n) { return e.bytes_at(a, n); });
}

}  // namespace utramp::sites
