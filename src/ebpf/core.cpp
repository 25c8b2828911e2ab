#include "ebpf/core.hpp"

#include <bpf/btf.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/bpf.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <optional>

#include "ebpf/libbpf.hpp"
#include "os/file.hpp"

namespace utramp::ebpf {

const char* core_kind_name(uint32_t k) {
  static const char* const names[] = {
      "field_byte_offset", "field_byte_size", "field_exists", "field_signed",   "field_lshift_u64",
      "field_rshift_u64",  "type_id_local",   "type_id_target", "type_exists", "type_size",
      "enumval_exists",    "enumval_value",   "type_matches"};
  return k < std::size(names) ? names[k] : "unknown";
}

bool core_kind_supported(uint32_t k) {
  switch (k) {
    case BPF_CORE_FIELD_BYTE_OFFSET:
    case BPF_CORE_FIELD_BYTE_SIZE:
    case BPF_CORE_FIELD_EXISTS:
    case BPF_CORE_FIELD_SIGNED:
    case BPF_CORE_TYPE_ID_LOCAL:
    case BPF_CORE_TYPE_EXISTS:
    case BPF_CORE_TYPE_SIZE:
    case BPF_CORE_ENUMVAL_EXISTS:
    case BPF_CORE_ENUMVAL_VALUE: return true;
    default: return false;
  }
}

std::string core_supported_kinds() {
  std::string s;
  for (uint32_t k = 0; k <= BPF_CORE_TYPE_MATCHES; ++k)
    if (core_kind_supported(k)) s += fmt::format("{}{}", s.empty() ? "" : ", ", core_kind_name(k));
  return s;
}

// ---- the target's DWARF -----------------------------------------------------------

struct TargetTypes::Impl {
  std::string path;
  int fd = -1;
  Dwarf* dw = nullptr;
  // (tag, name) -> the first definition; DW_TAG_class_type is filed as a structure.
  std::map<std::pair<int, std::string>, Dwarf_Die> types;
  ~Impl() {
    if (dw) dwarf_end(dw);
    if (fd >= 0) close(fd);
  }
};

namespace {

int tag_class(int tag) { return tag == DW_TAG_class_type ? DW_TAG_structure_type : tag; }

void index_types(TargetTypes::Impl& t, Dwarf_Die* parent, int depth) {
  Dwarf_Die c;
  if (depth > 8 || dwarf_child(parent, &c) != 0) return;
  do {
    const int tag = dwarf_tag(&c);
    if (tag == DW_TAG_namespace) {
      index_types(t, &c, depth + 1);
      continue;
    }
    if (tag != DW_TAG_structure_type && tag != DW_TAG_class_type && tag != DW_TAG_union_type &&
        tag != DW_TAG_enumeration_type && tag != DW_TAG_typedef && tag != DW_TAG_base_type)
      continue;
    if (dwarf_hasattr(&c, DW_AT_declaration)) continue;
    const char* n = dwarf_diename(&c);
    if (n && *n) t.types.emplace(std::make_pair(tag_class(tag), std::string(n)), c);
  } while (dwarf_siblingof(&c, &c) == 0);
}

std::optional<Dwarf_Die> type_of(Dwarf_Die* die) {
  Dwarf_Attribute a;
  Dwarf_Die t;
  if (!dwarf_attr_integrate(die, DW_AT_type, &a) || !dwarf_formref_die(&a, &t)) return std::nullopt;
  return t;
}

std::optional<uint64_t> size_of(Dwarf_Die die) {
  Dwarf_Word s = 0;
  if (dwarf_aggregate_size(&die, &s) != 0) return std::nullopt;
  return s;
}

bool dwarf_signed(Dwarf_Die die) {
  Dwarf_Die p;
  if (dwarf_peel_type(&die, &p) != 0) return false;
  if (dwarf_tag(&p) == DW_TAG_enumeration_type) {
    auto u = type_of(&p);  // the underlying type, when the compiler gives it
    return u && dwarf_signed(*u);
  }
  Dwarf_Attribute a;
  Dwarf_Word enc = 0;
  if (dwarf_tag(&p) != DW_TAG_base_type || !dwarf_attr(&p, DW_AT_encoding, &a) || dwarf_formudata(&a, &enc) != 0)
    return false;
  return enc == DW_ATE_signed || enc == DW_ATE_signed_char;
}

// The member `name` of the struct/union `rec`, looked for through anonymous members;
// *off accumulates the byte offsets.
bool find_member(Dwarf_Die rec, const std::string& name, uint64_t* off, Dwarf_Die* out, bool* bitfield,
                 int depth = 0) {
  Dwarf_Die c;
  if (depth > 8 || dwarf_child(&rec, &c) != 0) return false;
  do {
    if (dwarf_tag(&c) != DW_TAG_member) continue;
    Dwarf_Attribute a;
    Dwarf_Word loc = 0;
    if (dwarf_attr(&c, DW_AT_data_member_location, &a)) (void)dwarf_formudata(&a, &loc);
    const char* n = dwarf_diename(&c);
    if (n && name == n) {
      *off += loc;
      *out = c;
      *bitfield = dwarf_hasattr(&c, DW_AT_bit_size);
      return true;
    }
    if (n && *n) continue;
    auto t = type_of(&c);
    Dwarf_Die p;
    if (!t || dwarf_peel_type(&*t, &p) != 0) continue;
    const int tag = dwarf_tag(&p);
    if (tag != DW_TAG_structure_type && tag != DW_TAG_class_type && tag != DW_TAG_union_type) continue;
    uint64_t inner = *off + loc;
    if (find_member(p, name, &inner, out, bitfield, depth + 1)) {
      *off = inner;
      return true;
    }
  } while (dwarf_siblingof(&c, &c) == 0);
  return false;
}

// ---- the object's BTF -------------------------------------------------------------

const btf_type* skip_mods(const btf* b, uint32_t* id) {
  const btf_type* t = libbpf().btf__type_by_id(b, *id);
  for (int i = 0; t && i < 32 && (btf_is_mod(t) || btf_is_typedef(t)); ++i) {
    *id = t->type;
    t = libbpf().btf__type_by_id(b, *id);
  }
  return t;
}

// A type's name without libbpf's "___flavour" suffix.
std::string essential(const char* n) {
  std::string s = n ? n : "";
  const size_t p = s.find("___");
  return p != std::string::npos && p > 0 ? s.substr(0, p) : s;
}

// The DWARF tag a BTF type of this kind is looked up as.
int dwarf_tag_for(const btf_type* t) {
  if (btf_is_struct(t)) return DW_TAG_structure_type;
  if (btf_is_union(t)) return DW_TAG_union_type;
  if (btf_is_any_enum(t)) return DW_TAG_enumeration_type;
  if (btf_is_typedef(t)) return DW_TAG_typedef;
  if (btf_is_int(t) || btf_is_float(t)) return DW_TAG_base_type;
  return 0;
}

struct Step {
  bool member = true;
  std::string name;    // member steps
  uint32_t index = 0;  // array steps
};

struct Field {
  bool exists = true;
  bool bitfield = false;
  uint64_t offset = 0, size = 0;
  bool is_signed = false;
};

struct Relo {
  const LoadedProgram& p;
  const CoreRelo& r;
  const btf* local;
  std::string what;  // "struct task.pid" once known
  Error fail(Errc c, const std::string& why) const {
    return make_error(c, fmt::format("program '{}' insn {}: CO-RE {} of {} (access \"{}\"): {}", p.name, r.insn,
                                     core_kind_name(r.kind), what, r.access, why));
  }
};

Result<std::vector<uint32_t>> parse_access(const Relo& x) {
  std::vector<uint32_t> acc;
  const std::string& s = x.r.access;
  size_t i = 0;
  while (i < s.size()) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(s.c_str() + i, &end, 10);
    if (end == s.c_str() + i || v > std::numeric_limits<uint32_t>::max())
      return x.fail(Errc::bad_format, "malformed access string");
    acc.push_back(static_cast<uint32_t>(v));
    i = static_cast<size_t>(end - s.c_str());
    if (i < s.size() && s[i] != ':') return x.fail(Errc::bad_format, "malformed access string");
    if (i < s.size()) ++i;
  }
  if (acc.empty()) return x.fail(Errc::bad_format, "empty access string");
  return acc;
}

// The field as the object's BTF lays it out, and the named path to it.
Result<Field> local_field(Relo& x, const std::vector<uint32_t>& acc, std::vector<Step>* steps) {
  uint32_t id = x.r.type_id;
  const btf_type* t = skip_mods(x.local, &id);
  if (!t) return x.fail(Errc::bad_format, fmt::format("type {} not in the object's BTF", x.r.type_id));
  if (!btf_is_composite(t)) return x.fail(Errc::unsupported, "the root type is not a struct or union");
  const std::string root = essential(libbpf().btf__name_by_offset(x.local, t->name_off));
  if (root.empty()) return x.fail(Errc::unsupported, "an anonymous struct or union has no name to match");
  x.what = fmt::format("{} {}", btf_is_union(t) ? "union" : "struct", root);
  Field f;
  const long root_size = libbpf().btf__resolve_size(x.local, id);
  if (root_size < 0) return x.fail(Errc::bad_format, "the root type has no size");
  f.offset = uint64_t(acc[0]) * static_cast<uint64_t>(root_size);
  if (acc[0]) x.what += fmt::format("[{}]", acc[0]);
  steps->push_back({false, "", acc[0]});
  for (size_t i = 1; i < acc.size(); ++i) {
    t = skip_mods(x.local, &id);
    if (t && btf_is_composite(t)) {
      if (acc[i] >= btf_vlen(t)) return x.fail(Errc::bad_format, fmt::format("member {} out of range", acc[i]));
      const btf_member& m = btf_members(t)[acc[i]];
      const uint32_t bit = btf_member_bit_offset(t, acc[i]);
      if (btf_member_bitfield_size(t, acc[i]) || bit % 8) f.bitfield = true;
      f.offset += bit / 8;
      const char* n = libbpf().btf__name_by_offset(x.local, m.name_off);
      if (n && *n) {  // anonymous members are walked through by name in the target
        steps->push_back({true, n, 0});
        x.what += fmt::format(".{}", n);
      }
      id = m.type;
    } else if (t && btf_is_array(t)) {
      const struct btf_array* a = btf_array(t);
      const long es = libbpf().btf__resolve_size(x.local, a->type);
      if (es < 0) return x.fail(Errc::bad_format, "array element without a size");
      f.offset += uint64_t(acc[i]) * static_cast<uint64_t>(es);
      steps->push_back({false, "", acc[i]});
      x.what += fmt::format("[{}]", acc[i]);
      id = a->type;
    } else {
      return x.fail(Errc::bad_format, fmt::format("access step {} into a type that is not a struct, union or array", i));
    }
  }
  if (f.bitfield) return x.fail(Errc::unsupported, "bitfields are not supported");
  const long sz = libbpf().btf__resolve_size(x.local, id);
  f.size = sz < 0 ? 0 : static_cast<uint64_t>(sz);
  uint32_t pid = id;
  const btf_type* leaf = skip_mods(x.local, &pid);
  f.is_signed = leaf && ((btf_is_int(leaf) && (btf_int_encoding(leaf) & BTF_INT_SIGNED)) ||
                         (btf_is_any_enum(leaf) && btf_kflag(leaf)));
  return f;
}

// The same path in the target's DWARF.
Result<Field> target_field(const Relo& x, const TargetTypes::Impl& tt, int tag, const std::string& root,
                           const std::vector<Step>& steps) {
  Field f;
  auto it = tt.types.find({tag, root});
  if (it == tt.types.end()) {
    f.exists = false;
    return f;
  }
  Dwarf_Die cur = it->second;
  auto rs = size_of(cur);
  if (!rs) return x.fail(Errc::bad_format, fmt::format("{} has no size in {}", x.what, tt.path));
  f.offset = uint64_t(steps[0].index) * *rs;
  for (size_t i = 1; i < steps.size(); ++i) {
    Dwarf_Die p;
    if (dwarf_peel_type(&cur, &p) != 0) return x.fail(Errc::bad_format, "unreadable type in " + tt.path);
    const int ptag = dwarf_tag(&p);
    if (steps[i].member) {
      if (ptag != DW_TAG_structure_type && ptag != DW_TAG_class_type && ptag != DW_TAG_union_type) {
        f.exists = false;
        return f;
      }
      Dwarf_Die m;
      bool bitfield = false;
      if (!find_member(p, steps[i].name, &f.offset, &m, &bitfield)) {
        f.exists = false;
        return f;
      }
      if (bitfield) return x.fail(Errc::unsupported, fmt::format("'{}' is a bitfield in {}", steps[i].name, tt.path));
      auto t = type_of(&m);
      if (!t) return x.fail(Errc::bad_format, fmt::format("member '{}' has no type in {}", steps[i].name, tt.path));
      cur = *t;
    } else {
      auto e = ptag == DW_TAG_array_type ? type_of(&p) : std::nullopt;
      if (!e) {
        f.exists = false;
        return f;
      }
      auto es = size_of(*e);
      if (!es) return x.fail(Errc::bad_format, "array element without a size in " + tt.path);
      f.offset += uint64_t(steps[i].index) * *es;
      cur = *e;
    }
  }
  auto s = size_of(cur);
  f.size = s ? *s : 0;
  f.is_signed = dwarf_signed(cur);
  return f;
}

// The same path in utramp's uprobe context (loader.hpp kPtRegsFields): struct pt_regs
// itself, or one of its registers, each an unsigned 8-byte word. A register the
// object's pt_regs has and utramp's has not (a newer kernel's fred_cs, say) does not
// exist; reading inside a register (a bitfield, an array) is refused.
Result<Field> context_field(const Relo& x, const std::vector<Step>& steps, size_t access_len) {
  Field f;
  if (steps[0].index != 0)
    return x.fail(Errc::unsupported, "the uprobe context is one struct pt_regs, not an array of them");
  if (steps.size() == 1 && access_len > 1)  // an anonymous member itself: no register
    return x.fail(Errc::unsupported, "an anonymous member of struct pt_regs is not a register of utramp's");
  if (steps.size() == 1) {
    f.size = kPtRegsSize;
    return f;
  }
  const int64_t off = pt_regs_offset(steps[1].name);
  if (off < 0) {
    f.exists = false;
    return f;
  }
  if (steps.size() > 2)
    return x.fail(Errc::unsupported,
                  fmt::format("'{}' is an 8-byte register in utramp's struct pt_regs: nothing inside it to reach",
                              steps[1].name));
  f.offset = static_cast<uint64_t>(off);
  f.size = 8;
  return f;
}

// True when relocations on type `name` resolve against the uprobe context: a uprobe's
// `struct pt_regs` is utramp's (the target's DWARF has none, and the program reads the
// copy utramp makes, not the target's memory).
bool is_context_type(const LoadedProgram& p, const btf_type* t, const std::string& name) {
  return is_uprobe(p.kind) && t && btf_is_struct(t) && name == "pt_regs";
}

std::string context_fields() {
  std::string s;
  for (auto f : kPtRegsFields) s += fmt::format("{}{}", s.empty() ? "" : ", ", f);
  return s;
}

// Puts `value` where the instruction holds `local` (see the header).
Result<void> patch(const Relo& x, std::vector<Insn>& insns, uint64_t local, uint64_t value, bool size_changed) {
  if (x.r.insn >= insns.size()) return x.fail(Errc::bad_format, "instruction outside the program");
  Insn& n = insns[x.r.insn];
  const uint8_t c = op::cls(n.code);
  if (n.code == op::kLddw) {
    if (x.r.insn + 1 >= insns.size()) return x.fail(Errc::bad_format, "lddw at the end of the program");
    Insn& hi = insns[x.r.insn + 1];
    const uint64_t old = uint64_t(uint32_t(n.imm)) | uint64_t(uint32_t(hi.imm)) << 32;
    if (old != local)
      return x.fail(Errc::bad_format, fmt::format("lddw holds {}, the object's BTF says {}", old, local));
    n.imm = static_cast<int32_t>(static_cast<uint32_t>(value));
    hi.imm = static_cast<int32_t>(static_cast<uint32_t>(value >> 32));
    return {};
  }
  if (op::is_alu(n.code)) {
    if (op::src_bit(n.code) == op::kX) return x.fail(Errc::bad_format, "an ALU instruction with a register source");
    if (static_cast<uint32_t>(n.imm) != static_cast<uint32_t>(local))
      return x.fail(Errc::bad_format, fmt::format("the instruction holds {}, the object's BTF says {}", n.imm, local));
    const int64_t sv = static_cast<int64_t>(value);  // an s32, or a u32 written as its bits
    if (sv < std::numeric_limits<int32_t>::min() || sv > int64_t(std::numeric_limits<uint32_t>::max()))
      return x.fail(Errc::out_of_range, fmt::format("{} does not fit an immediate", value));
    n.imm = static_cast<int32_t>(value);
    return {};
  }
  if (c == op::kLdx || c == op::kSt || c == op::kStx) {
    if (x.r.kind != BPF_CORE_FIELD_BYTE_OFFSET)
      return x.fail(Errc::bad_format, "a load or store can only take a field offset");
    if (static_cast<uint64_t>(n.off) != local)
      return x.fail(Errc::bad_format, fmt::format("the instruction's offset is {}, the object's BTF says {}", n.off, local));
    if (value > static_cast<uint64_t>(std::numeric_limits<int16_t>::max()))
      return x.fail(Errc::out_of_range, fmt::format("offset {} does not fit a load's 16 bits", value));
    if (size_changed)
      return x.fail(Errc::unsupported, "the field's size differs in the target: a direct load cannot be resized here");
    n.off = static_cast<int16_t>(value);
    return {};
  }
  return x.fail(Errc::bad_format, fmt::format("instruction {:#04x} cannot carry a CO-RE relocation", n.code));
}

Result<void> apply_one(LoadedProgram& p, const CoreRelo& r, const btf* local, const TargetTypes* target) {
  Relo x{p, r, local, fmt::format("type {}", r.type_id)};
  if (!core_kind_supported(r.kind)) return x.fail(Errc::unsupported, "this kind is not supported");
  auto acc = parse_access(x);
  if (!acc) return std::move(acc).error();
  const TargetTypes::Impl* tt = target ? &target->impl() : nullptr;
  const std::string where = tt ? tt->path : std::string();
  switch (r.kind) {
    case BPF_CORE_FIELD_BYTE_OFFSET:
    case BPF_CORE_FIELD_BYTE_SIZE:
    case BPF_CORE_FIELD_EXISTS:
    case BPF_CORE_FIELD_SIGNED: {
      std::vector<Step> steps;
      auto lf = local_field(x, *acc, &steps);
      if (!lf) return std::move(lf).error();
      uint32_t id = r.type_id;
      const btf_type* rt = skip_mods(local, &id);
      auto value_of = [&](const Field& f) -> uint64_t {
        switch (r.kind) {
          case BPF_CORE_FIELD_BYTE_OFFSET: return f.offset;
          case BPF_CORE_FIELD_BYTE_SIZE: return f.size;
          case BPF_CORE_FIELD_EXISTS: return f.exists;
          default: return f.is_signed;
        }
      };
      Field tf = *lf;
      const std::string root = essential(libbpf().btf__name_by_offset(local, rt->name_off));
      if (is_context_type(p, rt, root)) {
        auto f = context_field(x, steps, acc->size());
        if (!f) return std::move(f).error();
        if (!f->exists && r.kind != BPF_CORE_FIELD_EXISTS)
          return x.fail(Errc::not_found, fmt::format("utramp's uprobe context has no register '{}' (struct "
                                                     "pt_regs: {})",
                                                     steps[1].name, context_fields()));
        return patch(x, p.insns, value_of(*lf), value_of(*f), f->size != lf->size);
      }
      if (tt) {
        auto f = target_field(x, *tt, dwarf_tag_for(rt), root, steps);
        if (!f) return std::move(f).error();
        tf = *f;
      }
      if (!tf.exists && r.kind != BPF_CORE_FIELD_EXISTS)
        return x.fail(Errc::not_found, fmt::format("not in the target's DWARF ({})", where));
      return patch(x, p.insns, value_of(*lf), value_of(tf), tf.size != lf->size);
    }
    case BPF_CORE_TYPE_ID_LOCAL: return patch(x, p.insns, r.type_id, r.type_id, false);
    case BPF_CORE_TYPE_EXISTS:
    case BPF_CORE_TYPE_SIZE: {
      const btf_type* t = libbpf().btf__type_by_id(local, r.type_id);
      if (!t) return x.fail(Errc::bad_format, "type not in the object's BTF");
      const std::string name = essential(libbpf().btf__name_by_offset(local, t->name_off));
      const int tag = dwarf_tag_for(t);
      if (name.empty() || !tag) return x.fail(Errc::unsupported, "only named structs, unions, enums, typedefs and base types");
      x.what = name;
      const long ls = libbpf().btf__resolve_size(local, r.type_id);
      const uint64_t lv = r.kind == BPF_CORE_TYPE_EXISTS ? 1 : static_cast<uint64_t>(ls < 0 ? 0 : ls);
      if (is_context_type(p, t, name))
        return patch(x, p.insns, lv, r.kind == BPF_CORE_TYPE_EXISTS ? 1 : kPtRegsSize, false);
      if (!tt) return patch(x, p.insns, lv, lv, false);
      auto it = tt->types.find({tag, name});
      if (r.kind == BPF_CORE_TYPE_EXISTS) return patch(x, p.insns, lv, it != tt->types.end(), false);
      if (it == tt->types.end()) return x.fail(Errc::not_found, fmt::format("not in the target's DWARF ({})", where));
      auto s = size_of(it->second);
      if (!s) return x.fail(Errc::bad_format, "no size in " + where);
      return patch(x, p.insns, lv, *s, false);
    }
    case BPF_CORE_ENUMVAL_EXISTS:
    case BPF_CORE_ENUMVAL_VALUE: {
      uint32_t id = r.type_id;
      const btf_type* t = skip_mods(local, &id);
      if (!t || !btf_is_any_enum(t)) return x.fail(Errc::bad_format, "the root type is not an enum");
      const std::string en = essential(libbpf().btf__name_by_offset(local, t->name_off));
      const uint32_t k = (*acc)[0];
      if (k >= btf_vlen(t)) return x.fail(Errc::bad_format, fmt::format("enumerator {} out of range", k));
      const char* vn = nullptr;
      uint64_t lval = 0;
      if (btf_is_enum(t)) {
        vn = libbpf().btf__name_by_offset(local, btf_enum(t)[k].name_off);
        lval = btf_kflag(t) ? static_cast<uint64_t>(static_cast<int64_t>(btf_enum(t)[k].val)) : uint32_t(btf_enum(t)[k].val);
      } else {
        vn = libbpf().btf__name_by_offset(local, btf_enum64(t)[k].name_off);
        lval = btf_enum64_value(&btf_enum64(t)[k]);
      }
      x.what = fmt::format("enum {}::{}", en, vn ? vn : "?");
      const uint64_t lv = r.kind == BPF_CORE_ENUMVAL_EXISTS ? 1 : lval;
      if (!tt) return patch(x, p.insns, lv, lv, false);
      std::optional<uint64_t> tv;
      if (auto it = tt->types.find({DW_TAG_enumeration_type, en}); it != tt->types.end() && vn) {
        Dwarf_Die e = it->second, c;
        if (dwarf_child(&e, &c) == 0) {
          do {
            const char* cn = dwarf_diename(&c);
            Dwarf_Attribute a;
            Dwarf_Sword sv = 0;
            if (dwarf_tag(&c) != DW_TAG_enumerator || !cn || std::strcmp(cn, vn) != 0 ||
                !dwarf_attr(&c, DW_AT_const_value, &a))
              continue;
            Dwarf_Word uv = 0;
            if (dwarf_formsdata(&a, &sv) == 0) tv = static_cast<uint64_t>(sv);
            else if (dwarf_formudata(&a, &uv) == 0) tv = uv;
            break;
          } while (dwarf_siblingof(&c, &c) == 0);
        }
      }
      if (r.kind == BPF_CORE_ENUMVAL_EXISTS) return patch(x, p.insns, lv, tv.has_value(), false);
      if (!tv) return x.fail(Errc::not_found, fmt::format("not in the target's DWARF ({})", where));
      return patch(x, p.insns, lv, *tv, false);
    }
  }
  return x.fail(Errc::unsupported, "this kind is not supported");
}

}  // namespace

TargetTypes::~TargetTypes() = default;
const std::string& TargetTypes::path() const { return impl_->path; }

Result<std::shared_ptr<TargetTypes>> TargetTypes::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  auto fd = os::open_regular(path);
  if (!fd) return std::move(fd).error();
  impl->fd = *fd;
  impl->dw = dwarf_begin(impl->fd, DWARF_C_READ);
  if (!impl->dw) return make_error(Errc::not_found, fmt::format("{}: no DWARF ({})", path, dwarf_errmsg(-1)));
  Dwarf_CU* cu = nullptr;
  Dwarf_Die cudie;
  while (dwarf_get_units(impl->dw, cu, &cu, nullptr, nullptr, &cudie, nullptr) == 0) index_types(*impl, &cudie, 0);
  std::shared_ptr<TargetTypes> t(new TargetTypes);
  t->impl_ = std::move(impl);
  return t;
}

Result<void> apply_core(LoadedProgram& p, const btf* local, const TargetTypes* target) {
  if (p.core.empty()) return {};
  if (!local) return make_error(Errc::bad_format, fmt::format("program '{}': CO-RE records but no BTF", p.name));
  for (const CoreRelo& r : p.core) UTRAMP_TRY(apply_one(p, r, local, target));
  return {};
}

}  // namespace utramp::ebpf
