// utramp info [DIR]: what a recording is (uftrace info's questions): the command line,
// the binary and its build-id, how the program ended, the events saved and lost, when
// and for how long, and per process and thread.
#include <fmt/format.h>

#include <cstdlib>
#include <memory>

#include "commands.hpp"
#include "trace_walk.hpp"

namespace utramp::cli {

namespace {

int info(const std::string& dir) {
  auto r = open_trace("info", dir);
  if (!r) return 1;
  for (const auto& [k, v] : recording_summary(*r)) fmt::print("# {:<14}: {}\n", k, v);
  for (const auto& t : r->info().threads)
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
