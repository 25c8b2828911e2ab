// utramp show -p PID [--json]: what utramp has put into a running process, as the
// kernel's enabled_functions and `bpftool link show` tell it of the kernel: each patched
// function with its site and links, the library calls hooked, `utramp run -p`'s eBPF
// programs (runs, misses) and maps, the agent's state and its clients, and what is not
// counted. Asked over the control channel
// (agent/control_protocol.hpp; docs/attach.md).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "agent/control_protocol.hpp"
#include "commands.hpp"

namespace utramp::cli {

namespace {

using nlohmann::json;

constexpr int kShowTimeoutMs = 10000;

std::string links_text(const json& links) {
  std::string out;
  for (const json& l : links) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{} #{}", l.value("type", "?"), l.value("id", 0));
    if (l.contains("client")) out += fmt::format(" (client {})", l.at("client").get<uint64_t>());
    if (l.contains("run_cnt")) out += fmt::format(" ({} runs)", l.at("run_cnt").get<uint64_t>());
    if (l.value("misses", 0) != 0) out += fmt::format(" ({} missed)", l.at("misses").get<uint64_t>());
  }
  return out;
}

void print_text(const json& j) {
  const json& a = j.at("agent");
  fmt::print("process {} ({}): agent {}, tracer {}, started {}\n", j.value("pid", 0), j.value("exe", ""),
             a.value("state", "?"), a.value("tracer", "?"), a.value("started", "?"));
  if (!a.value("trace_dir", "").empty()) fmt::print("trace directory: {}\n", a.value("trace_dir", ""));
  const json& fns = j.at("functions");
  fmt::print("{} functions patched\n", fns.size());
  if (!fns.empty()) {
    fmt::print("  {:<32} {:<18} {:<16} {:<6} {}\n", "FUNCTION", "ADDRESS", "SITE", "STATE", "LINKS");
    for (const json& f : fns) {
      const json site = f.value("site", json::object());
      fmt::print("  {:<32} {:<18} {:<16} {:<6} {}\n", f.value("name", "?"), f.value("addr", "?"),
                 site.value("kind", "?"), site.value("state", "?"), links_text(f.at("links")));
    }
  }
  fmt::print("{} library calls hooked (GOT slots); {} sites hold utramp's NOP instead of the file's bytes\n",
             j.value("library_calls_hooked", 0), j.value("sites_as_nop", 0));
  // `utramp run`'s programs and maps (`bpftool prog show`, `map show`).
  if (const auto b = j.find("bpf"); b != j.end() && b->is_object()) {
    const json progs = b->value("programs", json::array()), maps = b->value("maps", json::array());
    fmt::print("{} eBPF programs ({} probes){}\n", progs.size(), b->value("probes", 0),
               b->value("stats", false) ? "" : "; runs counted only with utramp run --metrics");
    if (!progs.empty()) {
      fmt::print("  {:<24} {:<10} {:<32} {:>8} {:>12} {:>12} {:>8}\n", "PROGRAM", "TYPE", "TARGET", "ATTACHED",
                 "RUNS", "RUN NS", "MISSES");
      for (const json& p : progs)
        fmt::print("  {:<24} {:<10} {:<32} {:>8} {:>12} {:>12} {:>8}\n", p.value("name", "?"), p.value("type", "?"),
                   p.value("target", ""), p.value("attached", 0),
                   p.contains("run_cnt") ? std::to_string(p.at("run_cnt").get<uint64_t>()) : "-",
                   p.contains("run_ns") ? std::to_string(p.at("run_ns").get<uint64_t>()) : "-",
                   p.value("misses", uint64_t{0}));
    }
    for (const json& m : maps)
      fmt::print("  map {} ({}, {} max entries{})\n", m.value("name", "?"), m.value("type", "?"),
                 m.value("max_entries", 0),
                 m.contains("entries") ? fmt::format(", {} used", m.at("entries").get<uint64_t>()) : "");
  }
  // Each client and what it made: the launcher's (client 0), then each connection.
  for (const json& c : j.at("clients")) {
    std::string made;
    if (!c.value("recording", std::string()).empty()) made += fmt::format("; recording into {}", c.value("recording", ""));
    if (const auto o = c.value("bpf_objects", std::vector<std::string>{}); !o.empty())
      made += fmt::format("; eBPF programs of {}", fmt::join(o, " "));
    if (c.value("launch", false))
      fmt::print("client 0: the launcher, {}{}; {} links\n", c.value("command", ""), made, c.value("links", 0));
    else
      fmt::print("client {}: process {} (uid {}) since {}: {}{}; {} links\n", c.value("id", 0), c.value("pid", 0),
                 c.value("uid", 0), c.value("since", "?"), c.value("command", ""), made, c.value("links", 0));
  }
  if (const size_t n = j.value("awaiting_release", size_t{0}))
    fmt::print("{} clients' programs and maps awaiting release (threads may still be in images that ran them)\n", n);
  for (const json& n : j.at("not_tracked")) fmt::print("not tracked: {}\n", n.get<std::string>());
}

}  // namespace

void add_show(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("show", "Show what utramp has put into a running process (patched "
                                             "functions, links, clients)");
  auto pid = std::make_shared<int>(0);
  auto as_json = std::make_shared<bool>(false);
  sub->add_option("-p,--pid", *pid, "the process")->required()->check(CLI::PositiveNumber);
  sub->add_flag("--json", *as_json, "the agent's answer as JSON");
  sub->callback([pid, as_json] {
    auto r = agent::control::call(*pid, {agent::control::MsgType::show, json::object()}, kShowTimeoutMs);
    if (!r) {
      fmt::print(stderr, "utramp show: process {}: {}\n", *pid, r.error().message);
      std::exit(2);
    }
    try {
      if (*as_json) fmt::print("{}\n", r->dump(2));
      else print_text(*r);
    } catch (const json::exception& e) {
      fmt::print(stderr, "utramp show: process {}: the agent's answer is not what this utramp reads: {}\n",
                 *pid, e.what());
      std::exit(1);
    }
    std::exit(0);
  });
}

}  // namespace utramp::cli
