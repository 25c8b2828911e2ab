// utramp info [DIR]: what a recording is (uftrace info's questions): the command line,
// the binary and its build-id, how the program ended, the events saved and lost, when
// and for how long, and per process and thread.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "commands.hpp"
#include "trace_walk.hpp"

namespace utramp::cli {

namespace {

std::string joined(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

int info(const std::string& dir) {
  auto r = open_trace("info", dir);
  if (!r) return 1;
  const trace::TraceInfo& in = r->info();
  uint64_t events = 0, lost = 0, unsaved = 0;
  for (const auto& t : in.threads) {
    events += t.events;
    lost += t.lost;
    unsaved += t.unsaved;
  }
  auto row = [](const char* k, const std::string& v) { fmt::print("# {:<14}: {}\n", k, v); };
  auto known = [](const std::string& v) { return v.empty() ? std::string("(not recorded)") : v; };
  row("command line", joined(in.command));
  row("binary", known(in.binary));
  row("build id", known(in.build_id));
  row("recorded", known(in.date));
  row("tracer", in.tracer + ", " + in.buffer_mode + " mode");
  row("state", in.state + (in.cut_reason.empty() ? "" : ": " + in.cut_reason));
  row("exit status", known(in.exit));
  // The root process's end, from its process file: how long the recording ran.
  uint64_t end = 0;
  for (const auto& [pid, p] : r->processes())
    if (p.parent == 0) end = std::max(end, p.end_time);
  row("elapsed time", end > in.start_time ? format_duration(r->to_ns(end - in.start_time)) : "(unknown)");
  row("events", fmt::format("{} saved, {} lost{}", events, lost,
                            unsaved ? fmt::format(", {} not saved (cut)", unsaved) : ""));
  row("processes", std::to_string(std::max<size_t>(r->processes().size(), 1)));
  fmt::print("# {:<14}: {}\n", "threads", in.threads.size());
  for (const auto& t : in.threads)
    fmt::print("#   thread {}/{}: {} events, {} lost{}\n", t.pid, t.tid, t.events, t.lost,
               t.overwritten.empty() ? "" : " (ring overwritten by the program)");
  return 0;
}

}  // namespace

void add_info(CLI::App& app) {
  auto dir = std::make_shared<std::string>("utramp.data");
  CLI::App* sub = app.add_subcommand("info", "Show what a recording is: command, binary, build id, status, events");
  sub->add_option("dir", *dir, "trace directory")->capture_default_str();
  sub->callback([dir] { std::exit(info(*dir)); });
}

}  // namespace utramp::cli
