#include "ebpf/asm.hpp"

#include <fmt/format.h>

#include <cctype>
#include <limits>
#include <map>
#include <optional>
#include <string>

namespace utramp::ebpf {

namespace {

using namespace op;

// What a mnemonic assembles to, before operands.
struct Form {
  enum Kind : uint8_t {
    alu,       // dst, reg|imm
    alu_reg,   // dst, reg (movsx)
    unary,     // dst (neg, byte swaps)
    jump,      // ja: target
    jump32,    // ja32: target in imm
    cond,      // dst, reg|imm, target
    call,      // imm | %reg | local NAME | helper N
    exit,
    lddw,      // dst, imm64
    ldx,       // dst, [src+off]
    st,        // [dst+off], imm
    stx,       // [dst+off], src
  } kind;
  uint8_t code;       // opcode without the source bit
  int16_t off = 0;    // sdiv/smod/movsx
  int32_t imm = 0;    // byte swaps
};

std::map<std::string, Form, std::less<>> build_forms() {
  std::map<std::string, Form, std::less<>> m;
  const std::pair<const char*, uint8_t> alus[] = {
      {"add", kAdd}, {"sub", kSub}, {"mul", kMul}, {"div", kDiv}, {"or", kOr},
      {"and", kAnd}, {"lsh", kLsh}, {"rsh", kRsh}, {"mod", kMod}, {"xor", kXor},
      {"mov", kMov}, {"arsh", kArsh}};
  for (auto [name, o] : alus) {
    m[name] = {Form::alu, uint8_t(kAlu64 | o)};
    m[std::string(name) + "32"] = {Form::alu, uint8_t(kAlu | o)};
  }
  m["sdiv"] = {Form::alu, uint8_t(kAlu64 | kDiv), 1};
  m["sdiv32"] = {Form::alu, uint8_t(kAlu | kDiv), 1};
  m["smod"] = {Form::alu, uint8_t(kAlu64 | kMod), 1};
  m["smod32"] = {Form::alu, uint8_t(kAlu | kMod), 1};
  m["neg"] = {Form::unary, uint8_t(kAlu64 | kNeg)};
  m["neg32"] = {Form::unary, uint8_t(kAlu | kNeg)};
  for (int bits : {8, 16, 32}) {
    m[fmt::format("movsx{}64", bits)] = {Form::alu_reg, uint8_t(kAlu64 | kMov | kX), int16_t(bits)};
    if (bits != 32)
      m[fmt::format("movsx{}32", bits)] = {Form::alu_reg, uint8_t(kAlu | kMov | kX), int16_t(bits)};
  }
  for (int bits : {16, 32, 64}) {
    m[fmt::format("le{}", bits)] = {Form::unary, uint8_t(kAlu | kEnd | kToLe), 0, bits};
    m[fmt::format("be{}", bits)] = {Form::unary, uint8_t(kAlu | kEnd | kToBe), 0, bits};
    m[fmt::format("bswap{}", bits)] = {Form::unary, uint8_t(kAlu64 | kEnd), 0, bits};
    m[fmt::format("swap{}", bits)] = {Form::unary, uint8_t(kAlu64 | kEnd), 0, bits};
  }
  m["ja"] = {Form::jump, kJaOp};
  m["ja32"] = {Form::jump32, kJa32Op};
  const std::pair<const char*, uint8_t> jmps[] = {
      {"jeq", kJeq}, {"jgt", kJgt}, {"jge", kJge}, {"jset", kJset}, {"jne", kJne}, {"jsgt", kJsgt},
      {"jsge", kJsge}, {"jlt", kJlt}, {"jle", kJle}, {"jslt", kJslt}, {"jsle", kJsle}};
  for (auto [name, o] : jmps) {
    m[name] = {Form::cond, uint8_t(kJmp | o)};
    m[std::string(name) + "32"] = {Form::cond, uint8_t(kJmp32 | o)};
  }
  m["call"] = {Form::call, kCallOp};
  m["exit"] = {Form::exit, kExitOp};
  m["lddw"] = {Form::lddw, kLddw};
  const std::pair<const char*, uint8_t> sizes[] = {{"b", kB}, {"h", kH}, {"w", kW}, {"dw", kDW}};
  for (auto [sfx, sz] : sizes) {
    m[std::string("ldx") + sfx] = {Form::ldx, uint8_t(kLdx | kMem | sz)};
    if (sz != kDW) m[std::string("ldxs") + sfx] = {Form::ldx, uint8_t(kLdx | kMemSx | sz)};
    m[std::string("st") + sfx] = {Form::st, uint8_t(kSt | kMem | sz)};
    m[std::string("stx") + sfx] = {Form::stx, uint8_t(kStx | kMem | sz)};
  }
  return m;
}

const std::map<std::string, Form, std::less<>>& forms() {
  static const auto m = build_forms();
  return m;
}

// Operands separated by commas and/or blanks; a bracketed memory operand is one token
// even with blanks inside.
std::vector<std::string> tokenize(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth <= 0 && (c == ',' || std::isspace(static_cast<unsigned char>(c)))) {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
      continue;
    }
    if (depth > 0 && std::isspace(static_cast<unsigned char>(c))) continue;
    cur += c;
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

struct Number {
  bool neg = false;
  bool hex = false;
  uint64_t mag = 0;
};

std::optional<Number> parse_number(std::string_view s) {
  Number n;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    n.neg = s[0] == '-';
    s.remove_prefix(1);
  }
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    n.hex = true;
    s.remove_prefix(2);
  }
  if (s.empty()) return std::nullopt;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (base == 16 && c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (base == 16 && c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return std::nullopt;
    if (n.mag > (std::numeric_limits<uint64_t>::max() - d) / base) return std::nullopt;
    n.mag = n.mag * base + d;
  }
  return n;
}

// A value fitting `bits` (<= 64) bits: signed range, or (hex, non-negative) the raw
// unsigned bit pattern.
std::optional<int64_t> fit(const Number& n, int bits) {
  const uint64_t smax = bits == 64 ? uint64_t(INT64_MAX) : (uint64_t(1) << (bits - 1)) - 1;
  const uint64_t umax = bits == 64 ? UINT64_MAX : (uint64_t(1) << bits) - 1;
  if (n.neg) {
    if (n.mag > smax + 1) return std::nullopt;
    return static_cast<int64_t>(0 - n.mag);
  }
  if (n.mag <= smax) return static_cast<int64_t>(n.mag);
  // Above the signed range: only as a hexadecimal bit pattern (or any 64-bit value).
  if ((n.hex || bits == 64) && n.mag <= umax) {
    if (bits == 64) return static_cast<int64_t>(n.mag);
    return static_cast<int64_t>(n.mag | ~umax);  // sign-extend the pattern
  }
  return std::nullopt;
}

class Assembler {
 public:
  Assembler(std::string_view text, int first_line) : text_(text), first_line_(first_line) {}

  Result<std::vector<Insn>> run();

 private:
  struct Fixup {
    size_t slot;
    std::string label;
    int line;
    bool in_imm;  // ja32 and call local: the target goes in imm
  };

  Error err(const std::string& reason) const {
    return make_error(Errc::bad_format, fmt::format("line {}: {}", line_, reason));
  }
  Result<uint8_t> reg(std::string_view tok) const;
  Result<int32_t> imm32(std::string_view tok) const;
  Result<std::pair<uint8_t, int16_t>> memop(std::string_view tok) const;
  // A jump target: "+N"/"-N" now, or a label fixed up at the end.
  Result<int32_t> target(std::string_view tok, bool in_imm);

  // Operands parsed straight into the instruction's fields, one per operand shape of
  // the table above; each fails with the message reg/imm32/memop/target give.
  enum class Base : uint8_t { dst, src };
  Result<void> dst_reg(Insn& insn, std::string_view tok) const;
  Result<void> src_reg(Insn& insn, std::string_view tok) const;
  Result<void> imm(Insn& insn, std::string_view tok) const;
  Result<void> src_or_imm(Insn& insn, std::string_view tok) const;  // %rN sets kX
  Result<void> mem(Insn& insn, Base base, std::string_view tok) const;  // [%rN+off]
  Result<void> jump(Insn& insn, std::string_view tok, bool in_imm);
  Result<void> line(std::vector<std::string> toks);
  Result<void> lock(const std::vector<std::string>& toks);

  std::string_view text_;
  int first_line_;
  int line_ = 0;
  std::vector<Insn> out_;
  std::map<std::string, size_t, std::less<>> labels_;
  std::vector<Fixup> fixups_;
};

Result<uint8_t> Assembler::reg(std::string_view tok) const {
  if (tok.size() >= 3 && tok[0] == '%' && tok[1] == 'r') {
    auto n = parse_number(tok.substr(2));
    if (n && !n->neg && !n->hex && n->mag < kNumRegs) return static_cast<uint8_t>(n->mag);
  }
  return err(fmt::format("Invalid register: {}", tok));
}

Result<int32_t> Assembler::imm32(std::string_view tok) const {
  auto n = parse_number(tok);
  if (!n) return err(fmt::format("Invalid immediate: {}", tok));
  auto v = fit(*n, 32);
  if (!v) return err(fmt::format("Invalid immediate: {} does not fit in 32 bits", tok));
  return static_cast<int32_t>(*v);
}

Result<std::pair<uint8_t, int16_t>> Assembler::memop(std::string_view tok) const {
  if (tok.size() < 2 || tok.front() != '[' || tok.back() != ']')
    return err(fmt::format("Invalid memory operand: {} (expected [%rN+OFFSET])", tok));
  std::string_view in = tok.substr(1, tok.size() - 2);
  const size_t sign = in.find_first_of("+-");
  auto r = reg(in.substr(0, sign));
  if (!r) return std::move(r).error();
  if (sign == std::string_view::npos) return std::pair{*r, int16_t(0)};
  auto n = parse_number(in.substr(sign));
  if (!n) return err(fmt::format("Invalid offset: {}", in.substr(sign)));
  auto v = fit(Number{n->neg, false, n->mag}, 16);
  if (!v) return err(fmt::format("Invalid offset: {} does not fit in 16 bits", in.substr(sign)));
  return std::pair{*r, static_cast<int16_t>(*v)};
}

Result<int32_t> Assembler::target(std::string_view tok, bool in_imm) {
  if (!tok.empty() && (tok[0] == '+' || tok[0] == '-')) {
    auto n = parse_number(tok);
    auto v = n ? fit(Number{n->neg, false, n->mag}, in_imm ? 32 : 16) : std::nullopt;
    if (!v) return err(fmt::format("Invalid jump offset: {}", tok));
    return static_cast<int32_t>(*v);
  }
  fixups_.push_back({out_.size(), std::string(tok), line_, in_imm});
  return 0;
}

Result<void> Assembler::dst_reg(Insn& insn, std::string_view tok) const {
  auto r = reg(tok);
  if (!r) return std::move(r).error();
  insn.dst = *r;
  return {};
}

Result<void> Assembler::src_reg(Insn& insn, std::string_view tok) const {
  auto r = reg(tok);
  if (!r) return std::move(r).error();
  insn.src = *r;
  return {};
}

Result<void> Assembler::imm(Insn& insn, std::string_view tok) const {
  auto v = imm32(tok);
  if (!v) return std::move(v).error();
  insn.imm = *v;
  return {};
}

Result<void> Assembler::src_or_imm(Insn& insn, std::string_view tok) const {
  if (!tok.starts_with('%')) return imm(insn, tok);
  insn.code |= kX;
  return src_reg(insn, tok);
}

Result<void> Assembler::mem(Insn& insn, Base base, std::string_view tok) const {
  auto m = memop(tok);
  if (!m) return std::move(m).error();
  if (base == Base::dst) insn.dst = m->first;
  else insn.src = m->first;
  insn.off = m->second;
  return {};
}

Result<void> Assembler::jump(Insn& insn, std::string_view tok, bool in_imm) {
  auto t = target(tok, in_imm);
  if (!t) return std::move(t).error();
  if (in_imm) insn.imm = *t;
  else insn.off = static_cast<int16_t>(*t);
  return {};
}

Result<void> Assembler::lock(const std::vector<std::string>& toks) {
  // lock [fetch] OP[32] [dst+off], src
  size_t i = 1;
  const bool fetch = toks.size() > i && toks[i] == "fetch";
  if (fetch) ++i;
  if (toks.size() != i + 3) return err("Invalid number of operands for lock");
  std::string_view name = toks[i];
  const bool w32 = name.ends_with("32");
  if (w32) name.remove_suffix(2);
  int32_t imm;
  if (name == "add") imm = kAtomicAdd;
  else if (name == "or") imm = kAtomicOr;
  else if (name == "and") imm = kAtomicAnd;
  else if (name == "xor") imm = kAtomicXor;
  else if (name == "xchg" && !fetch) imm = kXchg;
  else if (name == "cmpxchg" && !fetch) imm = kCmpxchg;
  else return err(fmt::format("Invalid atomic operation: lock {}{}", fetch ? "fetch " : "", toks[i]));
  if (fetch) imm |= kFetch;
  Insn insn;
  insn.code = uint8_t(kStx | kAtomic | (w32 ? kW : kDW));
  insn.imm = imm;
  UTRAMP_TRY(mem(insn, Base::dst, toks[i + 1]));
  UTRAMP_TRY(src_reg(insn, toks[i + 2]));
  out_.push_back(insn);
  return {};
}

Result<void> Assembler::line(std::vector<std::string> toks) {
  const std::string& mn = toks[0];
  if (mn == "lock") return lock(toks);
  auto it = forms().find(mn);
  if (it == forms().end()) return err(fmt::format("Invalid mnemonic: {}", mn));
  const Form& f = it->second;
  const size_t nops = toks.size() - 1;
  auto count = [&](size_t want) -> Result<void> {
    if (nops != want) return err(fmt::format("Invalid number of operands for mnemonic: {}", mn));
    return {};
  };
  Insn insn;
  insn.code = f.code;
  insn.off = f.off;
  insn.imm = f.imm;
  switch (f.kind) {
    case Form::alu:
      UTRAMP_TRY(count(2));
      UTRAMP_TRY(dst_reg(insn, toks[1]));
      UTRAMP_TRY(src_or_imm(insn, toks[2]));
      break;
    case Form::alu_reg:
      UTRAMP_TRY(count(2));
      UTRAMP_TRY(dst_reg(insn, toks[1]));
      UTRAMP_TRY(src_reg(insn, toks[2]));
      break;
    case Form::unary:
      UTRAMP_TRY(count(1));
      UTRAMP_TRY(dst_reg(insn, toks[1]));
      break;
    case Form::jump:
    case Form::jump32:
      UTRAMP_TRY(count(1));
      UTRAMP_TRY(jump(insn, toks[1], f.kind == Form::jump32));
      break;
    case Form::cond:
      UTRAMP_TRY(count(3));
      UTRAMP_TRY(dst_reg(insn, toks[1]));
      UTRAMP_TRY(src_or_imm(insn, toks[2]));
      UTRAMP_TRY(jump(insn, toks[3], false));
      break;
    case Form::call: {
      if (nops == 2 && toks[1] == "local") {
        insn.src = kCallLocal;
        UTRAMP_TRY(jump(insn, toks[2], true));
        break;
      }
      if (nops == 2 && toks[1] == "helper") toks.erase(toks.begin() + 1);
      else if (nops == 2) return err(fmt::format("Invalid call mode: {}", toks[1]));
      if (toks.size() != 2) return err("Invalid number of operands for mnemonic: call");
      if (toks[1].starts_with('%')) {
        insn.code = kCallxOp;
        UTRAMP_TRY(dst_reg(insn, toks[1]));
        break;
      }
      UTRAMP_TRY(imm(insn, toks[1]));
      break;
    }
    case Form::exit:
      UTRAMP_TRY(count(0));
      break;
    case Form::lddw: {
      UTRAMP_TRY(count(2));
      UTRAMP_TRY(dst_reg(insn, toks[1]));
      auto n = parse_number(toks[2]);
      auto v = n ? fit(*n, 64) : std::nullopt;
      if (!v) return err(fmt::format("Invalid immediate: {} does not fit in 64 bits", toks[2]));
      const uint64_t u = static_cast<uint64_t>(*v);
      insn.imm = static_cast<int32_t>(static_cast<uint32_t>(u));
      Insn hi;
      hi.imm = static_cast<int32_t>(static_cast<uint32_t>(u >> 32));
      out_.push_back(insn);
      out_.push_back(hi);
      return {};
    }
    case Form::ldx:
      UTRAMP_TRY(count(2));
      UTRAMP_TRY(dst_reg(insn, toks[1]));
      UTRAMP_TRY(mem(insn, Base::src, toks[2]));
      break;
    case Form::st:
      UTRAMP_TRY(count(2));
      UTRAMP_TRY(mem(insn, Base::dst, toks[1]));
      UTRAMP_TRY(imm(insn, toks[2]));
      break;
    case Form::stx:
      UTRAMP_TRY(count(2));
      UTRAMP_TRY(mem(insn, Base::dst, toks[1]));
      UTRAMP_TRY(src_reg(insn, toks[2]));
      break;
  }
  out_.push_back(insn);
  return {};
}

Result<std::vector<Insn>> Assembler::run() {
  size_t pos = 0;
  line_ = first_line_ - 1;
  while (pos <= text_.size()) {
    size_t nl = text_.find('\n', pos);
    if (nl == std::string_view::npos) nl = text_.size();
    std::string_view l = text_.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_;
    if (auto hash = l.find('#'); hash != std::string_view::npos) l = l.substr(0, hash);
    std::vector<std::string> toks = tokenize(l);
    // Labels: "NAME:" alone or before an instruction.
    while (!toks.empty() && toks[0].size() > 1 && toks[0].back() == ':') {
      std::string name = toks[0].substr(0, toks[0].size() - 1);
      if (labels_.count(name)) return err(fmt::format("Duplicate label: {}", name));
      labels_[name] = out_.size();
      toks.erase(toks.begin());
    }
    if (toks.empty()) continue;
    UTRAMP_TRY(line(std::move(toks)));
  }
  if (!labels_.count("exit")) {
    for (size_t i = 0; i < out_.size(); ++i)
      if (out_[i].code == kExitOp) {
        labels_["exit"] = i;
        break;
      }
  }
  for (const Fixup& f : fixups_) {
    line_ = f.line;
    auto it = labels_.find(f.label);
    if (it == labels_.end()) return err(fmt::format("Invalid label: {}", f.label));
    const int64_t rel = static_cast<int64_t>(it->second) - static_cast<int64_t>(f.slot) - 1;
    if (f.in_imm) {
      out_[f.slot].imm = static_cast<int32_t>(rel);
    } else {
      if (rel < INT16_MIN || rel > INT16_MAX)
        return err(fmt::format("Jump to {} out of range: {} instructions", f.label, rel));
      out_[f.slot].off = static_cast<int16_t>(rel);
    }
  }
  return std::move(out_);
}

}  // namespace

Result<std::vector<Insn>> assemble(std::string_view text, int first_line) {
  return Assembler(text, first_line).run();
}

}  // namespace utramp::ebpf
