#include "agent/config.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace utramp::agent {

using nlohmann::json;

Result<ValueSpec> parse_value_format(const std::string& text) {
  const auto bad = [&] {
    return make_error(Errc::invalid_argument,
                      fmt::format("'{}' is not a value format: {}", text, kValueFormats));
  };
  ValueSpec v;
  if (text.empty()) return v;
  const char c = text[0] == 'i' ? 'd' : text[0];
  if (std::string_view("duxscf").find(c) == std::string_view::npos) return bad();
  v.cls = c;
  const std::string width = text.substr(1);
  if (width.empty()) return v;
  if (c == 's' || c == 'c') return bad();
  if (width == "8") v.bits = 8;
  else if (width == "16") v.bits = 16;
  else if (width == "32") v.bits = 32;
  else if (width == "64") v.bits = 64;
  else return bad();
  if (c == 'f' && v.bits < 32) return bad();
  return v;
}

Result<ArgCapture> parse_arg_capture(const std::string& text) {
  const size_t slash = text.find('/');
  const std::string idx = text.substr(0, slash);
  const bool fp = idx.starts_with("fparg");
  const size_t digits = fp ? 5 : 3;
  const int max = fp ? kMaxFpArgIndex : kMaxArgIndex;
  const auto bad = [&](const std::string& why) {
    return make_error(Errc::invalid_argument,
                      fmt::format("'{}' is not argN[/F] (N from 1 to {}) or fpargN[/F] (N from 1 to "
                                  "{}){}",
                                  text, kMaxArgIndex, kMaxFpArgIndex, why));
  };
  if (!(fp || idx.starts_with("arg")) || idx.size() <= digits || idx.size() > digits + 2) return bad("");
  int n = 0;
  for (char c : idx.substr(digits)) {
    if (c < '0' || c > '9') return bad("");
    n = n * 10 + (c - '0');
  }
  if (n < 1 || n > max) return bad("");
  ArgCapture a;
  a.index = static_cast<uint8_t>(n - 1);
  a.fp = fp;
  if (slash != std::string::npos) {
    auto f = parse_value_format(text.substr(slash + 1));
    if (!f || text.size() == slash + 1) return bad(fmt::format(", F one of {}", kValueFormats));
    a.spec = *f;
  }
  if (a.spec.cls == 'f') a.fp = true;  // argN/f: the Nth floating-point argument (uftrace's rule)
  else if (fp && a.spec.cls != 0) return bad(": a floating-point argument takes f, f32 or f64");
  if (a.fp && a.index >= kMaxFpArgIndex) return bad(": there are 8 floating-point argument registers");
  return a;
}

std::string dump_config(const Config& c) {
  json j;
  j["shm_path"] = c.shm_path;
  j["trace_dir"] = c.trace_dir;
  j["tracer"] = c.tracer;
  j["filters"] = c.filters;
  j["notrace"] = c.notrace;
  j["only"] = c.only;
  j["skip"] = c.skip;
  j["libraries"] = c.libraries;
  j["libcalls"] = c.libcalls;
  j["nest_libcalls"] = c.nest_libcalls;
  j["max_depth"] = c.max_depth;
  j["min_duration_ns"] = c.min_duration_ns;
  j["ticks_per_ns"] = c.ticks_per_ns;
  j["tids"] = c.tids;
  j["follow_exec"] = c.follow_exec;
  j["bpf_objects"] = c.bpf_objects;
  j["bpf_attach"] = c.bpf_attach;
  j["bpf_allow_override"] = c.bpf_allow_override;
  j["sigtrap_unblocked"] = c.sigtrap_unblocked;
  j["bpf_map_file"] = c.bpf_map_file;
  j["bpf_status_file"] = c.bpf_status_file;
  json caps = json::array();
  for (const auto& a : c.captures)
    caps.push_back({{"glob", a.glob}, {"args", a.args}, {"retval", a.retval}, {"retfmt", a.retfmt}});
  j["captures"] = caps;
  return j.dump(2);
}

Result<Config> parse_config(const std::string& text, const std::string& path) {
  try {
    const json j = json::parse(text);
    Config c;
    c.shm_path = j.at("shm_path").get<std::string>();
    c.trace_dir = j.value("trace_dir", "");
    c.tracer = j.value("tracer", "function_graph");
    c.filters = j.value("filters", std::vector<std::string>{});
    c.notrace = j.value("notrace", std::vector<std::string>{});
    c.only = j.value("only", std::vector<std::string>{});
    c.skip = j.value("skip", std::vector<std::string>{});
    c.libraries = j.value("libraries", false);
    c.libcalls = j.value("libcalls", true);
    c.nest_libcalls = j.value("nest_libcalls", false);
    c.max_depth = j.value("max_depth", 0u);
    c.min_duration_ns = j.value("min_duration_ns", uint64_t{0});
    c.ticks_per_ns = j.value("ticks_per_ns", 1.0);
    c.tids = j.value("tids", std::vector<uint32_t>{});
    c.follow_exec = j.value("follow_exec", false);
    c.bpf_objects = j.value("bpf_objects", std::vector<std::string>{});
    c.bpf_attach = j.value("bpf_attach", std::vector<std::string>{});
    c.bpf_allow_override = j.value("bpf_allow_override", false);
    c.sigtrap_unblocked = j.value("sigtrap_unblocked", false);
    c.bpf_map_file = j.value("bpf_map_file", "");
    c.bpf_status_file = j.value("bpf_status_file", "");
    for (const auto& a : j.value("captures", json::array())) {
      ArgSpec s;
      s.glob = a.value("glob", "");
      s.args = a.value("args", std::vector<std::string>{});
      s.retval = a.value("retval", false);
      s.retfmt = a.value("retfmt", "");
      c.captures.push_back(std::move(s));
    }
    return c;
  } catch (const std::exception& e) {
    return make_error(Errc::bad_format, fmt::format("agent config {}: {}", path, e.what()));
  }
}

}  // namespace utramp::agent
