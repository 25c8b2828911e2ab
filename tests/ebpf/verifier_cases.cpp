#include "verifier_cases.hpp"

#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "abi/ctx.hpp"
#include "ebpf/asm.hpp"
#include "ebpf/helpers.hpp"

namespace utramp::ebpf::testing {

namespace {

// `map:NAME` and `map_value:NAME+OFF` become lddw immediates the assembler takes and
// assemble_case() recognises: this tag in the high 16 bits, the map index in bits
// 32-47, bit 31 for a value, the offset below.
constexpr uint64_t kTag = 0x7e5aull << 48;

std::string trim(std::string s) {
  s.erase(0, s.find_first_not_of(" \t\r"));
  s.erase(s.find_last_not_of(" \t\r") + 1);
  return s;
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::optional<uint32_t> map_type_of(const std::string& name) {
  for (uint32_t t = 1; t < 64; ++t)
    if (map_type_supported(t) && name == map_type_name(t)) return t;
  return std::nullopt;
}

std::optional<uint64_t> number(const std::string& s) {
  try {
    size_t used = 0;
    const uint64_t v = std::stoull(s, &used, 0);
    if (used != s.size()) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

struct Raw {
  int line = 0;
  std::vector<std::string> lines;
};

}  // namespace

Result<std::vector<VerifierCase>> parse_cases(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return make_error(Errc::io, fmt::format("cannot read {}", file.string()));
  const std::string fname = file.filename().string();
  std::vector<std::pair<std::string, Raw>> raws;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    const std::string t = trim(line);
    if (t.starts_with("== ")) {
      raws.push_back({trim(t.substr(3)), Raw{lineno, {}}});
      continue;
    }
    if (t.empty() || t[0] == '#') continue;
    if (raws.empty()) return make_error(Errc::bad_format, fmt::format("{}:{}: text before the first case", fname, lineno));
    raws.back().second.lines.push_back(t);
  }
  std::vector<VerifierCase> out;
  for (const auto& [name, raw] : raws) {
    const std::string where = fmt::format("{}:{}", fname, raw.line);
    // Variants: every combination of the `each` lines' values.
    std::vector<std::pair<std::string, std::vector<std::string>>> vars;
    for (const std::string& l : raw.lines)
      if (l.starts_with("each ")) {
        auto w = words(l);
        if (w.size() < 3) return make_error(Errc::bad_format, where + ": each VAR V1 [V2...]");
        vars.push_back({w[1], std::vector<std::string>(w.begin() + 2, w.end())});
      }
    std::vector<std::vector<std::string>> combos{{}};
    for (const auto& [v, values] : vars) {
      std::vector<std::vector<std::string>> next;
      for (const auto& c : combos)
        for (const auto& x : values) {
          auto d = c;
          d.push_back(x);
          next.push_back(d);
        }
      combos = std::move(next);
    }
    for (const auto& combo : combos) {
      auto subst = [&](std::string s) {
        for (size_t k = 0; k < vars.size(); ++k)
          for (const std::string& key : {"${" + vars[k].first + "}", "$" + vars[k].first})
            for (size_t at; (at = s.find(key)) != std::string::npos;) s.replace(at, key.size(), combo[k]);
        return s;
      };
      VerifierCase c;
      c.name = name;
      for (const auto& x : combo) c.name += "/" + x;
      c.file = where;
      c.ctx.kind = CtxKind::tracing;
      c.ctx.size = 16;
      bool expectation = false;
      for (const std::string& l0 : raw.lines) {
        if (l0.starts_with("each ")) continue;
        const std::string l = subst(l0);
        auto w = words(l);
        if (w[0] == "ctx") {
          if (w.size() < 3) return make_error(Errc::bad_format, where + ": ctx KIND SIZE [writable]");
          c.ctx.kind = w[1] == "tracing" ? CtxKind::tracing : w[1] == "pt_regs" ? CtxKind::pt_regs : CtxKind::memory;
          if (w[1] != "tracing" && w[1] != "pt_regs" && w[1] != "memory")
            return make_error(Errc::bad_format, where + ": ctx kind is tracing, pt_regs or memory");
          auto n = number(w[2]);
          if (!n) return make_error(Errc::bad_format, where + ": ctx size " + w[2]);
          c.ctx.size = static_cast<uint32_t>(*n);
          c.ctx.writable = w.size() > 3 && w[3] == "writable";
        } else if (w[0] == "map") {
          if (w.size() < 6) return make_error(Errc::bad_format, where + ": map NAME TYPE KEY VALUE MAX [readonly]");
          MapSpec m;
          m.name = w[1];
          auto t = map_type_of(w[2]);
          auto k = number(w[3]), v = number(w[4]), n = number(w[5]);
          if (!t || !k || !v || !n) return make_error(Errc::bad_format, where + ": bad map line: " + l);
          m.type = *t;
          m.key_size = static_cast<uint32_t>(*k);
          m.value_size = static_cast<uint32_t>(*v);
          m.max_entries = static_cast<uint32_t>(*n);
          m.readonly = w.size() > 6 && w[6] == "readonly";
          if (m.type == uint32_t(MapType::lpm_trie)) m.flags = kMapNoPrealloc;  // as the kernel requires
          c.maps.push_back(m);
        } else if (w[0] == "limit") {
          auto n = w.size() > 1 ? number(w[1]) : std::nullopt;
          if (!n) return make_error(Errc::bad_format, where + ": limit N");
          c.max_insns = *n;
        } else if (w[0] == "accept") {
          c.accept = true;
          expectation = true;
        } else if (w[0] == "refuse") {
          auto n = w.size() > 2 ? number(w[1]) : std::nullopt;
          c.any_insn = w.size() > 2 && w[1] == "any";
          if (!n && !c.any_insn) return make_error(Errc::bad_format, where + ": refuse INSN|any WORDS...");
          c.accept = false;
          c.insn = n ? static_cast<uint32_t>(*n) : 0;
          c.words = trim(l.substr(l.find(w[1]) + w[1].size()));
          expectation = true;
        } else {
          c.text += l + "\n";
        }
      }
      if (!expectation) return make_error(Errc::bad_format, where + ": case '" + c.name + "' expects nothing");
      c.ctx.what = fmt::format("the test context ({} bytes)", c.ctx.size);
      out.push_back(std::move(c));
    }
  }
  return out;
}

Result<std::vector<VerifierCase>> all_cases(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".cases") files.push_back(e.path());
  if (ec) return make_error(Errc::io, fmt::format("{}: {}", dir.string(), ec.message()));
  std::sort(files.begin(), files.end());
  std::vector<VerifierCase> out;
  for (const auto& f : files) {
    auto c = parse_cases(f);
    if (!c) return std::move(c).error();
    out.insert(out.end(), c->begin(), c->end());
  }
  return out;
}

Result<Assembled> assemble_case(const VerifierCase& c) {
  std::string text;
  std::istringstream in(c.text);
  for (std::string l; std::getline(in, l);) {
    for (const char* kind : {"map_value:", "map:"}) {
      const size_t at = l.find(kind);
      if (at == std::string::npos) continue;
      std::string ref = l.substr(at + std::strlen(kind));
      uint64_t off = 0;
      if (const size_t plus = ref.find('+'); plus != std::string::npos) {
        auto n = number(ref.substr(plus + 1));
        if (!n) return make_error(Errc::bad_format, c.name + ": bad offset in " + l);
        off = *n;
        ref = ref.substr(0, plus);
      }
      ref = trim(ref);
      size_t idx = c.maps.size();
      for (size_t k = 0; k < c.maps.size(); ++k)
        if (c.maps[k].name == ref) idx = k;
      if (idx == c.maps.size()) return make_error(Errc::bad_format, c.name + ": no map '" + ref + "'");
      const bool value = std::string(kind) == "map_value:";
      l = l.substr(0, at) + fmt::format("{:#x}", kTag | (uint64_t(idx) << 32) | (value ? 1ull << 31 : 0) | off);
      break;
    }
    text += l + "\n";
  }
  auto p = assemble(text);
  if (!p) return make_error(p.error().code, c.name + ": " + p.error().message);
  Assembled a;
  a.insns = std::move(*p);
  for (size_t i = 0; i + 1 < a.insns.size(); ++i) {
    if (a.insns[i].code != op::kLddw) continue;
    const uint64_t v = imm64(a.insns, i);
    if ((v >> 48) == (kTag >> 48)) {
      a.refs.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>((v >> 32) & 0xffff), (v >> 31 & 1) != 0,
                        v & 0x7fffffff});
      a.insns[i].imm = 0;
      a.insns[i + 1].imm = 0;
    }
    ++i;
  }
  return a;
}

ExecOptions case_options(const VerifierCase& c, const Assembled& a) {
  ExecOptions o;
  o.helpers = &runtime_helpers();
  o.ctx_kind = c.ctx.kind;
  o.ctx_size = c.ctx.size;
  o.ctx_writable = c.ctx.writable;
  o.ctx_what = c.ctx.what;
  o.maps = c.maps;
  o.refs = a.refs;
  o.verifier_max_insns = c.max_insns;
  return o;
}

Result<std::unique_ptr<Sandbox>> Sandbox::create(const std::vector<MapSpec>& maps, const ContextSpec& ctx) {
  auto s = std::make_unique<Sandbox>();
  s->specs_ = maps;
  // A tracing context's header (abi/ctx.hpp): ctx[-3] cookie, ctx[-2] function,
  // ctx[-1] the argument count (a uprobe's: abi::kCtxPtRegs, as the agent's handler
  // gives it, so the stack helpers unwind from the registers, 1, 2, 3... here: no stack
  // of this process, which they must survive); the words themselves are 1, 2, 3...
  s->size_ = ctx.size;
  s->ctx_.assign(3 + (ctx.size + 7) / 8 + 1, 0);
  s->ctx_[2] = ctx.kind == CtxKind::tracing ? ctx.size / 8 : ctx.kind == CtxKind::pt_regs ? abi::kCtxPtRegs : 0;
  s->ctx_[1] = 0x401000;
  for (size_t i = 3; i < s->ctx_.size(); ++i) s->ctx_[i] = i - 2;
  if (maps.empty()) return s;
  const char* tmp = getenv("TMPDIR");
  std::string file = fmt::format("{}/utramp-verifier-maps-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  const int fd = mkstemp(file.data());
  if (fd < 0) return make_error(Errc::io, "mkstemp " + file);
  close(fd);
  auto created = MapFile::create(file, maps);
  Result<MapFile> attached = created ? MapFile::attach(file) : Result<MapFile>(created.error());
  unlink(file.c_str());
  if (!attached) return std::move(attached).error();
  s->maps_ = std::move(*attached);
  return s;
}

std::vector<Insn> Sandbox::resolve(std::vector<Insn> insns, const std::vector<MapRef>& refs) const {
  for (const MapRef& r : refs) {
    const uint64_t a = r.value ? reinterpret_cast<uint64_t>(maps_.values(r.map).data()) + r.offset
                               : reinterpret_cast<uint64_t>(maps_.header(r.map));
    insns[r.insn].imm = static_cast<int32_t>(static_cast<uint32_t>(a));
    insns[r.insn + 1].imm = static_cast<int32_t>(static_cast<uint32_t>(a >> 32));
  }
  return insns;
}

// One region per value, its value_size bytes only (the loader registers a map's whole
// value area): an access the verifier let reach past a value's end, into the padding up
// to the next 8-byte stride or across into the next value, is then outside every region.
// Slots follow maps.hpp's layout: key-major, C per-CPU slots a key, stride bytes each.
// A ring buffer's records are one region (the proof bounds a record, not the ring).
void Sandbox::add_regions(ExecOptions& o) const {
  for (size_t i = 0; i < specs_.size(); ++i) {
    const auto d = maps_.values(i);
    const uint64_t lo = reinterpret_cast<uint64_t>(d.data());
    const MapSpec& s = specs_[i];
    if (s.type == uint32_t(MapType::ringbuf)) {
      o.regions.push_back({lo, lo + d.size(), true});
      continue;
    }
    const uint64_t stride = (uint64_t(s.value_size) + 7) & ~uint64_t{7};
    for (uint64_t at = 0; at + stride <= d.size(); at += stride)
      o.regions.push_back({lo + at, lo + at + s.value_size, !s.readonly});
  }
}

Result<RunResult> run_in_sandbox(const std::vector<Insn>& insns, const std::vector<MapRef>& refs, ExecOptions o,
                                 const std::vector<MapSpec>& maps, const ContextSpec& ctx, EngineKind engine,
                                 Loader loader) {
  auto sb = Sandbox::create(maps, ctx);
  if (!sb) return std::move(sb).error();
  (*sb)->add_regions(o);
  if (engine == EngineKind::interpreter) o.strict_memory = true;
  auto ex = loader(Program{"case", "", (*sb)->resolve(insns, refs)}, o, engine);
  if (!ex) return std::move(ex).error();
  RunStatus st;
  RunResult r;
  r.r0 = (*ex)->run((*sb)->ctx(), (*sb)->ctx_len(), &st);
  r.faulted = st.faults.load() != 0;
  if (r.faulted) r.fault = describe_fault((*ex)->program().insns, st.kind(), st.insn(), st.addr());
  return r;
}

}  // namespace utramp::ebpf::testing
