// utramp run OBJECT [--attach PROG=SPEC]... [--allow-override] [--interval SEC] [--json] [--perf-pages N] --
// PROGRAM [ARGS]: runs PROGRAM with the eBPF programs of OBJECT (clang -target bpf)
// attached to its functions (where their sections say, or --attach: ebpf::AttachSpec), prints
// bpf_trace_printk lines and ring buffer records as they come, and every map at the end
// (and every SEC seconds with --interval).
//
// Before the target starts, each object is loaded and checked here (sections, maps,
// instructions, helpers), each program proven safe by the verifier (--verifier-log
// prints its log, on stderr), every target function is looked up in PROGRAM, each
// program's prototype (the object's DWARF or BTF) checked against the function's DWARF
// signature, each uprobe's binary, offset and instruction boundary checked, and the
// CO-RE relocations resolved against PROGRAM's DWARF: bad input never starts the target. The agent in the target loads the objects again against the
// map file made here, JITs and attaches; if that fails it ends the target before main
// (exit status 125) and says why in a status file read here.
//
// Printing maps, bpftrace-style:
//   @name[key]: value        one line per entry (array maps: non-zero entries only);
//                            per-CPU maps show the sum over CPUs; keys and values of 1,
//                            2, 4 or 8 bytes as unsigned integers, others as hex bytes
//   @name:                   a log2 histogram, drawn with bars, when the map is an array
//   [4, 8)    12 |@@@@@  |   or per-CPU array of u32 keys and u64 values whose name
//                            contains "hist": slot i counts values in [2^i, 2^(i+1)),
//                            slot 0 counts 0 and 1 ("[0, 2)")
// Ring buffers are not printed as maps; global data (.data, .rodata, .bss) is printed
// after the maps as its named variables (from the object's BTF), one per line, values
// as ebpf/btf_value.hpp renders them (bpftrace's way):
//   @name: value             integers as numbers (signed as declared), bools as
//                            true/false, enums by name, char arrays as a quoted string
//                            (up to the first NUL), arrays as [a, b], structs as
//                            { .field = value, ... }
// bpf_printk's format strings (`____fmt`) are not printed as globals.
// Records stream as "map: value", decoded with the object's BTF: their type is the
// object's only struct of the record's size, or the one --record-type MAP=TYPE names
// (--raw: u64 words or bytes, as when no type is found). bpf_printk lines come as
// "COMM PID/TID: text". -o FILE sends all of it to FILE, apart from the target's output.
// Perf event arrays stream as ring buffers do, each CPU's ring merged by the order the
// records were sent in (every thread's in its own order); records lost to a full ring
// (ring buffers too) are said at the end. Queues and stacks print as maps keyed by
// the position a pop would give each element; bloom filters are not printed.
// --json: one JSON object per line: {"type":"printk","pid":P,"tid":T,"comm":...,"msg":...},
// {"type":"ringbuf","map":...,["struct":...,"value":V,]"data":"hex"},
// {"type":"perf","map":...,"cpu":N,["struct":...,"value":V,]"data":"hex"},
// {"type":"lost","map":...,"map_type":...,"count":N}, {"type":"map","name":...,"map_type":...,
// "entries":[{"key":K,"value":V[,"percpu":[...]]}...]} (histograms add "hist":[counts]),
// {"type":"global","name":...,"section":".bss","value":V} (V as btf_value gives it).
// --metrics HOST:PORT serves all of it (maps, integer globals, ring counts and losses,
// each program's runs) as Prometheus metrics while the target runs: metrics.hpp.
//
// -p PID [--duration D]: the programs go into a process that is already running, with
// the same checks against its program (/proc/PID/exe), over the control channel of
// `record -p` (attach.hpp: the refusals, the injection, the configuration sent); the
// agent attaches them while the threads run and takes them away at Ctrl-C, --duration,
// or when this CLI's connection ends (docs/attach.md, "eBPF programs in a running
// process"); the process's exit or exec ends the run too, said. Maps print at the end.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "agent/config.hpp"
#include "agent/trust.hpp"
#include "commands.hpp"
#include "arch/arch.hpp"
#include "abi/signature.hpp"
#include "ebpf/btf_value.hpp"
#include "ebpf/core.hpp"
#include "ebpf/engine.hpp"
#include "ebpf/helpers.hpp"
#include "ebpf/loader.hpp"
#include "ebpf/maps.hpp"
#include "ebpf/object_dwarf.hpp"
#include "os/file.hpp"
#include "ebpf/uprobe_binary.hpp"
#include "ebpf/usdt.hpp"
#include "os/dwarf.hpp"
#include "probe/sigtrap_mask.hpp"
#include "attach.hpp"
#include "launch.hpp"
#include "map_values.hpp"
#include "metrics.hpp"
#include "metrics_server.hpp"
#include "ustack.hpp"
#include "sites/object.hpp"

namespace utramp::cli {

namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

struct RunFlags {
  std::string object;
  std::vector<std::string> objects;
  std::vector<std::string> command;
  std::vector<std::string> attach;  // --attach PROG=SPEC
  bool allow_override = false;       // --allow-override
  double interval = 0;
  bool json = false;
  bool raw = false;                       // --raw: records as bytes, not BTF-decoded
  std::vector<std::string> record_types;  // --record-type MAP=TYPE
  std::string output;                     // -o FILE
  bool verifier_log = false;
  uint32_t perf_pages = ebpf::kDefaultPerfRingBytes / 4096;
  std::string metrics;                  // --metrics HOST:PORT
  bool metrics_public = false;          // --metrics-public
  std::vector<std::string> metrics_hist, metrics_counter;  // --metrics-hist MAP, --metrics-counter MAP
  pid_t pid = 0;              // -p PID: a running process instead of PROGRAM
  double duration_s = 0;      // --duration with -p (0: until Ctrl-C)
};

// Where and how `run` prints: stdout or -o FILE (kept apart from the target's own
// output), text or --json, and the types records and globals are decoded with.
class Output {
 public:
  FILE* f = stdout;
  bool json = false;
  bool raw = false;
  std::string me = "utramp run";
  std::map<std::string, std::string> record_type;  // --record-type: map -> type name
  // Per spec: its object's types, where record types are looked for in this order (the
  // object's .BTF, then its DWARF's structs as BTF); the first is the globals' BTF.
  std::vector<std::vector<const btf*>> spec_btf;

  struct Type {
    const btf* b;
    uint32_t id;
  };
  // The type of map `spec`'s records of `size` bytes (ebpf::find_record_type), found
  // once per map and size; none (printed as bytes) when --raw, when the object has no
  // such type or more than one: said once on stderr, with --record-type as the way out.
  std::optional<Type> record_type_of(size_t spec, const std::string& map, uint64_t size) const {
    if (raw || spec >= spec_btf.size()) return std::nullopt;
    const auto key = std::make_pair(map, size);
    if (auto it = found_.find(key); it != found_.end()) return it->second;
    auto named = record_type.find(map);
    const std::string name = named == record_type.end() ? "" : named->second;
    std::optional<Type> type;
    std::optional<Error> why;
    for (const btf* b : spec_btf[spec]) {
      if (!b) continue;
      auto t = ebpf::find_record_type(b, size, name);
      if (t) {
        type = Type{b, *t};
        break;
      }
      if (!why || t.error().code != Errc::not_found) why = t.error();
      if (t.error().code != Errc::not_found) break;  // ambiguous: a later source does not settle it
    }
    if (!type && why && (!name.empty() || why->code != Errc::not_found))
      fmt::print(stderr, "{}: records of '{}' ({} bytes) printed as bytes: {}{}\n", me, map, size, why->message,
                 name.empty() ? " (--record-type MAP=TYPE names it)" : "");
    found_[key] = type;
    return type;
  }
  const btf* globals_btf(size_t spec) const {
    return spec < spec_btf.size() && !spec_btf[spec].empty() ? spec_btf[spec].front() : nullptr;
  }

 private:
  mutable std::map<std::pair<std::string, uint64_t>, std::optional<Type>> found_;
};

std::string show(const std::vector<uint8_t>& b) {
  return is_int_size(b.size()) ? std::to_string(as_u64(b)) : hex(b);
}

json jshow(const std::vector<uint8_t>& b) {
  if (is_int_size(b.size())) return as_u64(b);
  return hex(b, "");
}

// bpftrace's bounds: 1K = 1024...
std::string bound(uint64_t v) {
  static const char* const units[] = {"", "K", "M", "G", "T", "P", "E"};
  int u = 0;
  while (v >= 1024 && v % 1024 == 0 && u < 6) v /= 1024, ++u;
  return fmt::format("{}{}", v, units[u]);
}

void print_hist(FILE* out, const std::string& name, const std::vector<uint64_t>& slots) {
  fmt::print(out, "@{}:\n", name);
  size_t first = slots.size(), last = 0;
  uint64_t max = 0;
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i]) first = std::min(first, i), last = i, max = std::max(max, slots[i]);
  if (first == slots.size()) {
    fmt::print(out, "(empty)\n\n");
    return;
  }
  for (size_t i = first; i <= last; ++i) {
    const uint64_t lo = i == 0 ? 0 : uint64_t(1) << i;
    const std::string hi = i >= 63 ? "..." : bound(uint64_t(1) << (i + 1));
    const std::string label = fmt::format("[{}, {})", bound(lo), hi);
    const int bar = slots[i] ? std::max(1, static_cast<int>(slots[i] * 52 / max)) : 0;
    fmt::print(out, "{:<20}{:>8} |{:<52}|\n", label, slots[i], std::string(static_cast<size_t>(bar), '@'));
  }
  fmt::print(out, "\n");
}

// One global variable's value (ebpf/btf_value.hpp: numbers, bools, strings, arrays,
// structs by field), from its object's BTF.
ojson global_value(const ebpf::GlobalVar& g, const btf* b, std::span<const uint8_t> bytes) {
  return ebpf::btf_value(b, g.type_id, bytes);
}

// bpf_printk's format strings are globals of the program (`static const char ____fmt[]`
// in each function that prints): not the user's variables.
bool is_printk_format(const std::string& name) {
  return name == "____fmt" || name.ends_with(".____fmt");
}

// The named globals of every .data/.rodata/.bss section, bpftrace-style: `@name: value`
// (ebpf::render_value); --json: {"type":"global",...} per variable.
void print_globals(const ebpf::MapFile& mf, const std::vector<ebpf::MapSpec>& specs, const Output& o) {
  bool any = false;
  for (size_t i = 0; i < mf.count() && i < specs.size(); ++i) {
    const ebpf::MapSpec& s = specs[i];
    if (!s.global_data || s.vars.empty()) continue;
    const auto data = mf.data(i);
    const btf* b = o.globals_btf(i);
    for (const ebpf::GlobalVar& g : s.vars) {
      if (is_printk_format(g.name)) continue;
      if (uint64_t(g.offset) + g.size > s.value_size || uint64_t(g.offset) + g.size > data.size()) continue;
      const ojson v = global_value(g, b, data.subspan(g.offset, g.size));
      if (o.json) {
        fmt::print(o.f, "{}\n",
                   ojson{{"type", "global"}, {"name", g.name}, {"section", s.name}, {"value", v}}.dump());
      } else {
        fmt::print(o.f, "@{}: {}\n", g.name, ebpf::render_value(v));
        any = true;
      }
    }
  }
  if (any) fmt::print(o.f, "\n");
}

// Stacks (ustack.hpp): a stack trace map's entries, `@name[ID]:` and a frame per line
// (--json: {"key":ID,"ustack":[frames]}); a hash map keyed by stack ids (ustack.hpp
// keyed_by_stack) as bpftrace prints `@[ustack] = count`: `@name[`, the frames, then
// `]: value` (--json: "ustack" beside "key" and "value"); an id not in the stack map (a
// negative error the program stored, say) as the number. The ids are those of the
// file's first stack trace map.
struct Stacks {
  std::optional<StackSymbols> syms;
  std::map<int64_t, std::vector<std::string>> by_id;  // the first stack trace map's
  bool have = false;
};
Stacks read_stacks(const ebpf::MapFile& mf) {
  Stacks st;
  for (size_t i = 0; i < mf.count(); ++i)
    if (mf.spec(i).name == ebpf::kObjectsMap) st.syms.emplace(ebpf::read_loaded_ranges(mf.values(i)));
  if (!st.syms) st.syms.emplace(std::vector<ebpf::LoadedRange>{});
  for (size_t i = 0; i < mf.count(); ++i) {
    if (mf.spec(i).type != uint32_t(ebpf::MapType::stack_trace)) continue;
    for (const auto& e : mf.entries(i)) st.by_id[int32_t(as_u64(e.key))] = st.syms->frames(e.values.at(0));
    st.have = true;
    break;
  }
  return st;
}
constexpr const char* kFrameIndent = "        ";

void print_stack_map(const ebpf::MapSpec& s, const std::vector<ebpf::MapEntry>& entries, StackSymbols& syms,
                     const Output& o) {
  if (o.json) {
    json es = json::array();
    for (const auto& e : entries) es.push_back({{"key", as_u64(e.key)}, {"ustack", syms.frames(e.values.at(0))}});
    fmt::print(o.f, "{}\n", json{{"type", "map"}, {"name", s.name}, {"map_type", "stack_trace"}, {"entries", es}}.dump());
    return;
  }
  for (const auto& e : entries) {
    fmt::print(o.f, "@{}[{}]:\n", s.name, as_u64(e.key));
    for (const std::string& f : syms.frames(e.values.at(0))) fmt::print(o.f, "{}{}\n", kFrameIndent, f);
  }
  if (entries.empty()) fmt::print(o.f, "@{}: (empty)\n", s.name);
  fmt::print(o.f, "\n");
}

void print_by_stack(const ebpf::MapSpec& s, const std::vector<ebpf::MapEntry>& entries, const Stacks& st,
                    const Output& o) {
  std::vector<std::pair<int64_t, std::vector<uint8_t>>> rows;
  for (const auto& e : entries) rows.emplace_back(int32_t(as_u64(e.key)), combined(e));
  // As bpftrace: the largest value last.
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return as_u64(a.second) != as_u64(b.second) ? as_u64(a.second) < as_u64(b.second) : a.first < b.first;
  });
  if (o.json) {
    json es = json::array();
    for (const auto& [id, v] : rows) {
      json je{{"key", id}, {"value", jshow(v)}};
      if (auto f = st.by_id.find(id); f != st.by_id.end()) je["ustack"] = f->second;
      es.push_back(je);
    }
    fmt::print(o.f, "{}\n", json{{"type", "map"}, {"name", s.name}, {"map_type", ebpf::map_type_name(s.type)},
                                  {"entries", es}}.dump());
    return;
  }
  for (const auto& [id, v] : rows) {
    auto f = st.by_id.find(id);
    if (f == st.by_id.end()) {
      fmt::print(o.f, "@{}[{}]: {}\n", s.name, id, show(v));
      continue;
    }
    fmt::print(o.f, "@{}[\n", s.name);
    for (const std::string& fr : f->second) fmt::print(o.f, "{}{}\n", kFrameIndent, fr);
    fmt::print(o.f, "]: {}\n", show(v));
  }
  if (rows.empty()) fmt::print(o.f, "@{}: (empty)\n", s.name);
  fmt::print(o.f, "\n");
}

// A hash map whose struct key holds stack ids (ustack.hpp stack_id_members), as bpftrace
// prints `@[pid, ustack] = count()`: the key's members in order, `.name = value`, a stack
// id member naming a stored stack as `.name =`, then its frames a line each; rows by
// value, the largest last. --json: the key decoded ("key"), "value", and "ustacks": the
// frames of each stack id member that names a stored stack, by member name.
void print_by_stack_members(const ebpf::MapSpec& s, const std::vector<ebpf::MapEntry>& entries, const Stacks& st,
                            const btf* b, uint32_t key_type, const std::vector<std::string>& members,
                            const Output& o) {
  struct Row {
    ojson key;
    std::vector<uint8_t> value;
  };
  std::vector<Row> rows;
  for (const auto& e : entries) rows.push_back({ebpf::btf_value(b, key_type, e.key), combined(e)});
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& c) { return as_u64(a.value) < as_u64(c.value); });
  auto stack_of = [&](const std::string& name, const ojson& v) -> const std::vector<std::string>* {
    if (std::find(members.begin(), members.end(), name) == members.end() || !v.is_number_integer()) return nullptr;
    auto f = st.by_id.find(v.get<int64_t>());
    return f == st.by_id.end() ? nullptr : &f->second;
  };
  if (o.json) {
    json es = json::array();
    for (const Row& r : rows) {
      json je{{"key", json::parse(r.key.dump())}, {"value", jshow(r.value)}};
      json stacks = json::object();
      if (r.key.is_object())
        for (const auto& [name, v] : r.key.items())
          if (const auto* f = stack_of(name, v)) stacks[name] = *f;
      if (!stacks.empty()) je["ustacks"] = stacks;
      es.push_back(je);
    }
    fmt::print(o.f, "{}\n", json{{"type", "map"}, {"name", s.name}, {"map_type", ebpf::map_type_name(s.type)},
                                  {"entries", es}}.dump());
    return;
  }
  for (const Row& r : rows) {
    std::string text = "@" + s.name + "[";
    bool first = true;
    if (r.key.is_object()) {
      for (const auto& [name, v] : r.key.items()) {
        if (!first) text += ", ";
        first = false;
        if (const auto* f = stack_of(name, v)) {
          text += "." + name + " =\n";
          for (const std::string& fr : *f) text += kFrameIndent + fr + "\n";
          continue;
        }
        text += "." + name + " = " + ebpf::render_value(v);
      }
    } else {
      text += ebpf::render_value(r.key);
    }
    fmt::print(o.f, "{}]: {}\n", text, show(r.value));
  }
  if (rows.empty()) fmt::print(o.f, "@{}: (empty)\n", s.name);
  fmt::print(o.f, "\n");
}

void print_maps(const ebpf::MapFile& mf, const std::vector<ebpf::MapSpec>& specs, const Output& o) {
  Stacks stacks = read_stacks(mf);
  for (size_t i = 0; i < mf.count(); ++i) {
    const ebpf::MapSpec s = mf.spec(i);
    if (s.type == uint32_t(ebpf::MapType::stack_trace)) {
      print_stack_map(s, mf.entries(i), *stacks.syms, o);
      continue;
    }
    if (stacks.have && keyed_by_stack(s)) {
      print_by_stack(s, mf.entries(i), stacks, o);
      continue;
    }
    if (stacks.have && i < specs.size() && !o.raw) {
      const btf* b = o.globals_btf(i);
      if (auto members = stack_id_members(s, b, specs[i].key_type); !members.empty()) {
        print_by_stack_members(s, mf.entries(i), stacks, b, specs[i].key_type, members, o);
        continue;
      }
    }
    if (s.global_data || s.type == uint32_t(ebpf::MapType::ringbuf) ||
        s.type == uint32_t(ebpf::MapType::perf_event_array) || s.type == uint32_t(ebpf::MapType::bloom_filter) ||
        ebpf::is_usdt_internal_map(s.name))
      continue;  // streamed, or nothing to show (a bloom filter's bits, usdt.bpf.h's specs)
    const auto entries = mf.entries(i);
    if (s.type == uint32_t(ebpf::MapType::prog_array)) {  // the slots set: programs by name
      auto name_of = [&](const ebpf::MapEntry& e) {
        const uint32_t prog = static_cast<uint32_t>(as_u64(e.values.at(0)));
        if (i < specs.size())
          for (const auto& ps : specs[i].prog_slots)
            if (ps.prog == prog) return ps.name;
        return fmt::format("program {}", prog);
      };
      if (o.json) {
        json es = json::array();
        for (const auto& e : entries) es.push_back({{"key", as_u64(e.key)}, {"program", name_of(e)}});
        fmt::print(o.f, "{}\n", json{{"type", "map"}, {"name", s.name}, {"map_type", "prog_array"}, {"entries", es}}
                                      .dump());
        continue;
      }
      for (const auto& e : entries) fmt::print(o.f, "@{}[{}]: {}\n", s.name, as_u64(e.key), name_of(e));
      if (entries.empty()) fmt::print(o.f, "@{}: (empty)\n", s.name);
      fmt::print(o.f, "\n");
      continue;
    }
    const bool array = is_array(s);
    const bool lpm = is_lpm(s);
    if (o.json) {
      json j{{"type", "map"}, {"name", s.name}, {"map_type", ebpf::map_type_name(s.type)}};
      json es = json::array();
      std::vector<uint64_t> slots;
      for (const auto& e : entries) {
        const auto v = combined(e);
        if (is_hist(s)) slots.push_back(as_u64(v));
        if (array && std::all_of(v.begin(), v.end(), [](uint8_t b) { return b == 0; })) continue;
        json je{{"key", lpm ? json(lpm_key(e.key)) : jshow(e.key)}, {"value", jshow(v)}};
        if (e.values.size() > 1) {
          json pc = json::array();
          for (const auto& x : e.values) pc.push_back(jshow(x));
          je["percpu"] = pc;
        }
        es.push_back(je);
      }
      j["entries"] = es;
      if (is_hist(s)) j["hist"] = slots;
      fmt::print(o.f, "{}\n", j.dump());
      continue;
    }
    if (is_hist(s)) {
      std::vector<uint64_t> slots;
      for (const auto& e : entries) slots.push_back(as_u64(combined(e)));
      print_hist(o.f, s.name, slots);
      continue;
    }
    // Hash maps in key order when keys are integers, as bpftrace sorts by value... by key here.
    std::vector<std::pair<std::vector<uint8_t>, std::vector<uint8_t>>> rows;
    for (const auto& e : entries) {
      auto v = combined(e);
      if (array && std::all_of(v.begin(), v.end(), [](uint8_t b) { return b == 0; })) continue;
      rows.emplace_back(e.key, std::move(v));
    }
    // An LPM trie's in the order it gives them (more specific prefixes first).
    if (is_int_size(s.key_size) && !lpm)
      std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return as_u64(a.first) < as_u64(b.first); });
    for (const auto& [k, v] : rows) fmt::print(o.f, "@{}[{}]: {}\n", s.name, lpm ? lpm_key(k) : show(k), show(v));
    if (rows.empty()) fmt::print(o.f, "@{}: (empty)\n", s.name);
    fmt::print(o.f, "\n");
  }
  print_globals(mf, specs, o);
  std::fflush(o.f);
}

// One record of a ring buffer or a perf event array (map `spec`): decoded with the
// object's BTF when its type is known (Output::record_type_of), as
// "map: { .field = value, ... }" and in --json as "value" beside the raw "data"
// ({"type":"ringbuf"|"perf","map":...,["cpu":N,]["struct":...,"value":{...},]"data":"hex"});
// else "map: " and whole u64 words as numbers, other sizes as bytes.
void print_record(const Output& o, size_t spec, const std::string& map, std::span<const uint8_t> rec,
                  const char* type, int64_t cpu) {
  const auto t = o.record_type_of(spec, map, rec.size());
  std::optional<ojson> v;
  if (t) v = ebpf::btf_value(t->b, t->id, rec);
  if (o.json) {
    ojson j{{"type", type}, {"map", map}};
    if (cpu >= 0) j["cpu"] = cpu;
    if (v) {
      j["struct"] = ebpf::type_name(t->b, t->id);
      j["value"] = *v;
    }
    j["data"] = hex(rec, "");
    fmt::print(o.f, "{}\n", j.dump());
    return;
  }
  if (v) {
    fmt::print(o.f, "{}: {}\n", map, ebpf::render_value(*v));
    return;
  }
  std::string words;
  if (rec.size() % 8 == 0) {
    for (size_t k = 0; k < rec.size(); k += 8) {
      uint64_t w;
      std::memcpy(&w, rec.data() + k, 8);
      words += fmt::format("{}{}", k ? " " : "", w);
    }
  } else {
    words = hex(rec);
  }
  fmt::print(o.f, "{}: {}\n", map, words);
}

// A bpf_trace_printk line (ebpf::PrintkHead, then its text): "COMM PID/TID: text";
// --json {"type":"printk","pid":P,"tid":T,"comm":...,"msg":...}.
void print_printk(const Output& o, std::span<const uint8_t> rec) {
  ebpf::PrintkHead h{};
  if (rec.size() < sizeof h) return;  // not a line the helper wrote
  std::memcpy(&h, rec.data(), sizeof h);
  const std::string comm(h.comm, strnlen(h.comm, sizeof h.comm));
  const std::string msg(reinterpret_cast<const char*>(rec.data()) + sizeof h, rec.size() - sizeof h);
  if (o.json)
    fmt::print(o.f, "{}\n",
               ojson{{"type", "printk"}, {"pid", h.pid}, {"tid", h.tid}, {"comm", comm}, {"msg", msg}}.dump());
  else
    fmt::print(o.f, "{} {}/{}: {}\n", comm.empty() ? "<...>" : comm, h.pid, h.tid, msg);
}

// Prints what the ring buffers and perf event arrays hold; returns how many records
// (and adds each ring's to `counted`, by map index).
// `final`: the target has ended, every submitted perf record can go (consume_perf).
size_t drain_rings(ebpf::MapFile& mf, const Output& o, metrics::RunCounts& counted, bool final = false) {
  size_t n = 0;
  counted.records.resize(mf.count());
  for (size_t i = 0; i < mf.count(); ++i) {
    const ebpf::MapSpec s = mf.spec(i);
    if (s.type == uint32_t(ebpf::MapType::perf_event_array)) {
      const size_t k = mf.consume_perf(
          i, [&](uint32_t cpu, std::span<const uint8_t> rec) { print_record(o, i, s.name, rec, "perf", cpu); },
          final);
      counted.records[i] += k;
      n += k;
      continue;
    }
    if (s.type != uint32_t(ebpf::MapType::ringbuf)) continue;
    const bool printk = s.name == ".printk";
    const size_t k = mf.consume_ring(i, [&](std::span<const uint8_t> rec) {
      if (printk) print_printk(o, rec);
      else print_record(o, i, s.name, rec, "ringbuf", -1);
    });
    counted.records[i] += k;
    n += k;
  }
  if (n) std::fflush(o.f);
  return n;
}

// Records the target could not send (a full ring buffer or perf ring, or a handler that
// interrupted its own thread's reservation): said on stderr, and with --json as
// {"type":"lost","map":...,"map_type":...,"count":N} too.
void report_lost(const ebpf::MapFile& mf, const Output& o) {
  for (size_t i = 0; i < mf.count(); ++i) {
    const ebpf::MapSpec s = mf.spec(i);
    const bool perf = s.type == uint32_t(ebpf::MapType::perf_event_array);
    const bool progs = s.type == uint32_t(ebpf::MapType::prog_array);
    if (!perf && !progs && s.type != uint32_t(ebpf::MapType::ringbuf)) continue;
    const uint64_t lost = mf.ring_dropped(i);
    if (!lost) continue;
    if (progs) {  // tail calls refused at the limit: they fell through
      if (o.json)
        fmt::print(o.f, "{}\n", json{{"type", "tail_call_limit"}, {"map", s.name}, {"count", lost}}.dump());
      fmt::print(stderr, "{}: prog_array '{}': {} tail call(s) fell through at the limit of {} per invocation\n",
                 o.me, s.name, lost, ebpf::kMaxTailCalls);
      continue;
    }
    if (o.json)
      fmt::print(o.f, "{}\n", json{{"type", "lost"}, {"map", s.name}, {"map_type", ebpf::map_type_name(s.type)},
                                   {"count", lost}}
                                  .dump());
    if (s.name == ".printk")
      fmt::print(stderr, "{}: {} bpf_printk line(s) lost: the printk ring was full\n", o.me, lost);
    else if (perf)
      fmt::print(stderr, "{}: perf event array '{}': {} record(s) lost: a ring was full (--perf-pages sets its "
                         "size: {} pages)\n",
                 o.me, s.name, lost, s.ring_bytes / 4096);
    else
      fmt::print(stderr, "{}: ring buffer '{}': {} record(s) lost: it was full (its max_entries: {} bytes)\n",
                 o.me, s.name, lost, s.max_entries);
  }
  std::fflush(o.f);
}

// Runs the recursion rule skipped (the `.misses` map: agent/bpf.cpp), per program: said
// on stderr, and with --json as {"type":"misses","prog":...,"count":N} too.
void report_misses(const ebpf::MapFile& mf, const std::vector<std::string>& progs, const Output& o) {
  for (size_t i = 0; i < mf.count(); ++i) {
    if (mf.spec(i).name != ".misses") continue;
    const auto v = mf.values(i);
    for (size_t k = 0; k < progs.size() && 8 * (k + 1) <= v.size(); ++k) {
      uint64_t n = 0;
      std::memcpy(&n, v.data() + 8 * k, 8);
      if (!n) continue;
      if (o.json)
        fmt::print(o.f, "{}\n", json{{"type", "misses"}, {"prog", progs[k]}, {"count", n}}.dump());
      fmt::print(stderr, "{}: program '{}': {} run(s) skipped: its probe was hit by utramp's own work in the "
                         "target (a library function the agent calls), not by the program's calls\n",
                 o.me, progs[k], n);
    }
  }
  std::fflush(o.f);
}

// USDT probes in a shared library are not supported yet: a usdt program's binary is the
// traced program (ebpf/uprobe_binary.hpp's rules); "" when it is.
std::string check_usdt_binary(const std::string& binary, const std::string& prog) {
  auto b = ebpf::resolve_uprobe_binary(binary, prog);
  if (!b) return b.error().message;
  if (b->library)
    return fmt::format("binary '{}' is a shared library: USDT probes in shared libraries are not supported yet "
                       "(only the probes of the traced program {})",
                       binary, prog);
  return {};
}

// A uprobe's library, analysed once per file: its functions and its ELF (to prove an
// offset is an instruction boundary) and its types (CO-RE).
struct LibraryFile {
  std::vector<sites::SiteInfo> functions;
  std::unique_ptr<os::ElfFile> elf;
  std::shared_ptr<ebpf::TargetTypes> types;
};

// A uprobe's place (its binary is checked first: check_binary): FUNC+OFFSET is an
// instruction boundary inside FUNC, proven by decoding FUNC from its start in the file.
std::string check_uprobe(const ebpf::LoadedProgram& p, const sites::SiteInfo& fn, const os::ElfFile* elf) {
  if (p.offset == 0) return {};
  if (fn.ifunc)  // the probe goes on the implementation the target's resolver picks (agent/bpf.cpp)
    return fmt::format("{} is an IFUNC (its implementation is chosen at run time): only its entry can be probed, "
                       "not +{:#x}",
                       p.target, p.offset);
  if (fn.size && p.offset >= fn.size)
    return fmt::format("offset {:#x} is beyond {} ({} bytes)", p.offset, p.target, fn.size);
  if (!elf) return {};
  const auto code = elf->bytes_at(fn.func, fn.size);
  uint64_t at = 0;
  while (at < p.offset && at < code.size()) {
    auto insn = arch::decode(code.data() + at, code.size() - at, fn.func + at);
    if (!insn) return fmt::format("cannot decode {}+{:#x}: {}", p.target, at, insn.error().message);
    if (at + insn->length > p.offset)
      return fmt::format("offset {:#x} is not an instruction boundary of {}: it is inside '{}' at +{:#x} ({} bytes)",
                         p.offset, p.target, insn->text(), at, insn->length);
    at += insn->length;
  }
  return {};
}

// While the target runs: its threads that keep SIGTRAP blocked where the agent cannot
// see it (the raw rt_sigprocmask system call: docs/sites.md, "A thread that blocks
// SIGTRAP unseen"). Such a thread that reaches an uprobe left as an int3 (the agent
// lists them in its status file) is not handed the trap: the kernel ends the target.
// Nothing can prevent that from outside; a thread seen twice in a row (50 ms apart)
// with SIGTRAP blocked is named on stderr as one that cannot be probed, and a target
// killed by SIGTRAP is said to be that.
class SigtrapWatch {
 public:
  SigtrapWatch(pid_t pid, std::string status_file) : pid_(pid), status_file_(std::move(status_file)) {}

  void look(const std::string& me) {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_) return;
    next_ = now + std::chrono::milliseconds(50);
    if (!read_status()) return;  // the agent has not attached yet
    if (int3s_.empty()) return;  // every probe is a jump: nothing a mask can break
    auto blocking = probe::threads_blocking_sigtrap(pid_);
    if (!blocking) return;
    std::set<uint32_t> now_seen;
    for (const auto& t : *blocking) {
      now_seen.insert(t.tid);
      if (!seen_before_.count(t.tid) || named_.count(t.tid)) continue;
      named_.insert(t.tid);
      named_threads_.push_back(t);
      fmt::print(stderr,
                 "{}: {} of the target keeps SIGTRAP blocked (not through sigprocmask or "
                 "pthread_sigmask, which the agent keeps it out of): it cannot be probed, and if it "
                 "reaches an int3 probe the kernel ends the target ({})\n",
                 me, probe::describe({t}), fmt::join(int3s_, "; "));
    }
    seen_before_ = std::move(now_seen);
  }

  void killed_by_sigtrap(const std::string& me) {
    read_status();
    if (int3s_.empty()) return;
    fmt::print(stderr, "{}: a thread that blocked SIGTRAP reached an int3 probe{}{} (docs/sites.md)\n", me,
               named_threads_.empty() ? "" : ": seen blocking it: ", probe::describe(named_threads_));
  }

  // The agent's status file (written at once): "ok" then the uprobes that stayed int3s
  // ("int3 ..." lines), or "error: ...". True once it said "ok"; what it said is kept
  // (status()), as the file goes with the scratch directory once read.
  bool read_status() {
    if (have_status_) return true;
    std::ifstream in(status_file_);
    if (!std::getline(in, first_line_) || first_line_ != "ok") return false;
    for (std::string line; std::getline(in, line);)
      if (line.starts_with("int3 ")) int3s_.push_back(line.substr(5));
    have_status_ = true;
    return true;
  }
  // The status file's first line, as last read ("" before the agent wrote it).
  const std::string& status() const { return first_line_; }

 private:
  pid_t pid_;
  std::string status_file_;
  bool have_status_ = false;
  std::string first_line_;
  std::vector<std::string> int3s_;
  std::chrono::steady_clock::time_point next_{};
  std::set<uint32_t> seen_before_, named_;
  std::vector<probe::BlockingThread> named_threads_;
};

int run(const RunFlags& f) {
  const std::string me = "utramp run";
  if (f.command.empty() && !f.pid) {
    fmt::print(stderr, "{}: no program given (utramp run OBJECT -- PROGRAM [ARGS], or -p PID)\n", me);
    return 2;
  }
  if (!f.command.empty() && f.pid) {
    fmt::print(stderr, "{}: -p attaches to a running process: give no program as well\n", me);
    return 2;
  }
  // The program: started here, or the one process PID runs (its refusals first, before
  // anything is read or created).
  std::optional<Target> resolved;
  if (f.pid) {
    if (const int rc = check_attach(f.pid, me, /*recording=*/false)) return rc;
    resolved.emplace();
    resolved->binary = program_of(f.pid);
    if (resolved->binary.empty()) {
      fmt::print(stderr, "{}: process {}: cannot read its program (/proc/{}/exe)\n", me, f.pid, f.pid);
      return 2;
    }
  } else {
    auto r = resolve_target(f.command[0]);
    if (!r) {
      fmt::print(stderr, "{}: {}\n", me, r.error().message);
      return 2;
    }
    resolved = std::move(*r);
  }
  const std::string prog = resolved->binary;
  std::optional<Endpoint> metrics_at;
  if (!f.metrics.empty()) {
    auto e = parse_endpoint(f.metrics);
    if (!e) {
      fmt::print(stderr, "{}: --metrics {}\n", me, e.error().message);
      return 2;
    }
    if (!e->loopback && !f.metrics_public) {
      fmt::print(stderr,
                 "{}: --metrics {}: {} is not a loopback address: the metrics (map contents, function names) "
                 "would be open to the network; add --metrics-public to serve them there\n",
                 me, f.metrics, e->host);
      return 2;
    }
    metrics_at = *e;
  } else if (f.metrics_public || !f.metrics_hist.empty() || !f.metrics_counter.empty()) {
    fmt::print(stderr, "{}: --metrics-public, --metrics-hist and --metrics-counter go with --metrics HOST:PORT\n", me);
    return 2;
  }
  auto target = sites::analyse_file(prog);
  if (!target) {
    fmt::print(stderr, "{}: {}: {}\n", me, prog, target.error().message);
    return 2;
  }
  auto elf = os::ElfFile::open(prog);
  auto types = ebpf::TargetTypes::open(prog);  // none: CO-RE keeps the object's own layouts
  // Load and check everything before anything runs.
  std::vector<ebpf::AttachSpec> attach;
  for (const std::string& t : f.attach) {
    auto a = ebpf::parse_attach_spec(t);
    if (!a) {
      fmt::print(stderr, "{}: {}\n", me, a.error().message);
      return 2;
    }
    attach.push_back(std::move(*a));
  }
  Output out;
  out.json = f.json;
  out.raw = f.raw;
  out.me = me;
  for (const std::string& rt : f.record_types) {
    const size_t eq = rt.find('=');
    if (eq == 0 || eq == std::string::npos || eq + 1 == rt.size()) {
      fmt::print(stderr, "{}: --record-type '{}': expected MAP=TYPE (e.g. events='struct event')\n", me, rt);
      return 2;
    }
    out.record_type[rt.substr(0, eq)] = rt.substr(eq + 1);
  }
  std::vector<ebpf::MapSpec> specs;
  std::vector<std::string> prog_names;  // every program of every object, in order (the .misses map's index)
  std::map<std::string, LibraryFile> libraries;  // by the file found
  std::vector<std::shared_ptr<const btf>> btfs;  // keeps out.spec_btf's types alive
  std::vector<std::string> abs_objects;
  std::vector<metrics::ProgCounters> progs;  // names, in load order (ebpf::kProgStatsMap)
  for (const std::string& path : f.objects) {
    auto obj = ebpf::load_object_file(path, ebpf::runtime_helpers());
    if (!obj) {
      fmt::print(stderr, "{}: {}\n", me, obj.error().message);
      return 2;
    }
    if (auto a = ebpf::apply_attach(*obj, attach); !a) {
      fmt::print(stderr, "{}: {}: {}\n", me, path, a.error().message);
      return 2;
    }
    for (size_t pi = 0; pi < obj->programs.size(); ++pi) {
      ebpf::LoadedProgram& p = obj->programs[pi];
      const bool tail_only = ebpf::tail_call_only(*obj, pi);  // no function: its context is pt_regs
      progs.push_back({p.name, p.section});
      prog_names.push_back(p.name);
      // A uprobe's function: in the traced program, or in the library its binary names.
      const std::vector<sites::SiteInfo>* funcs = &target->functions;
      const os::ElfFile* code = elf ? elf->get() : nullptr;
      const ebpf::TargetTypes* core_types = types ? types->get() : nullptr;
      std::string in = prog;
      if (p.kind == ebpf::ProgKind::usdt) {
        if (auto why = check_usdt_binary(p.binary, prog); !why.empty()) {
          fmt::print(stderr, "{}: {}: program '{}' (section '{}'): {}\n", me, path, p.name, p.section, why);
          return 2;
        }
      } else if (ebpf::is_uprobe(p.kind) && !tail_only) {
        auto b = ebpf::resolve_uprobe_binary(p.binary, prog);
        if (!b) {
          fmt::print(stderr, "{}: {}: program '{}' (section '{}'): {}\n", me, path, p.name, p.section,
                     b.error().message);
          return 2;
        }
        if (b->library) {
          auto it = libraries.find(b->path);
          if (it == libraries.end()) {
            LibraryFile lf;
            auto a = sites::analyse_file(b->path);
            auto e = os::ElfFile::open(b->path);
            if (!a || !e) {
              fmt::print(stderr, "{}: {}: program '{}' (section '{}'): {}: {}\n", me, path, p.name, p.section,
                         b->path, !a ? a.error().message : e.error().message);
              return 2;
            }
            lf.functions = std::move(a->functions);
            lf.elf = std::move(*e);
            if (auto t = ebpf::TargetTypes::open(b->path)) lf.types = std::move(*t);
            it = libraries.emplace(b->path, std::move(lf)).first;
          }
          funcs = &it->second.functions;
          code = it->second.elf.get();
          core_types = it->second.types.get();
          in = b->path;
        }
      }
      const auto* fn = [&]() -> const sites::SiteInfo* {
        for (const auto& x : *funcs)
          if (x.name == p.target) return &x;
        return nullptr;
      }();
      if (!fn && p.kind != ebpf::ProgKind::usdt && !tail_only) {
        fmt::print(stderr, "{}: {}: program '{}' (section '{}'): no function '{}' in {}\n", me, path, p.name,
                   p.section, p.target, in);
        return 2;
      }
      if (auto o = ebpf::check_override(p); !o) {
        fmt::print(stderr, "{}: {}: {}\n", me, path, o.error().message);
        return 2;
      }
      if (ebpf::is_uprobe(p.kind) && fn) {
        if (auto why = check_uprobe(p, *fn, code); !why.empty()) {
          fmt::print(stderr, "{}: {}: program '{}' (section '{}'): {}\n", me, path, p.name, p.section, why);
          return 2;
        }
      }
      if (auto c = ebpf::apply_core(p, obj->local_btf.get(), core_types); !c) {
        fmt::print(stderr, "{}: {}: {}\n", me, path, c.error().message);
        return 2;
      }
      std::optional<abi::Signature> sig;
      if (fn && in == prog)
        if (auto r = os::signature_from_dwarf(prog, p.target)) sig = *r;
      if (sig) {
        if (auto c = ebpf::check_prototype(p, *sig); !c) {
          fmt::print(stderr, "{}: {}: {}\n", me, path, c.error().message);
          return 2;
        }
      }
      // The proof the agent's load repeats (same options: loader.hpp program_options).
      ebpf::ExecOptions vo;
      vo.helpers = &ebpf::runtime_helpers();
      ebpf::program_options(*obj, p, sig ? *sig : abi::Signature::fallback(), vo);
      vo.verifier_log = f.verifier_log ? 2 : 0;
      auto v = ebpf::verify(p.insns, ebpf::verify_env(vo));
      if (!v) {
        fmt::print(stderr, "{}: {}: program '{}' (section '{}') refused by the verifier:\n{}\n", me, path, p.name,
                   p.section, v.error().message);
        return 2;
      }
      if (f.verifier_log)
        fmt::print(stderr, "{}: {}: program '{}' (section '{}'), verifier log:\n{}", me, path, p.name, p.section,
                   v->log);
    }
    for (const auto& rt : out.record_type) {
      const std::string &map = rt.first, &type = rt.second;  // named: clang 14 captures no structured binding
      const bool here = std::any_of(obj->maps.begin(), obj->maps.end(), [&](const ebpf::MapSpec& m) {
        return m.name == map && (m.type == uint32_t(ebpf::MapType::ringbuf) ||
                                 m.type == uint32_t(ebpf::MapType::perf_event_array));
      });
      if (!here) {
        fmt::print(stderr, "{}: --record-type {}={}: {} has no ring buffer or perf event array '{}'\n", me, map,
                   type, path, map);
        return 2;
      }
    }
    // The object's structs from its DWARF too: a record's type is often only a local
    // variable's, which .BTF leaves out.
    std::vector<const btf*> types{obj->local_btf.get()};
    btfs.push_back(obj->local_btf);
    if (auto bytes = os::read_regular(path, uint64_t{256} << 20); bytes) {
      if (auto d = ebpf::ObjectDwarf::open(*bytes); d)
        if (auto b = (*d)->named_types_as_btf(); b) {
          types.push_back(b->get());
          btfs.push_back(*b);
        }
    }
    for (const auto& rt : out.record_type) {
      const std::string &map = rt.first, &type = rt.second;
      const bool known = std::any_of(types.begin(), types.end(), [&](const btf* b) {
        return b && ebpf::find_record_type(b, 0, type).ok();
      });
      if (!known) {
        fmt::print(stderr, "{}: --record-type {}={}: {}: no struct or union '{}' in its BTF or DWARF\n", me, map,
                   type, path, type);
        return 2;
      }
    }
    // USDT programs: every site found and every argument decodable (the agent attaches
    // by the same plan).
    if (elf) {
      if (auto u = ebpf::plan_usdt(*obj, **elf); !u) {
        fmt::print(stderr, "{}: {}: {}\n", me, path, u.error().message);
        return 2;
      }
    } else if (std::any_of(obj->programs.begin(), obj->programs.end(),
                           [](const ebpf::LoadedProgram& p) { return p.kind == ebpf::ProgKind::usdt; })) {
      fmt::print(stderr, "{}: {}: cannot read {} for its USDT notes: {}\n", me, path, prog, elf.error().message);
      return 2;
    }
    for (const std::string& m : f.metrics_hist) {
      const auto it = std::find_if(obj->maps.begin(), obj->maps.end(), [&](const ebpf::MapSpec& x) { return x.name == m; });
      if (it == obj->maps.end() || !is_hist(*it, true)) {
        fmt::print(stderr, "{}: --metrics-hist {}: {} has no array or per-CPU array '{}' of u32 keys and u64 values "
                           "(a log2 histogram's slots)\n", me, m, path, m);
        return 2;
      }
    }
    for (const std::string& m : f.metrics_counter)
      if (std::none_of(obj->maps.begin(), obj->maps.end(), [&](const ebpf::MapSpec& x) { return x.name == m; })) {
        fmt::print(stderr, "{}: --metrics-counter {}: {} has no map '{}'\n", me, m, path, m);
        return 2;
      }
    specs.insert(specs.end(), obj->maps.begin(), obj->maps.end());
    out.spec_btf.resize(specs.size(), types);
    char* rp = realpath(path.c_str(), nullptr);
    abs_objects.push_back(rp ? rp : path);
    free(rp);
  }
  // The consumer sizes the perf rings, as perf_buffer__new's page count does.
  for (ebpf::MapSpec& s : specs)
    if (s.type == uint32_t(ebpf::MapType::perf_event_array)) s.ring_bytes = f.perf_pages * 4096;
  // Stacks are symbolised after the run from the objects the agent lists here.
  if (std::any_of(specs.begin(), specs.end(),
                  [](const ebpf::MapSpec& x) { return x.type == uint32_t(ebpf::MapType::stack_trace); })) {
    ebpf::MapSpec objects;
    objects.name = ebpf::kObjectsMap;
    objects.type = uint32_t(ebpf::MapType::array);
    objects.key_size = 4;
    objects.value_size = ebpf::kObjectsBytes;
    objects.max_entries = 1;
    objects.global_data = true;
    specs.push_back(objects);
  }
  ebpf::MapSpec printk;
  printk.name = ".printk";
  printk.type = uint32_t(ebpf::MapType::ringbuf);
  printk.max_entries = 1u << 20;
  printk.global_data = true;
  specs.push_back(printk);
  // --metrics: the programs count their runs there (the agent finds it by name).
  const size_t prog_stats_map = specs.size();
  if (metrics_at) {
    ebpf::MapSpec ps;
    ps.name = ebpf::kProgStatsMap;
    ps.type = uint32_t(ebpf::MapType::array);
    ps.key_size = 4;
    ps.value_size = static_cast<uint32_t>(std::max<size_t>(1, progs.size()) * sizeof(ebpf::ProgStatsRecord));
    ps.max_entries = 1;
    ps.global_data = true;
    specs.push_back(ps);
  }
  // One u64 per program: the runs the agent skipped by the recursion rule (a probe hit
  // on utramp's own call of a probed library function: agent/bpf.cpp), said at the end.
  ebpf::MapSpec misses;
  misses.name = ".misses";
  misses.type = uint32_t(ebpf::MapType::array);
  misses.key_size = 4;
  misses.value_size = 8;
  misses.max_entries = static_cast<uint32_t>(std::max<size_t>(1, prog_names.size()));
  misses.global_data = true;
  specs.push_back(misses);
  out.spec_btf.resize(specs.size());
  // -o FILE: what run prints goes there, apart from the target's stdout (which stays the
  // terminal's); created 0600 like everything utramp writes.
  std::unique_ptr<FILE, int (*)(FILE*)> out_file(nullptr, &std::fclose);
  if (!f.output.empty()) {
    const int fd = ::open(f.output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    FILE* file = fd >= 0 ? fdopen(fd, "w") : nullptr;
    if (!file) {
      fmt::print(stderr, "{}: -o {}: {}\n", me, f.output, std::strerror(errno));
      if (fd >= 0) ::close(fd);
      return 2;
    }
    out_file.reset(file);
    out.f = file;
  }

  auto scratch = ScratchDir::create("utramp-run");
  if (!scratch) {
    fmt::print(stderr, "{}: {}\n", me, scratch.error().message);
    return 2;
  }
  const std::string dir = scratch->path();
  agent::Config cfg;
  cfg.tracer = "none";
  cfg.trace_dir = dir;
  cfg.bpf_objects = abs_objects;
  cfg.bpf_attach = f.attach;
  cfg.bpf_allow_override = f.allow_override;
  cfg.bpf_map_file = dir + "/maps";
  cfg.bpf_status_file = dir + "/status";
  auto mf = ebpf::MapFile::create(cfg.bpf_map_file, specs);
  if (!mf) {
    fmt::print(stderr, "{}: {}\n", me, mf.error().message);
    return 2;
  }
  // The maps are read by the main loop (rings drained, maps printed) and by the metrics
  // server's thread: one at a time.
  std::mutex mf_lock;
  metrics::RunCounts counts;
  std::unique_ptr<MetricsServer> server;
  if (metrics_at) {
    std::vector<const btf*> spec_btfs;
    for (size_t i = 0; i < specs.size(); ++i) spec_btfs.push_back(out.globals_btf(i));
    metrics::MapOptions mo;
    mo.hist.insert(f.metrics_hist.begin(), f.metrics_hist.end());
    mo.counter.insert(f.metrics_counter.begin(), f.metrics_counter.end());
    auto srv = MetricsServer::start(*metrics_at, [&, spec_btfs, mo, prog_stats_map] {
      std::lock_guard<std::mutex> g(mf_lock);
      // Each program's counters as the target's threads left them (whole words).
      std::vector<metrics::ProgCounters> now = progs;
      const auto recs = mf->data(prog_stats_map);
      for (size_t k = 0; k < now.size() && (k + 1) * sizeof(ebpf::ProgStatsRecord) <= recs.size(); ++k) {
        ebpf::ProgStatsRecord r;
        std::memcpy(&r, recs.data() + k * sizeof r, sizeof r);
        now[k].run_cnt = r.run_cnt;
        now[k].run_ns = r.run_ns;
        now[k].misses = r.misses;
      }
      return metrics::render(*mf, specs, spec_btfs, mo, counts, now);
    }, cli_library(kMetricsLibrary));
    if (!srv) {
      fmt::print(stderr, "{}: --metrics: {}\n", me, srv.error().message);
      return 2;
    }
    server = std::move(*srv);
    const bool v6 = metrics_at->host.find(':') != std::string::npos;
    fmt::print(stderr, "{}: metrics at http://{}{}{}:{}/metrics\n", me, v6 ? "[" : "", metrics_at->host,
               v6 ? "]" : "", server->port());
  }
  // The target: a program started with the agent, or a running process whose agent
  // (loaded now, or there from an earlier attach) loads, verifies and attaches the
  // programs while its threads run (docs/attach.md, "eBPF programs in a running process").
  std::optional<Launch> launch;
  std::unique_ptr<RecordTarget> attached;
  pid_t target_pid = f.pid;
  json answer;  // -p: the agent's, once it attached the programs
  if (f.pid) {
    attached = attach_configured(f.pid, cfg, f.duration_s, me, &answer);
    if (!attached) return 2;
  } else {
    auto l = Launch::start(*resolved, f.command, cfg, dir + "/agent.json");
    if (!l) {
      fmt::print(stderr, "{}: {}\n", me, l.error().message);
      return l.error().code == Errc::not_found ? 2 : 127;
    }
    target_pid = l->pid();
    launch.emplace(std::move(*l));
  }
  using clock = std::chrono::steady_clock;
  auto next_print = clock::now() + std::chrono::duration<double>(f.interval);
  // Once the agent has started (it mapped the maps and read its configuration, and
  // forked children inherit the mapping), nothing in the scratch directory is needed:
  // the watch keeps what the status file says, and the directory goes at once, so that
  // a CLI killed later leaves nothing behind.
  SigtrapWatch watch(target_pid, cfg.bpf_status_file);
  std::string st;
  if (attached) {
    // The agent wrote its status before it answered: nothing in the scratch directory
    // is needed any more, and a CLI killed from now on leaves nothing behind.
    if (watch.read_status()) {
      st = "ok";
      scratch->remove();
    }
    fmt::print(stderr, "{}: {} program{} attached to process {} ({} link{} and probe{}){}; Ctrl-C to stop\n", me,
               answer.value("programs", 0), answer.value("programs", 0) == 1 ? "" : "s", f.pid,
               answer.value("attached", 0), answer.value("attached", 0) == 1 ? "" : "s",
               answer.value("attached", 0) == 1 ? "" : "s",
               f.duration_s > 0 ? fmt::format(" for {} s", f.duration_s) : std::string());
  }
  const auto work =
      [&] {
        if (st.empty() && watch.read_status()) {
          st = "ok";
          scratch->remove();
        }
        watch.look(me);
        std::lock_guard<std::mutex> g(mf_lock);
        const bool any = drain_rings(*mf, out, counts) != 0;
        if (f.interval > 0 && clock::now() >= next_print) {
          print_maps(*mf, specs, out);
          next_print += std::chrono::duration<double>(f.interval);
        }
        return any;
      };
  const Ended ended = launch ? launch->wait(work, 5) : attached->wait(work, 5);
  server.reset();  // served while the target ran
  if (st.empty()) {
    (void)watch.read_status();
    st = watch.status();
  }
  if (st.rfind("error: ", 0) == 0) {
    fmt::print(stderr, "{}: {}; target not started\n", me, st.substr(7));
    return 2;
  }
  if (st.empty()) {
    // No status: the agent did not start. If it refused its configuration
    // (agent/trust.hpp), the same check says why; nothing was attached.
    if (auto trusted = agent::load_trusted_config(dir + "/agent.json"); !trusted) {
      fmt::print(stderr, "{}: the agent did not start in the target, nothing was attached: {}\n", me,
                 trusted.error().message);
      return 2;
    }
  }
  drain_rings(*mf, out, counts, true);
  print_maps(*mf, specs, out);
  report_lost(*mf, out);
  report_misses(*mf, prog_names, out);
  if (ended.signaled) fmt::print(stderr, "{}: target {}\n", me, ended.how);
  // -p: why the programs stopped (Ctrl-C, --duration); an exit or exec was said already.
  if (attached && ended.how.starts_with("detached"))
    fmt::print(stderr, "{}: process {} {}\n", me, f.pid, ended.how);
  if (ended.signaled && WTERMSIG(ended.status) == SIGTRAP) watch.killed_by_sigtrap(me);
  if (mf->unlocked_reads())
    fmt::print(stderr, "{}: {} map bucket(s) were read while a lock the target took was still held "
                       "(it died holding it): their entries may be half updated\n",
               me, mf->unlocked_reads());
  if (mf->corrupt_reads())
    fmt::print(stderr, "{}: the maps hold {} link(s) or position(s) no map writes: the target "
                       "overwrote its maps' memory; what is shown may be wrong\n",
               me, mf->corrupt_reads());
  return ended.exit_code;
}

}  // namespace

void add_run(CLI::App& app) {
  auto f = std::make_shared<RunFlags>();
  CLI::App* sub = app.add_subcommand("run", "Run a program with eBPF programs (clang -target bpf) attached, or "
                                            "attach them to a running process (-p PID)");
  sub->add_option("object", f->object, "eBPF object file (clang -O2 -g -target bpf)")->required();
  sub->add_option("--interval", f->interval, "print the maps every SEC seconds too")
      ->check(CLI::Range(0.0, 86400.0 * 365));
  sub->add_option("--attach", f->attach,
                  "PROG=uprobe:BINARY:FUNC[+OFF], PROG=uretprobe:BINARY:FUNC, PROG=usdt:BINARY:PROVIDER:NAME, "
                  "PROG=fentry:FUNC, PROG=fexit:FUNC, PROG=fmod_ret:FUNC: attach program PROG there (overrides or completes its section; repeatable)")
      ->allow_extra_args(false);
  sub->add_flag("--json", f->json, "one JSON object per line");
  sub->add_flag("--raw", f->raw, "print ring buffer and perf records as bytes, not decoded with the object's BTF");
  sub->add_option("--record-type", f->record_types,
                  "MAP=TYPE: the records of ring buffer or perf event array MAP are TYPE (a struct of the "
                  "object; by default the only struct of the record's size; repeatable)")
      ->allow_extra_args(false);
  sub->add_option("-o,--output", f->output,
                  "write what run prints (records, printk lines, maps) to FILE instead of stdout, apart "
                  "from the target's own output");
  sub->add_flag("--allow-override", f->allow_override,
                "let bpf_override_return skip any function a uprobe is at, not only those marked "
                "UTRAMP_ALLOW_ERROR_INJECTION");
  sub->add_flag("--verifier-log", f->verifier_log,
                "print the verifier's log of every program (on stderr), accepted ones too");
  sub->add_option("--perf-pages", f->perf_pages,
                  "pages of each CPU's ring of a perf event array (a power of two; default 64)")
      ->check(CLI::Range(1u, 1u << 18));
  sub->add_option("--metrics", f->metrics,
                  "HOST:PORT: serve the maps and counters as Prometheus metrics at http://HOST:PORT/metrics "
                  "while the target runs (or the programs are attached, with -p) (loopback only unless --metrics-public; port 0: any free port, printed)");
  sub->add_flag("--metrics-public", f->metrics_public, "let --metrics listen on an address other than loopback");
  sub->add_option("--metrics-hist", f->metrics_hist,
                  "MAP: an array of u64 log2 slots served as a histogram (maps named *hist* are; repeatable)")
      ->allow_extra_args(false);
  sub->add_option("--metrics-counter", f->metrics_counter,
                  "MAP: the map's values only grow: served as counters (NAME_total; maps named *_total are; "
                  "repeatable)")
      ->allow_extra_args(false);
  sub->add_option("-p,--pid", f->pid,
                  "attach the programs to the running process PID instead of starting a program; they "
                  "are detached at Ctrl-C, --duration or the process's end (docs/attach.md)")
      ->check(CLI::Range(1, 4194304));  // the kernel's pid_max at most
  auto duration = std::make_shared<std::string>();
  sub->add_option("--duration", *duration, "with -p: run the programs this long, then detach (e.g. 10s; "
                                            "default: until Ctrl-C)");
  sub->add_option("command", f->command, "-- PROGRAM [ARGS] (none with -p)");
  sub->callback([f, duration] {
    if (!parse_attach_duration(*duration, f->pid, "utramp run", &f->duration_s)) std::exit(2);
    if (!std::isfinite(f->interval)) {  // CLI::Range lets NaN through
      fmt::print(stderr, "utramp run: --interval {}: expected a number of seconds\n", f->interval);
      std::exit(2);
    }
    if (!std::has_single_bit(f->perf_pages)) {
      fmt::print(stderr, "utramp run: --perf-pages {}: expected a power of two\n", f->perf_pages);
      std::exit(2);
    }
    f->objects = {f->object};
    std::exit(run(*f));
  });
}

}  // namespace utramp::cli
