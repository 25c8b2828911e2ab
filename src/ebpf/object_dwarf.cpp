#include "ebpf/object_dwarf.hpp"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fmt/format.h>
#include <libelf.h>

#include "ebpf/loader.hpp"

namespace utramp::ebpf {

struct ObjectDwarf::Impl {
  std::vector<uint8_t> bytes;  // libelf reads from here for the object's lifetime
  Elf* elf = nullptr;
  Dwarf* dw = nullptr;
  ~Impl() {
    if (dw) dwarf_end(dw);
    if (elf) elf_end(elf);
  }
};

namespace {

std::optional<Dwarf_Die> type_of(Dwarf_Die* die) {
  Dwarf_Attribute a;
  Dwarf_Die t;
  if (!dwarf_attr_integrate(die, DW_AT_type, &a) || !dwarf_formref_die(&a, &t)) return std::nullopt;
  return t;
}

// The C spelling of a type, for messages: "unsigned int", "struct S *", "const char *".
std::string c_type(Dwarf_Die die, int depth = 0) {
  if (depth > 8) return "...";
  const char* n = dwarf_diename(&die);
  auto inner = [&] {
    auto t = type_of(&die);
    return t ? c_type(*t, depth + 1) : std::string("void");
  };
  auto tagged = [&](const char* kw) { return fmt::format("{} {}", kw, n ? n : "<anonymous>"); };
  switch (dwarf_tag(&die)) {
    case DW_TAG_structure_type: return tagged("struct");
    case DW_TAG_union_type: return tagged("union");
    case DW_TAG_enumeration_type: return tagged("enum");
    case DW_TAG_pointer_type: return inner() + " *";
    case DW_TAG_const_type: return "const " + inner();
    case DW_TAG_volatile_type: return "volatile " + inner();
    case DW_TAG_restrict_type: return inner();
    case DW_TAG_array_type: return inner() + "[]";
    default: return n ? n : "<unnamed>";
  }
}

// Depth-first over every DIE below `parent` until `fn` returns true.
template <class F>
bool walk(Dwarf_Die* parent, F& fn, int depth = 0) {
  Dwarf_Die c;
  if (depth > 16 || dwarf_child(parent, &c) != 0) return false;
  do {
    if (fn(&c) || walk(&c, fn, depth + 1)) return true;
  } while (dwarf_siblingof(&c, &c) == 0);
  return false;
}

}  // namespace

ObjectDwarf::~ObjectDwarf() = default;

Result<std::unique_ptr<ObjectDwarf>> ObjectDwarf::open(std::span<const uint8_t> elf_bytes) {
  elf_version(EV_CURRENT);
  auto impl = std::make_unique<Impl>();
  impl->bytes.assign(elf_bytes.begin(), elf_bytes.end());
  impl->elf = elf_memory(reinterpret_cast<char*>(impl->bytes.data()), impl->bytes.size());
  if (!impl->elf) return make_error(Errc::bad_format, fmt::format("libelf: {}", elf_errmsg(-1)));
  impl->dw = dwarf_begin_elf(impl->elf, DWARF_C_READ, nullptr);
  if (!impl->dw) return make_error(Errc::not_found, fmt::format("no DWARF: {}", dwarf_errmsg(-1)));
  std::unique_ptr<ObjectDwarf> d(new ObjectDwarf);
  d->impl_ = std::move(impl);
  return d;
}

std::optional<Prototype> ObjectDwarf::prototype(const std::string& name) const {
  std::optional<Prototype> out;
  auto visit = [&](Dwarf_Die* die) {
    if (dwarf_tag(die) != DW_TAG_subprogram) return false;
    const char* n = dwarf_diename(die);  // through DW_AT_abstract_origin too
    if (!n || name != n) return false;
    Prototype p;
    bool first = true, typed = true;
    Dwarf_Die c;
    if (dwarf_child(die, &c) == 0) {
      do {
        if (dwarf_tag(&c) != DW_TAG_formal_parameter) continue;
        if (first) {  // ctx
          first = false;
          continue;
        }
        auto t = type_of(&c);
        Dwarf_Word size = 0;
        if (!t || dwarf_aggregate_size(&*t, &size) != 0) {
          typed = false;
          break;
        }
        p.arg_sizes.push_back(static_cast<uint32_t>(size));
        const char* pn = dwarf_diename(&c);
        p.text += fmt::format("{}{}{}{}", p.text.empty() ? "" : ", ", c_type(*t), pn ? " " : "", pn ? pn : "");
      } while (dwarf_siblingof(&c, &c) == 0);
    }
    if (first || !typed) return false;  // a declaration without parameters, or untyped
    p.text = "(" + p.text + ")";
    out = std::move(p);
    return true;
  };
  Dwarf_CU* cu = nullptr;
  Dwarf_Die cudie;
  while (dwarf_get_units(impl_->dw, cu, &cu, nullptr, nullptr, &cudie, nullptr) == 0)
    if (walk(&cudie, visit)) break;
  return out;
}

}  // namespace utramp::ebpf
