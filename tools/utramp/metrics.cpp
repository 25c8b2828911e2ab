#include "metrics.hpp"

#include <bpf/btf.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ebpf/btf_value.hpp"
#include "ebpf/libbpf.hpp"
#include "ebpf/usdt.hpp"
#include "map_values.hpp"

namespace utramp::cli::metrics {

using ojson = nlohmann::ordered_json;

namespace {

// The length of the valid UTF-8 sequence at v[i], or 0 (overlong forms, surrogates and
// code points past U+10FFFF are invalid, as Prometheus' parser finds them).
size_t utf8_length(std::string_view v, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(v[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0, min = 0;
  if ((c & 0xe0) == 0xc0) n = 2, cp = c & 0x1f, min = 0x80;
  else if ((c & 0xf0) == 0xe0) n = 3, cp = c & 0x0f, min = 0x800;
  else if ((c & 0xf8) == 0xf0) n = 4, cp = c & 0x07, min = 0x10000;
  else return 0;
  if (i + n > v.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

// `v` with `\` and newline escaped (and `"` when `quote`); bytes that are not UTF-8 (a
// char array of a key may hold any) as U+FFFD, since a scrape with them is refused whole.
std::string escape(std::string_view v, bool quote) {
  std::string s;
  s.reserve(v.size());
  for (size_t i = 0; i < v.size();) {
    const size_t n = utf8_length(v, i);
    if (n == 0) {
      s += "\xef\xbf\xbd";
      ++i;
      continue;
    }
    const char c = v[i];
    if (c == '\\') s += "\\\\";
    else if (c == '"' && quote) s += "\\\"";
    else if (c == '\n') s += "\\n";
    else s.append(v.substr(i, n));
    i += n;
  }
  return s;
}

}  // namespace

std::string escape_label_value(std::string_view v) { return escape(v, true); }
std::string escape_help(std::string_view v) { return escape(v, false); }

namespace {

bool word_char(char c, bool colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         (colon && c == ':');
}

std::string valid_name(std::string_view v, bool colon) {
  std::string s;
  for (const char c : v) s += word_char(c, colon) ? c : '_';
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) s.insert(0, "_");
  return s;
}

}  // namespace

std::string metric_name(std::string_view v) { return valid_name(v, true); }

std::string label_name(std::string_view v) {
  std::string s = valid_name(v, false);
  if (s.starts_with("__") || s == "le" || s == "quantile") s.insert(0, "key_");
  return s;
}

bool Writer::family(const std::string& name, Type type, std::string_view help) {
  open_ = families_.insert(name).second;
  if (!open_) return false;
  static constexpr const char* kTypes[] = {"counter", "gauge", "histogram"};
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escape_help(help), name, kTypes[int(type)]);
  return true;
}

void Writer::line(std::string_view name, const Labels& labels, std::string_view value) {
  if (!open_) return;
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i)
      out_ += fmt::format("{}{}=\"{}\"", i ? "," : "", labels[i].name, escape_label_value(labels[i].value));
    out_ += '}';
  }
  out_ += ' ';
  out_ += value;
  out_ += '\n';
}

void Writer::sample(std::string_view name, const Labels& labels, uint64_t v) {
  line(name, labels, fmt::format("{}", v));
}
void Writer::sample(std::string_view name, const Labels& labels, int64_t v) {
  line(name, labels, fmt::format("{}", v));
}
void Writer::sample(std::string_view name, const Labels& labels, double v) {
  if (std::isnan(v)) line(name, labels, "NaN");
  else if (std::isinf(v)) line(name, labels, v > 0 ? "+Inf" : "-Inf");
  else line(name, labels, fmt::format("{}", v));
}

void Writer::log2_histogram(std::string_view name, const Labels& labels, std::span<const uint64_t> slots) {
  uint64_t count = 0;
  double sum = 0;
  Labels l = labels;
  l.push_back({"le", ""});
  const std::string bucket = fmt::format("{}_bucket", name);
  for (size_t i = 0; i < slots.size(); ++i) {
    count += slots[i];
    // Slot i's least value: 2^i (slot 0: 0). Its greatest: 2^(i+1) - 1.
    sum += double(slots[i]) * (i == 0 ? 0.0 : std::ldexp(1.0, int(i)));
    if (i >= 63) break;  // slot 63 holds up to 2^64 - 1: that is the +Inf bucket
    l.back().value = fmt::format("{}", (uint64_t{2} << i) - 1);
    sample(bucket, l, count);
  }
  for (size_t i = 64; i < slots.size(); ++i) count += slots[i];  // not log2 slots of a u64: counted all the same
  l.back().value = "+Inf";
  sample(bucket, l, count);
  sample(fmt::format("{}_sum", name), labels, sum);
  sample(fmt::format("{}_count", name), labels, count);
}

namespace {

// a + b for two values of one type (btf_value's JSON): see entry_value.
void add_into(ojson& a, const ojson& b) {
  if (a.is_number_unsigned() && b.is_number_unsigned()) {
    a = a.get<uint64_t>() + b.get<uint64_t>();
  } else if (a.is_number_integer() && b.is_number_integer()) {
    a = int64_t(uint64_t(a.get<int64_t>()) + uint64_t(b.get<int64_t>()));
  } else if (a.is_number() && b.is_number()) {
    a = a.get<double>() + b.get<double>();
  } else if (a.is_array() && b.is_array()) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) add_into(a[i], b[i]);
  } else if (a.is_object() && b.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it)
      if (b.contains(it.key())) add_into(it.value(), b[it.key()]);
  }
}

// A label's text: strings as they are, other values as bpftrace prints them.
std::string label_text(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  return ebpf::render_value(v);
}

// An integer type of BTF (through typedefs and modifiers)?
bool btf_integer(const btf* b, uint32_t type) {
  if (!b || !type) return false;
  const int id = ebpf::libbpf().btf__resolve_type(b, type);
  const btf_type* t = id > 0 ? ebpf::libbpf().btf__type_by_id(b, uint32_t(id)) : nullptr;
  return t && (btf_is_int(t) || btf_is_any_enum(t));
}

bool is_counter(const ebpf::MapSpec& s, const MapOptions& opt) { return opt.counter.count(s.name) != 0; }

std::string map_family(const ebpf::MapSpec& s, std::string_view field, bool counter) {
  std::string n = metric_name(fmt::format("utramp_map_{}{}{}", s.name, field.empty() ? "" : "_", field));
  if (counter && !n.ends_with("_total")) n += "_total";
  return n;
}

// Prometheus keeps the `_total` suffix for counters: a family named so is one (a map
// or global named `total`, a member `bytes_total`), the others gauges.
Type number_type(const std::string& family) { return family.ends_with("_total") ? Type::counter : Type::gauge; }

// "hash map 'name', key struct k, value u64"
std::string describe(const ebpf::MapSpec& s, const btf* b) {
  auto type = [&](uint32_t id, uint32_t size) {
    return b && id ? ebpf::type_name(b, id) : fmt::format("{} bytes", size);
  };
  return fmt::format("{} map '{}' (key {}, value {})", ebpf::map_type_name(s.type), s.name,
                     type(s.key_type, s.key_size), type(s.value_type, s.value_size));
}

std::vector<uint64_t> numbers(const ojson& v) {
  std::vector<uint64_t> out;
  for (const auto& x : v) out.push_back(x.is_number() ? x.get<uint64_t>() : 0);
  return out;
}

bool numeric_array(const ojson& v) {
  return v.is_array() && std::all_of(v.begin(), v.end(), [](const ojson& x) { return x.is_number_integer(); });
}

void write_number(Writer& w, const std::string& name, const Labels& l, const ojson& v) {
  if (v.is_boolean()) w.sample(name, l, uint64_t(v.get<bool>()));
  else if (v.is_number_unsigned()) w.sample(name, l, v.get<uint64_t>());
  else if (v.is_number_integer()) w.sample(name, l, v.get<int64_t>());
  else if (v.is_number_float()) w.sample(name, l, v.get<double>());
}

bool is_number(const ojson& v) { return v.is_number() || v.is_boolean(); }

}  // namespace

ojson entry_value(const btf* b, uint32_t type, const ebpf::MapEntry& e) {
  if (e.values.empty()) return nullptr;
  if (!b || !type) {
    if (!is_int_size(e.values[0].size())) return nullptr;
    return as_u64(combined(e));
  }
  ojson v = ebpf::btf_value(b, type, e.values[0]);
  if (btf_integer(b, type) && is_int_size(e.values[0].size())) {
    // Sum the bytes (wrapping at the type's size), then decode once: signedness and
    // enums as the type says.
    const auto sum = combined(e);
    return ebpf::btf_value(b, type, sum);
  }
  for (size_t c = 1; c < e.values.size(); ++c) add_into(v, ebpf::btf_value(b, type, e.values[c]));
  return v;
}

Labels key_labels(const ebpf::MapSpec& s, const btf* b, std::span<const uint8_t> key) {
  if (is_lpm(s)) return {{"key", lpm_key(key)}};
  if (b && s.key_type) {
    const ojson v = ebpf::btf_value(b, s.key_type, key);
    if (v.is_object()) {
      Labels l;
      for (auto it = v.begin(); it != v.end(); ++it) l.push_back({label_name(it.key()), label_text(it.value())});
      return l;
    }
    return {{"key", label_text(v)}};
  }
  return {{"key", is_int_size(key.size()) ? fmt::format("{}", as_u64(key)) : hex(key, "")}};
}

void write_map(Writer& w, const ebpf::MapSpec& s, const btf* b, const std::vector<ebpf::MapEntry>& entries,
               const MapOptions& opt) {
  const std::string what = describe(s, b);
  if (is_hist(s, opt.hist.count(s.name) != 0)) {
    std::vector<uint64_t> slots;
    for (const auto& e : entries) slots.push_back(as_u64(combined(e)));
    if (w.family(map_family(s, "", false), Type::histogram, "log2 histogram: " + what))
      w.log2_histogram(map_family(s, "", false), {}, slots);
    return;
  }
  // Each entry's labels and value, then one family per numeric column.
  std::vector<std::pair<Labels, ojson>> rows;
  for (const auto& e : entries) {
    ojson v = entry_value(b, s.value_type, e);
    if (v.is_null()) return;  // values that are neither integers nor BTF-described: not metrics
    if (is_array(s) && v.is_number() && v == 0) continue;
    rows.emplace_back(key_labels(s, b, e.key), std::move(v));
  }
  // The families follow the values' shape: nothing to show before the first entry.
  if (rows.empty()) return;
  const bool counter = is_counter(s, opt);
  if (!rows[0].second.is_object()) {
    if (!is_number(rows[0].second)) return;
    const std::string name = map_family(s, "", counter);
    if (!w.family(name, number_type(name), what)) return;
    for (const auto& [l, v] : rows) write_number(w, name, l, v);
    return;
  }
  // Struct values: a `slots` array of integers is a log2 histogram (libbpf-tools'
  // struct hist), each other integer member a family of its own.
  for (auto col = rows[0].second.begin(); col != rows[0].second.end(); ++col) {
    const std::string& field = col.key();
    if (field == "slots" && numeric_array(col.value())) {
      const std::string name = map_family(s, "", false);
      if (!w.family(name, Type::histogram, "log2 histogram of each key (struct member 'slots'): " + what)) continue;
      for (const auto& [l, v] : rows)
        if (v.contains(field)) w.log2_histogram(name, l, numbers(v[field]));
      continue;
    }
    if (!is_number(col.value())) continue;
    const std::string name = map_family(s, field, counter);
    if (!w.family(name, number_type(name), fmt::format("member '{}' of {}", field, what))) continue;
    for (const auto& [l, v] : rows)
      if (v.contains(field)) write_number(w, name, l, v[field]);
  }
}

void write_globals(Writer& w, const ebpf::MapSpec& s, const btf* b, std::span<const uint8_t> data) {
  if (!b || s.readonly) return;  // .rodata: constants the loader set, not measurements
  for (const ebpf::GlobalVar& g : s.vars) {
    if (g.name == "____fmt" || g.name.ends_with(".____fmt")) continue;  // bpf_printk's formats
    if (uint64_t(g.offset) + g.size > data.size() || !btf_integer(b, g.type_id)) continue;
    const ojson v = ebpf::btf_value(b, g.type_id, data.subspan(g.offset, g.size));
    if (!is_number(v)) continue;
    const std::string name = metric_name("utramp_global_" + g.name);
    if (w.family(name, number_type(name), fmt::format("global variable '{}' ({})", g.name, s.name)))
      write_number(w, name, {}, v);
  }
}

std::string render(const ebpf::MapFile& mf, const std::vector<ebpf::MapSpec>& specs,
                   const std::vector<const btf*>& btfs, const MapOptions& opt, const RunCounts& counts,
                   const std::vector<ProgCounters>& progs) {
  Writer w;
  std::vector<std::pair<std::string, uint64_t>> sizes;  // utramp_map_entries
  std::vector<size_t> rings;
  for (size_t i = 0; i < mf.count() && i < specs.size(); ++i) {
    const ebpf::MapSpec& s = specs[i];
    const btf* b = i < btfs.size() ? btfs[i] : nullptr;
    if (s.type == uint32_t(ebpf::MapType::ringbuf) || s.type == uint32_t(ebpf::MapType::perf_event_array)) {
      rings.push_back(i);
      continue;
    }
    if (s.global_data) {
      write_globals(w, s, b, mf.data(i));
      continue;
    }
    // A bloom filter has no entries to list, a prog_array's values are program indexes
    // (not measurements), and the USDT argument specs are libbpf's bookkeeping.
    if (s.type == uint32_t(ebpf::MapType::bloom_filter) || s.type == uint32_t(ebpf::MapType::prog_array) ||
        s.type == uint32_t(ebpf::MapType::stack_trace) || ebpf::is_usdt_internal_map(s.name))
      continue;
    const auto entries = mf.entries(i);
    sizes.emplace_back(s.name, entries.size());
    write_map(w, s, b, entries, opt);
  }
  if (w.family("utramp_map_entries", Type::gauge, "entries of each map (an array's: max_entries)"))
    for (const auto& [name, n] : sizes) w.sample("utramp_map_entries", {{"map", name}}, n);
  if (w.family("utramp_ring_records_total", Type::counter,
               "records read from each ring buffer and perf event array"))
    for (size_t i : rings)
      if (specs[i].name != ".printk")
        w.sample("utramp_ring_records_total", {{"map", specs[i].name}},
                 i < counts.records.size() ? counts.records[i] : 0);
  if (w.family("utramp_ring_lost_total", Type::counter,
               "records the target could not send (its ring buffer or perf ring was full)"))
    for (size_t i : rings)
      w.sample("utramp_ring_lost_total", {{"map", specs[i].name}}, mf.ring_dropped(i));
  for (size_t i : rings)
    if (specs[i].name == ".printk" &&
        w.family("utramp_printk_lines_total", Type::counter, "bpf_printk lines read"))
      w.sample("utramp_printk_lines_total", {}, i < counts.records.size() ? counts.records[i] : 0);
  if (!progs.empty()) {
    auto each = [&](const char* name, Type t, const char* help, auto value) {
      if (!w.family(name, t, help)) return;
      for (const ProgCounters& p : progs) w.sample(name, {{"prog", p.name}, {"section", p.section}}, value(p));
    };
    each("utramp_prog_runs_total", Type::counter, "runs of each program",
         [](const ProgCounters& p) { return p.run_cnt; });
    each("utramp_prog_run_seconds_total", Type::counter, "time spent in each program, in seconds",
         [](const ProgCounters& p) { return double(p.run_ns) / 1e9; });
    each("utramp_prog_misses_total", Type::counter,
         "runs of each program skipped (it was already running on the thread)",
         [](const ProgCounters& p) { return p.misses; });
  }
  return w.text();
}

}  // namespace utramp::cli::metrics
