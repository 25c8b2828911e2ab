#include "abi/signature.hpp"

#include <fmt/format.h>

#include <cctype>

namespace utramp::abi {

Signature Signature::fallback() {
  Signature s;
  s.args.assign(6, ArgType::integer());
  s.ret = RetType::pair(Part::integer, Part::integer, 16);
  s.variadic = true;  // preserve every argument register, al included
  s.known = false;
  s.source = "default";
  return s;
}

int Signature::arg_slots() const {
  int n = 0;
  for (const auto& a : args) n += a.kind == ArgType::Kind::memory ? 1 : a.eightbytes();
  return n;
}

namespace {

std::string part_name(Part p) { return p == Part::integer ? "i" : p == Part::sse ? "s" : "-"; }

std::string arg_name(const ArgType& a) {
  if (a.kind == ArgType::Kind::memory) return fmt::format("m{}", a.size);
  if (a.eightbytes() == 2) return fmt::format("s{}:{}{}", a.size, part_name(a.parts[0]), part_name(a.parts[1]));
  if (a.parts[0] == Part::sse) return a.size == 4 ? "f32" : "f64";
  return fmt::format("i{}", a.size * 8);
}

std::string ret_name(const RetType& r) {
  switch (r.kind) {
    case RetType::Kind::none: return "void";
    case RetType::Kind::x87: return "f80";
    case RetType::Kind::memory: return fmt::format("m{}", r.size);
    case RetType::Kind::reg:
      if (r.parts[1] != Part::none)
        return fmt::format("s{}:{}{}", r.size, part_name(r.parts[0]), part_name(r.parts[1]));
      if (r.parts[0] == Part::sse) return r.size == 4 ? "f32" : "f64";
      return fmt::format("i{}", r.size * 8);
  }
  return "?";
}

std::string trim(std::string s) {
  while (!s.empty() && isspace(static_cast<unsigned char>(s.front()))) s.erase(s.begin());
  while (!s.empty() && isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

Result<Part> parse_part(char c, const std::string& whole) {
  if (c == 'i') return Part::integer;
  if (c == 's') return Part::sse;
  return make_error(Errc::invalid_argument,
                    fmt::format("signature '{}': eightbyte class '{}' is not 'i' or 's'", whole, c));
}

// One type token, as an argument (ret == false) or return type.
Result<std::pair<ArgType, RetType>> parse_type(const std::string& t, const std::string& whole) {
  auto bad = [&](std::string why) {
    return make_error(Errc::invalid_argument, fmt::format("signature '{}': type '{}': {}", whole, t, why));
  };
  static const struct { const char* name; uint16_t size; bool sse; } kScalars[] = {
      {"i8", 1, false}, {"u8", 1, false}, {"i16", 2, false}, {"u16", 2, false}, {"i32", 4, false},
      {"u32", 4, false}, {"i64", 8, false}, {"u64", 8, false}, {"ptr", 8, false}, {"f32", 4, true},
      {"f64", 8, true}};
  for (const auto& s : kScalars)
    if (t == s.name)
      return std::pair{s.sse ? ArgType::sse(s.size) : ArgType::integer(s.size),
                       s.sse ? RetType::sse(s.size) : RetType::integer(s.size)};
  if (t == "i128" || t == "u128")  // psABI: 16-byte aligned, on the stack too
    return std::pair{ArgType::pair(Part::integer, Part::integer, 16, 16),
                     RetType::pair(Part::integer, Part::integer)};
  if (t == "f80") return std::pair{ArgType::memory(16, 16), RetType::x87()};
  if (t.size() > 1 && (t[0] == 'm' || t[0] == 's') && isdigit(static_cast<unsigned char>(t[1]))) {
    size_t colon = t.find(':');
    const std::string num = t.substr(1, colon == std::string::npos ? std::string::npos : colon - 1);
    if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos) return bad("bad size");
    const unsigned long size = std::stoul(num);
    if (size == 0 || size > 65535) return bad("size out of range");
    if (t[0] == 'm') {
      if (colon != std::string::npos) return bad("a memory struct takes no classes");
      return std::pair{ArgType::memory(static_cast<uint16_t>(size)), RetType::memory(static_cast<uint16_t>(size))};
    }
    if (colon == std::string::npos) return bad("a register struct needs its classes, e.g. s16:is");
    const std::string parts = t.substr(colon + 1);
    const size_t want = size <= 8 ? 1 : size <= 16 ? 2 : 0;
    if (want == 0) return bad("structs over 16 bytes are passed in memory: use m<size>");
    if (parts.size() != want) return bad(fmt::format("{} bytes need {} class letter(s)", size, want));
    auto p0 = parse_part(parts[0], whole);
    if (!p0) return std::move(p0).error();
    Part p1 = Part::none;
    if (want == 2) {
      auto p = parse_part(parts[1], whole);
      if (!p) return std::move(p).error();
      p1 = *p;
    }
    ArgType a{ArgType::Kind::reg, static_cast<uint16_t>(size), 8, {*p0, p1}};
    RetType r{RetType::Kind::reg, static_cast<uint16_t>(size), {*p0, p1}, /*aggregate=*/true};
    return std::pair{a, r};
  }
  return bad("unknown type");
}

}  // namespace

std::string Signature::describe() const {
  std::string out = "(";
  for (size_t i = 0; i < args.size(); ++i) out += (i ? ", " : "") + arg_name(args[i]);
  if (variadic && known) out += args.empty() ? "..." : ", ...";
  out += ") -> " + ret_name(ret);
  if (noreturn) out += " noreturn";
  return out;
}

Result<Signature> parse_signature(const std::string& text) {
  Signature sig;
  sig.source = "options";
  const size_t arrow = text.find("->");
  if (arrow == std::string::npos)
    return make_error(Errc::invalid_argument,
                      fmt::format("signature '{}': no '->' before the return type", text));
  std::string args = trim(text.substr(0, arrow));
  // describe()'s form "(a, b) -> r" is accepted too.
  if (args.size() >= 2 && args.front() == '(' && args.back() == ')') args = trim(args.substr(1, args.size() - 2));
  std::string ret = trim(text.substr(arrow + 2));
  if (ret.ends_with("noreturn")) {
    sig.noreturn = true;
    ret = trim(ret.substr(0, ret.size() - 8));
  }
  if (ret == "void") {
    sig.ret = RetType::void_();
  } else {
    auto r = parse_type(ret, text);
    if (!r) return std::move(r).error();
    sig.ret = r->second;
  }
  size_t pos = 0;
  while (!args.empty() && args != "void" && pos <= args.size()) {
    size_t comma = args.find(',', pos);
    std::string tok = trim(args.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (tok == "...") {
      if (comma != std::string::npos)
        return make_error(Errc::invalid_argument, fmt::format("signature '{}': '...' must come last", text));
      sig.variadic = true;
      break;
    }
    if (tok.empty()) return make_error(Errc::invalid_argument, fmt::format("signature '{}': empty argument", text));
    auto a = parse_type(tok, text);
    if (!a) return std::move(a).error();
    sig.args.push_back(a->first);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return sig;
}

}  // namespace utramp::abi
