#include "ebpf/btf_value.hpp"
#include "ebpf/libbpf.hpp"

#include <bpf/btf.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>

namespace utramp::ebpf {

namespace {

using ojson = nlohmann::ordered_json;

// Deep enough for any C type a program streams; a cycle through pointers cannot occur
// (pointers are not followed), this only bounds a malformed BTF.
constexpr int kMaxDepth = 32;

std::string hex(std::span<const uint8_t> b) {
  std::string s;
  s.reserve(2 * b.size());
  for (uint8_t x : b) s += fmt::format("{:02x}", x);
  return s;
}

// Typedefs, const, volatile, restrict and type tags do not change a value's bytes.
const btf_type* skip_mods(const btf* b, uint32_t& id) {
  for (int i = 0; i < kMaxDepth; ++i) {
    const btf_type* t = libbpf().btf__type_by_id(b, id);
    if (!t) return nullptr;
    if (!btf_is_typedef(t) && !btf_is_mod(t) && !btf_is_type_tag(t)) return t;
    id = t->type;
  }
  return nullptr;
}

// `bits` bits of `bytes` from bit `off` (little-endian), at most 64.
uint64_t bits_at(std::span<const uint8_t> bytes, uint64_t off, uint32_t bits) {
  uint64_t v = 0;
  for (uint32_t i = 0; i < bits && i < 64; ++i) {
    const uint64_t at = off + i;
    if (at / 8 >= bytes.size()) break;
    v |= uint64_t((bytes[at / 8] >> (at % 8)) & 1) << i;
  }
  return v;
}

ojson int_value(bool is_signed, bool is_bool, uint64_t v, uint32_t bits) {
  if (is_bool) return v != 0;
  if (is_signed && bits > 0 && bits < 64) {
    const unsigned shift = 64 - bits;
    return static_cast<int64_t>(v << shift) >> shift;
  }
  if (is_signed) return static_cast<int64_t>(v);
  return v;
}

ojson value(const btf* b, uint32_t id, std::span<const uint8_t> bytes, int depth);

// Members of a struct or union, anonymous ones' members lifted into `out`.
void members(const btf* b, const btf_type* t, std::span<const uint8_t> bytes, int depth, ojson& out) {
  const struct btf_member* m = btf_members(t);
  const bool is_union = btf_is_union(t);
  for (uint16_t i = 0; i < btf_vlen(t); ++i, ++m) {
    const uint32_t bit_off = btf_member_bit_offset(t, i);
    const uint32_t bf = btf_member_bitfield_size(t, i);
    const char* name = libbpf().btf__name_by_offset(b, m->name_off);
    // A member that starts past the bytes there are is left out (the record was cut).
    if ((bf ? (uint64_t(bit_off) + bf + 7) / 8 : uint64_t(bit_off) / 8 + 1) > bytes.size()) continue;
    ojson v;
    if (bf) {
      uint32_t mid = m->type;
      const btf_type* mt = skip_mods(b, mid);
      const bool sgn = mt && btf_is_int(mt) && (btf_int_encoding(mt) & BTF_INT_SIGNED);
      const bool boolean = mt && btf_is_int(mt) && (btf_int_encoding(mt) & BTF_INT_BOOL);
      const uint64_t raw = bits_at(bytes, bit_off, bf);
      if (mt && btf_is_any_enum(mt)) {
        uint8_t buf[8];
        std::memcpy(buf, &raw, sizeof buf);  // the enum's own width reads it back
        v = value(b, mid, buf, depth + 1);
      } else {
        v = int_value(sgn, boolean, raw, bf);
      }
    } else {
      v = value(b, m->type, bytes.subspan(bit_off / 8), depth + 1);
    }
    if ((!name || !*name) && v.is_object()) {
      for (auto& [k, x] : v.items()) out[k] = x;
    } else {
      out[name && *name ? name : fmt::format("_{}", i)] = std::move(v);
    }
    if (is_union) break;  // which member was written is not knowable: the first one
  }
}

ojson value(const btf* b, uint32_t id, std::span<const uint8_t> bytes, int depth) {
  if (depth > kMaxDepth) return hex(bytes);
  const btf_type* t = skip_mods(b, id);
  if (!t) return hex(bytes);
  const int64_t sz = libbpf().btf__resolve_size(b, id);
  if (sz >= 0 && static_cast<uint64_t>(sz) < bytes.size()) bytes = bytes.first(static_cast<size_t>(sz));
  if (btf_is_int(t)) {
    const uint32_t enc = btf_int_encoding(t), nbits = btf_int_bits(t);
    if (nbits > 64) return hex(bytes);  // __int128: no JSON number holds it
    if (sz < 0 || bytes.size() < static_cast<size_t>(sz)) return nullptr;  // cut off
    return int_value(enc & BTF_INT_SIGNED, enc & BTF_INT_BOOL, bits_at(bytes, btf_int_offset(t), nbits), nbits);
  }
  if (btf_is_ptr(t)) {
    if (bytes.size() < 8) return nullptr;
    return bits_at(bytes, 0, 64);
  }
  if (btf_is_float(t)) {
    if (bytes.size() < t->size) return nullptr;  // cut off
    if (t->size == 8 && bytes.size() >= 8) {
      double d;
      std::memcpy(&d, bytes.data(), 8);
      return d;
    }
    if (t->size == 4 && bytes.size() >= 4) {
      float f;
      std::memcpy(&f, bytes.data(), 4);
      return static_cast<double>(f);
    }
    return hex(bytes);
  }
  if (btf_is_any_enum(t)) {
    if (t->size > 8 || t->size == 0) return hex(bytes);
    if (bytes.size() < t->size) return nullptr;  // cut off
    const bool sgn = btf_kflag(t);
    const uint64_t raw = bits_at(bytes, 0, 8 * t->size);
    const ojson num = int_value(sgn, false, raw, 8 * t->size);
    const uint64_t mask = t->size == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * t->size)) - 1;
    if (btf_is_enum(t)) {
      const struct btf_enum* e = btf_enum(t);
      for (uint16_t i = 0; i < btf_vlen(t); ++i, ++e)
        if ((static_cast<uint64_t>(static_cast<int64_t>(e->val)) & mask) == raw)
          return libbpf().btf__name_by_offset(b, e->name_off);
    } else {
      const struct btf_enum64* e = btf_enum64(t);
      for (uint16_t i = 0; i < btf_vlen(t); ++i, ++e)
        if ((btf_enum64_value(e) & mask) == raw) return libbpf().btf__name_by_offset(b, e->name_off);
    }
    return num;
  }
  if (btf_is_array(t)) {
    const struct btf_array* a = btf_array(t);
    uint32_t eid = a->type;
    const btf_type* et = skip_mods(b, eid);
    const int64_t esz = libbpf().btf__resolve_size(b, eid);
    if (!et || esz <= 0) return hex(bytes);
    if (btf_is_int(et) && esz == 1 && !(btf_int_encoding(et) & BTF_INT_BOOL)) {
      size_t n = 0;
      while (n < bytes.size() && bytes[n]) ++n;
      return std::string(reinterpret_cast<const char*>(bytes.data()), n);
    }
    ojson arr = ojson::array();
    for (uint32_t i = 0; i < a->nelems; ++i) {
      const uint64_t off = uint64_t(i) * static_cast<uint64_t>(esz);
      if (off >= bytes.size()) break;
      arr.push_back(value(b, eid, bytes.subspan(off), depth + 1));
    }
    return arr;
  }
  if (btf_is_composite(t)) {
    ojson obj = ojson::object();
    members(b, t, bytes, depth, obj);
    return obj;
  }
  return hex(bytes);
}

void render(const ojson& v, std::string& out) {
  if (v.is_object()) {
    if (v.empty()) {
      out += "{}";
      return;
    }
    out += "{ ";
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      if (!first) out += ", ";
      first = false;
      out += '.';
      out += k;
      out += " = ";
      render(x, out);
    }
    out += " }";
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ", ";
      render(v[i], out);
    }
    out += ']';
  } else if (v.is_null()) {
    out += "(cut)";
  } else {
    out += v.dump();  // numbers, true/false, strings quoted and escaped
  }
}

}  // namespace

nlohmann::ordered_json btf_value(const btf* b, uint32_t type_id, std::span<const uint8_t> bytes) {
  if (!b) return hex(bytes);
  return value(b, type_id, bytes, 0);
}

std::string render_value(const nlohmann::ordered_json& v) {
  std::string out;
  render(v, out);
  return out;
}

std::string type_name(const btf* b, uint32_t type_id) {
  const btf_type* t = b ? libbpf().btf__type_by_id(b, type_id) : nullptr;
  if (!t) return fmt::format("type {}", type_id);
  const char* n = libbpf().btf__name_by_offset(b, t->name_off);
  const std::string name = n ? n : "";
  if (btf_is_struct(t)) return name.empty() ? "struct (anonymous)" : "struct " + name;
  if (btf_is_union(t)) return name.empty() ? "union (anonymous)" : "union " + name;
  if (btf_is_any_enum(t)) return name.empty() ? "enum (anonymous)" : "enum " + name;
  if (btf_is_array(t))
    return fmt::format("{}[{}]", type_name(b, btf_array(t)->type), btf_array(t)->nelems);
  if (btf_is_ptr(t)) return type_name(b, t->type) + " *";
  return name.empty() ? fmt::format("type {}", type_id) : name;
}

Result<uint32_t> find_record_type(const btf* b, uint64_t size, const std::string& name) {
  if (!b) return make_error(Errc::not_found, "the object has no BTF (build it with clang -g)");
  std::string want = name;
  bool want_union = false;
  if (want.starts_with("struct ")) want = want.substr(7);
  else if (want.starts_with("union ")) want = want.substr(6), want_union = true;
  std::vector<uint32_t> found;
  for (uint32_t id = 1; id < libbpf().btf__type_cnt(b); ++id) {
    const btf_type* t = libbpf().btf__type_by_id(b, id);
    if (!t || !btf_is_composite(t)) continue;
    const char* n = libbpf().btf__name_by_offset(b, t->name_off);
    if (!n || !*n) continue;
    if (!want.empty()) {
      if (want == n && (name == want || btf_is_union(t) == want_union)) found.push_back(id);
    } else if (t->size == size) {
      found.push_back(id);
    }
  }
  if (!want.empty()) {
    if (found.empty()) return make_error(Errc::not_found, fmt::format("no struct or union '{}' in the object's BTF", want));
    return found.front();
  }
  if (found.size() == 1) return found.front();
  if (found.empty())
    return make_error(Errc::not_found, fmt::format("no named struct of {} bytes in the object's BTF", size));
  std::vector<std::string> names;
  for (uint32_t id : found) names.push_back(type_name(b, id));
  return make_error(Errc::invalid_argument,
                    fmt::format("{} structs of {} bytes in the object's BTF ({})", found.size(), size,
                                fmt::join(names, ", ")));
}

}  // namespace utramp::ebpf
