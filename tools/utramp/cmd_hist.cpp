// utramp hist FUNC -- PROGRAM [ARGS]: a log2 latency histogram of FUNC (bcc's
// funclatency), printed when the program ends. Records only FUNC into a scratch trace
// directory that is removed afterwards.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "commands.hpp"
#include "hist_print.hpp"
#include "launch.hpp"
#include "record_run.hpp"
#include "trace_walk.hpp"

namespace utramp::cli {

namespace {

struct HistFlags {
  std::string func;
  std::string unit = "nsecs";
  bool libs = false;
  std::vector<std::string> command;
};

// Records only FUNC into a scratch directory, removed when this returns.
int hist(const HistFlags& f) {
  auto scratch = ScratchDir::create("utramp-hist");
  if (!scratch) {
    fmt::print(stderr, "utramp hist: {}\n", scratch.error().message);
    return 2;
  }
  const std::string dir = scratch->path() + "/trace";
  RecordOptions o;
  o.output = dir;
  o.quiet = true;
  o.command = f.command;
  o.agent.filters = {f.func};
  o.agent.libraries = f.libs;
  RecordResult r;
  const int code = run_record(o, &r);
  if (r.ended.empty()) return code;  // the program never ran (run_record said why)
  auto reader = open_trace("hist", dir);
  if (!reader) return code ? code : 1;
  const auto durations = function_durations(*reader, symbols::Globs({f.func}));
  std::cout << fmt::format("{} calls of {}; target {}\n", durations.size(), f.func, r.ended);
  print_latency_hist(std::cout, durations, f.unit);
  if (r.lost) std::cout << fmt::format("({} events lost: counts are low)\n", r.lost);
  return code;
}

}  // namespace

void add_hist(CLI::App& app) {
  auto f = std::make_shared<HistFlags>();
  CLI::App* sub = app.add_subcommand("hist", "Run a program and print a latency histogram of FUNC");
  sub->add_option("func", f->func, "function (glob) to measure")->required();
  sub->add_option("-u,--unit", f->unit, "nsecs (default), usecs or msecs")
      ->check(CLI::IsMember({"nsecs", "usecs", "msecs"}));
  sub->add_flag("--libs", f->libs, "look for FUNC in shared libraries too");
  sub->add_option("command", f->command, "-- PROGRAM [ARGS]")->required();
  sub->callback([f] { std::exit(hist(*f)); });
}

}  // namespace utramp::cli
