#include "ebpf/object_dwarf.hpp"

#include <dwarf.h>
#include <bpf/btf.h>
#include <elfutils/libdw.h>
#include <fmt/format.h>
#include <libelf.h>

#include <map>

#include "ebpf/libbpf.hpp"
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

namespace {

// One DWARF type tree into BTF (ObjectDwarf::named_types_as_btf). Types are added
// before the struct or union that uses them, since a struct's fields must follow it
// in the BTF directly; each DIE is converted once (by its offset).
class ToBtf {
 public:
  explicit ToBtf(::btf* b) : b_(b) {}

  // The BTF id of `die`'s type; 0 (void) for what BTF cannot say or a depth too deep.
  int convert(Dwarf_Die die, int depth = 0) {
    if (depth > 32) return 0;
    const Dwarf_Off off = dwarf_dieoffset(&die);
    if (auto it = done_.find(off); it != done_.end()) return it->second;
    const int id = make(die, depth);
    if (id > 0) done_[off] = id;
    return id > 0 ? id : 0;
  }

 private:
  int inner(Dwarf_Die& die, int depth) {
    auto t = type_of(&die);
    return t ? convert(*t, depth + 1) : 0;
  }
  int index_type() {
    if (!index_) index_ = libbpf().btf__add_int(b_, "unsigned int", 4, 0);
    return index_ > 0 ? index_ : 0;
  }
  static Dwarf_Word uattr(Dwarf_Die* die, unsigned name, Dwarf_Word dflt = 0) {
    Dwarf_Attribute a;
    Dwarf_Word v;
    if (!dwarf_attr_integrate(die, name, &a) || dwarf_formudata(&a, &v) != 0) return dflt;
    return v;
  }

  int make(Dwarf_Die& die, int depth) {
    const char* n = dwarf_diename(&die);
    switch (dwarf_tag(&die)) {
      case DW_TAG_base_type: {
        const Dwarf_Word enc = uattr(&die, DW_AT_encoding), size = uattr(&die, DW_AT_byte_size);
        if (size == 0 || size > 16) return 0;
        if (enc == DW_ATE_float) return libbpf().btf__add_float(b_, n ? n : "float", size);
        int e = 0;
        if (enc == DW_ATE_signed || enc == DW_ATE_signed_char) e |= BTF_INT_SIGNED;
        if (enc == DW_ATE_signed_char || enc == DW_ATE_unsigned_char) e |= BTF_INT_CHAR;
        if (enc == DW_ATE_boolean) e = BTF_INT_BOOL;
        return libbpf().btf__add_int(b_, n ? n : "int", size, e);
      }
      case DW_TAG_typedef: {
        const int t = inner(die, depth);
        return n ? libbpf().btf__add_typedef(b_, n, t) : t;
      }
      case DW_TAG_const_type:
      case DW_TAG_volatile_type:
      case DW_TAG_restrict_type:
      case DW_TAG_atomic_type: return inner(die, depth);  // the same bytes
      case DW_TAG_pointer_type:
      case DW_TAG_reference_type:
      case DW_TAG_rvalue_reference_type: return libbpf().btf__add_ptr(b_, 0);
      case DW_TAG_enumeration_type: {
        const Dwarf_Word size = uattr(&die, DW_AT_byte_size, 4);
        const int e = libbpf().btf__add_enum(b_, n ? n : "", static_cast<uint32_t>(size));
        if (e < 0) return e;
        Dwarf_Die c;
        if (dwarf_child(&die, &c) == 0) do {
            if (dwarf_tag(&c) != DW_TAG_enumerator) continue;
            Dwarf_Attribute a;
            Dwarf_Sword v = 0;
            if (!dwarf_attr(&c, DW_AT_const_value, &a) || dwarf_formsdata(&a, &v) != 0) continue;
            const char* en = dwarf_diename(&c);
            if (en && v >= INT32_MIN && v <= UINT32_MAX) libbpf().btf__add_enum_value(b_, en, v);
          } while (dwarf_siblingof(&c, &c) == 0);
        return e;
      }
      case DW_TAG_array_type: {
        // int a[2][3]: one subrange per dimension, the last one innermost.
        std::vector<uint32_t> dims;
        Dwarf_Die c;
        if (dwarf_child(&die, &c) == 0) do {
            if (dwarf_tag(&c) != DW_TAG_subrange_type) continue;
            Dwarf_Word count = uattr(&c, DW_AT_count, ~Dwarf_Word{0});
            if (count == ~Dwarf_Word{0}) {
              Dwarf_Attribute a;
              Dwarf_Word ub;
              count = dwarf_attr(&c, DW_AT_upper_bound, &a) && dwarf_formudata(&a, &ub) == 0 ? ub + 1 : 0;
            }
            dims.push_back(static_cast<uint32_t>(count));
          } while (dwarf_siblingof(&c, &c) == 0);
        int t = inner(die, depth);
        for (auto it = dims.rbegin(); it != dims.rend() && t >= 0; ++it) t = libbpf().btf__add_array(b_, index_type(), t, *it);
        return t;
      }
      case DW_TAG_structure_type:
      case DW_TAG_union_type: {
        if (dwarf_hasattr(&die, DW_AT_declaration)) return 0;
        struct Field {
          std::string name;
          int type;
          uint32_t bit_off, bit_size;
        };
        std::vector<Field> fields;
        Dwarf_Die c;
        if (dwarf_child(&die, &c) == 0) do {
            if (dwarf_tag(&c) != DW_TAG_member) continue;
            Field f;
            const char* mn = dwarf_diename(&c);
            f.name = mn ? mn : "";
            f.type = inner(c, depth);
            f.bit_size = static_cast<uint32_t>(uattr(&c, DW_AT_bit_size));
            if (dwarf_hasattr(&c, DW_AT_data_bit_offset)) {
              f.bit_off = static_cast<uint32_t>(uattr(&c, DW_AT_data_bit_offset));
            } else {
              f.bit_off = static_cast<uint32_t>(8 * uattr(&c, DW_AT_data_member_location));
            }
            fields.push_back(std::move(f));
          } while (dwarf_siblingof(&c, &c) == 0);
        const uint32_t size = static_cast<uint32_t>(uattr(&die, DW_AT_byte_size));
        const bool is_union = dwarf_tag(&die) == DW_TAG_union_type;
        const int s = is_union ? libbpf().btf__add_union(b_, n ? n : "", size) : libbpf().btf__add_struct(b_, n ? n : "", size);
        if (s < 0) return s;
        for (const Field& f : fields)
          if (libbpf().btf__add_field(b_, f.name.empty() ? nullptr : f.name.c_str(), f.type, f.bit_off, f.bit_size) < 0)
            return -1;
        return s;
      }
      default: return 0;
    }
  }

  ::btf* b_;
  int index_ = 0;
  std::map<Dwarf_Off, int> done_;
};

}  // namespace

Result<std::shared_ptr<const ::btf>> ObjectDwarf::named_types_as_btf() const {
  UTRAMP_TRY(load_libbpf());
  std::shared_ptr<struct btf> b(libbpf().btf__new_empty(), [](::btf* x) { libbpf().btf__free(x); });
  if (!b) return make_error(Errc::no_memory, "libbpf: btf__new_empty failed");
  // A type libbpf refuses becomes void (0): its values then print as bytes.
  ToBtf conv(b.get());
  auto visit = [&](Dwarf_Die* die) {
    const int tag = dwarf_tag(die);
    if ((tag == DW_TAG_structure_type || tag == DW_TAG_union_type) && dwarf_diename(die) &&
        !dwarf_hasattr(die, DW_AT_declaration))
      conv.convert(*die);
    return false;
  };
  Dwarf_CU* cu = nullptr;
  Dwarf_Die cudie;
  while (dwarf_get_units(impl_->dw, cu, &cu, nullptr, nullptr, &cudie, nullptr) == 0) walk(&cudie, visit);
  return std::shared_ptr<const ::btf>(b);
}

}  // namespace utramp::ebpf
