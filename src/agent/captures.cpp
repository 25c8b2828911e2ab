#include "agent/captures.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace utramp::agent {

using abi::ArgType;
using abi::Part;
using abi::RetType;
using abi::Scalar;
using trace::ValueFormat;

namespace {

// The format and width of a value of SCALAR (none: unknown) whose eightbyte holds
// `bytes`, as SPEC asks.
void shape(const ValueSpec& spec, Scalar scalar, bool sse, uint16_t bytes, ftrace::FuncRecord::Value* out) {
  char cls = spec.cls;
  if (cls == 0) {
    switch (scalar) {
      case Scalar::sint: cls = 'd'; break;
      case Scalar::uint:
      case Scalar::boolean: cls = 'u'; break;
      case Scalar::character: cls = 'c'; break;
      case Scalar::floating: cls = 'f'; break;
      case Scalar::pointer: cls = 'x'; break;
      case Scalar::none: cls = sse ? 'f' : 'd'; break;
    }
  }
  unsigned width = spec.bits ? spec.bits / 8u : std::min<unsigned>(bytes, 8);
  if (cls == 'c' && !spec.bits) width = 1;
  if (cls == 's') width = 8;
  out->bytes = static_cast<uint8_t>(width);
  switch (cls) {
    case 'u': out->fmt = ValueFormat::uinteger; break;
    case 'x': out->fmt = ValueFormat::pointer; break;
    case 's': out->fmt = ValueFormat::string; break;
    case 'c': out->fmt = ValueFormat::character; break;
    case 'f': out->fmt = width == 4 ? ValueFormat::flt : ValueFormat::dbl; break;
    default: out->fmt = ValueFormat::integer; break;
  }
}

}  // namespace

abi::Signature register_signature(const ValueSpec* ret) {
  abi::Signature s = abi::Signature::fallback();
  for (int i = 0; i < 8; ++i) s.args.push_back(ArgType::sse(8));
  if (ret && ret->cls == 'f') s.ret = RetType::sse(ret->bits == 32 ? 4 : 8);
  s.source = "default (no DWARF: integer and SSE argument registers)";
  return s;
}

Result<void> resolve_arg(const ArgCapture& cap, const abi::Signature& sig, bool typed,
                         ftrace::FuncRecord::Value* out) {
  int ints = 0, fps = 0;
  uint8_t slot = 0;
  for (const ArgType& a : sig.args) {
    if (a.kind == ArgType::Kind::memory) {  // one slot (its address), in no register
      ++slot;
      continue;
    }
    for (int i = 0; i < a.eightbytes(); ++i, ++slot) {
      const bool sse = a.parts[i] == Part::sse;
      int& count = sse ? fps : ints;
      if (sse == cap.fp && count == cap.index) {
        out->slot = slot;
        out->index = static_cast<uint8_t>(cap.fp ? 16 + cap.index : cap.index);
        const auto bytes = static_cast<uint16_t>(std::min(8, a.size - 8 * i));
        shape(cap.spec, typed && a.eightbytes() == 1 ? a.scalar : Scalar::none, sse, typed ? bytes : 8, out);
        return {};
      }
      ++count;
    }
  }
  return make_error(Errc::not_found,
                    fmt::format("{}{}: the function has {} integer and {} floating-point argument(s) ({} "
                                "signature {})",
                                cap.fp ? "fparg" : "arg", cap.index + 1, ints, fps,
                                typed ? "DWARF's" : "without DWARF, the registers'", sig.describe()));
}

Result<void> resolve_ret(const ValueSpec& spec, const abi::Signature& sig, bool typed,
                         ftrace::FuncRecord::Value* out) {
  const RetType& r = sig.ret;
  out->slot = 0;
  switch (r.kind) {
    case RetType::Kind::none:
      return make_error(Errc::not_found, "retval: the function returns nothing (DWARF: void)");
    case RetType::Kind::x87:
      return make_error(Errc::unsupported, "retval: a long double (x87 st0) is not shown");
    case RetType::Kind::memory:  // the buffer's address, returned in rax
      shape(spec.cls ? spec : ValueSpec{'x', 64}, Scalar::none, false, 8, out);
      return {};
    case RetType::Kind::reg: break;
  }
  const bool sse = r.parts[0] == Part::sse;
  if (typed && spec.cls == 'f' && !sse)
    return make_error(Errc::invalid_argument,
                      fmt::format("retval/f: DWARF says the function returns {} in rax, not a floating "
                                  "point value in xmm0",
                                  sig.describe()));
  const auto bytes = static_cast<uint16_t>(std::min<int>(8, r.size));
  shape(spec, typed && r.parts[1] == Part::none ? r.scalar : Scalar::none, sse, typed ? bytes : 8, out);
  return {};
}

}  // namespace utramp::agent
