#include "conformance_data.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <sstream>

#include "ebpf/asm.hpp"

#ifndef UTRAMP_CONFORMANCE_DIR
#define UTRAMP_CONFORMANCE_DIR ""
#endif

namespace utramp::ebpf::testing {

namespace {

std::string trim(std::string s) {
  s.erase(0, s.find_first_not_of(" \t\r"));
  s.erase(s.find_last_not_of(" \t\r") + 1);
  return s;
}

std::optional<uint64_t> parse_u64(const std::string& s) {
  if (s.empty()) return std::nullopt;
  try {
    size_t used = 0;
    const bool hex = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    const uint64_t v = std::stoull(s, &used, hex ? 16 : 10);
    if (used != s.size()) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

uint64_t helper_identity(uint64_t a, uint64_t, uint64_t, uint64_t, uint64_t) { return a; }

}  // namespace

Result<DataCase> parse_data_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return make_error(Errc::io, fmt::format("cannot read {}", path.string()));
  DataCase c;
  c.name = path.stem().string();
  c.path = path;
  enum class Sec { none, asm_, raw, mem, result, error, ignore } sec = Sec::none;
  std::string line, raw_text, mem_text, result_text, error_text, asm_text;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.starts_with("-- ")) {
      const std::string d = trim(line.substr(3));
      if (d == "asm") {
        sec = Sec::asm_;
        c.asm_text.emplace();
        c.asm_line = lineno + 1;
      } else if (d == "raw") {
        sec = Sec::raw;
        c.raw.emplace();
      } else if (d == "mem") {
        sec = Sec::mem;
      } else if (d == "result") {
        sec = Sec::result;
      } else if (d == "error") {
        sec = Sec::error;
        c.error.emplace();
      } else if (d == "c" || d == "no register offset") {
        sec = Sec::ignore;
      } else {
        return make_error(Errc::bad_format,
                          fmt::format("{}:{}: unknown directive \"{}\"", path.filename().string(), lineno, line));
      }
      continue;
    }
    switch (sec) {
      case Sec::asm_: asm_text += line + "\n"; break;
      case Sec::raw: if (!line.starts_with('#')) raw_text += " " + line; break;
      case Sec::mem: if (!line.starts_with('#')) mem_text += " " + line; break;
      case Sec::result: if (!trim(line).empty() && !line.starts_with('#')) result_text = trim(line); break;
      case Sec::error: if (!trim(line).empty()) error_text = trim(line); break;
      default: break;
    }
  }
  if (c.asm_text) c.asm_text = asm_text;
  if (c.error) c.error = error_text;
  if (!result_text.empty()) {
    c.result = parse_u64(result_text);
    if (!c.result)
      return make_error(Errc::bad_format, fmt::format("{}: bad result \"{}\"", path.filename().string(), result_text));
  }
  std::istringstream ms(mem_text);
  for (std::string tok; ms >> tok;) {
    auto v = parse_u64("0x" + tok);
    if (!v || *v > 0xff)
      return make_error(Errc::bad_format, fmt::format("{}: bad memory byte \"{}\"", path.filename().string(), tok));
    c.mem.push_back(static_cast<uint8_t>(*v));
  }
  if (c.raw) {
    std::vector<uint8_t> bytes;
    std::istringstream rs(raw_text);
    for (std::string tok; rs >> tok;) {
      auto v = parse_u64(tok.starts_with("0x") ? tok : "0x" + tok);
      if (!v) return make_error(Errc::bad_format, fmt::format("{}: bad raw token \"{}\"", path.filename().string(), tok));
      if (tok.starts_with("0x")) {  // one whole instruction, as a little-endian u64
        for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<uint8_t>(*v >> (8 * i)));
      } else {
        bytes.push_back(static_cast<uint8_t>(*v));
      }
    }
    if (bytes.size() % 8 != 0)
      return make_error(Errc::bad_format, fmt::format("{}: raw program of {} bytes is not whole instructions",
                                                      path.filename().string(), bytes.size()));
    c.raw = insns_from_bytes(bytes);
  }
  if (!c.result && !c.error)
    return make_error(Errc::bad_format, fmt::format("{}: neither a result nor an error is expected",
                                                    path.filename().string()));
  return c;
}

Result<std::vector<Insn>> case_program(const DataCase& c) {
  std::optional<std::vector<Insn>> assembled;
  if (c.asm_text) {
    auto a = assemble(*c.asm_text, c.asm_line);
    if (!a) return std::move(a).error();
    assembled = std::move(*a);
  }
  if (c.raw) {
    if (assembled && *assembled != *c.raw)
      return make_error(Errc::bytes_mismatch,
                        fmt::format("the asm and raw sections differ:\nasm:\n{}raw:\n{}",
                                    disassemble(*assembled), disassemble(*c.raw)));
    return *c.raw;
  }
  if (!assembled) return make_error(Errc::bad_format, "no program: neither an asm nor a raw section");
  if (assembled->empty()) return make_error(Errc::bad_format, "no program: the asm section has no instructions");
  return std::move(*assembled);
}

const char* stage_name(Stage s) {
  switch (s) {
    case Stage::data: return "data";
    case Stage::assemble: return "assemble";
    case Stage::load: return "load";
    case Stage::run: return "run";
    case Stage::result: return "result";
    case Stage::pass: return "pass";
  }
  return "?";
}

const HelperTable& conformance_helpers() {
  static const HelperTable t = [] {
    HelperTable h;
    HelperProto p;
    p.args[0] = Arg::anything;  // returns r1; reads nothing else
    (void)h.add(5, "conformance_identity", &helper_identity, false, p);  // needs no run: never refused
    return h;
  }();
  return t;
}

Outcome run_case(const DataCase& c, EngineKind engine, bool unverified) {
  Outcome o;
  if (!c.asm_text && !c.raw) {
    o.stage = Stage::data;
    o.message = fmt::format("{}: no program: neither an asm nor a raw section", c.path.filename().string());
    return o;
  }
  auto prog = case_program(c);
  if (!prog) {
    o.stage = Stage::assemble;
    o.message = prog.error().message;
    return o;
  }
  ExecOptions opts;
  opts.helpers = &conformance_helpers();
  opts.ctx_writable = true;  // the memory is the program's to change
  opts.ctx_size = c.mem.size();
  opts.ctx_kind = CtxKind::memory;
  opts.unverified = unverified;
  auto exe = load(Program{c.name, "", std::move(*prog)}, opts, engine);
  if (!exe) {
    o.stage = Stage::load;
    o.message = exe.error().message;
    return o;
  }
  o.mem = c.mem;
  RunStatus st;
  const uint64_t r0 = (*exe)->run(o.mem.empty() ? nullptr : o.mem.data(), o.mem.size(), &st);
  o.faulted = st.faults.load() != 0;
  if (o.faulted) {
    o.stage = Stage::run;
    o.message = describe_fault((*exe)->program().insns, st.kind(), st.insn(), st.addr());
    // An expected error is matched by its text when the case gives one.
    if (c.error && (c.error->empty() || o.message.find(*c.error) != std::string::npos)) {
      o.stage = Stage::pass;
      o.message.clear();
    }
    return o;
  }
  o.r0 = r0;
  if (c.error) {
    o.stage = Stage::result;
    o.message = fmt::format("expected the error \"{}\", the program returned {:#x}", *c.error, r0);
    return o;
  }
  if (r0 != *c.result) {
    o.stage = Stage::result;
    o.message = fmt::format("returned {:#x}, expected {:#x}", r0, *c.result);
  }
  return o;
}

Outcome run_case(const std::filesystem::path& path, EngineKind engine, bool unverified) {
  auto c = parse_data_file(path);
  if (!c) {
    Outcome o;
    o.stage = Stage::data;
    o.message = c.error().message;
    return o;
  }
  return run_case(*c, engine, unverified);
}

std::vector<std::filesystem::path> data_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".data") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::filesystem::path conformance_dir() { return UTRAMP_CONFORMANCE_DIR; }

std::vector<std::string> case_names(const char* sub) {
  std::vector<std::string> out;
  if (!conformance_present()) return out;
  for (const auto& p : data_files(conformance_dir() / sub)) out.push_back(p.stem().string());
  return out;
}

std::string param_test_name(const std::string& case_name) {
  std::string s = case_name;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

bool conformance_present() {
  std::error_code ec;
  return std::filesystem::is_directory(conformance_dir() / "tests", ec) &&
         !data_files(conformance_dir() / "tests").empty();
}

}  // namespace utramp::ebpf::testing
