// utramp hist FUNC -- PROGRAM [ARGS]: a log2 latency histogram of FUNC (bcc's
// funclatency), printed when the program ends. Records only FUNC into a scratch trace
// directory that is removed afterwards.
#include <fmt/format.h>
#include <stdlib.h>

#include <filesystem>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "hist_print.hpp"
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

}  // namespace

void add_hist(CLI::App& app) {
  auto f = std::make_shared<HistFlags>();
  CLI::App* sub = app.add_subcommand("hist", "Run a program and print a latency histogram of FUNC");
  sub->add_option("func", f->func, "function (glob) to measure")->required();
  sub->add_option("-u,--unit", f->unit, "nsecs (default), usecs or msecs")
      ->check(CLI::IsMember({"nsecs", "usecs", "msecs"}));
  sub->add_flag("--libs", f->libs, "look for FUNC in shared libraries too");
  sub->add_option("command", f->command, "-- PROGRAM [ARGS]")->required();
  sub->callback([f] {
    char tmpl[] = "/tmp/utramp-hist-XXXXXX";
    if (!mkdtemp(tmpl)) {
      fmt::print(stderr, "utramp hist: cannot create a scratch directory\n");
      std::exit(2);
    }
    const std::string dir = tmpl;
    RecordOptions o;
    o.output = dir;
    o.quiet = true;
    o.command = f->command;
    o.agent.filters = {f->func};
    o.agent.libraries = f->libs;
    RecordResult r;
    const int code = run_record(o, &r);
    int exit_code = code;
    if (r.ended.empty()) {
      // The program never ran (run_record printed why).
      std::filesystem::remove_all(dir);
      std::exit(code);
    }
    if (auto reader = open_trace("hist", dir)) {
      const auto durations = function_durations(*reader, symbols::Globs({f->func}));
      std::cout << fmt::format("{} calls of {}; target {}\n", durations.size(), f->func, r.ended);
      print_latency_hist(std::cout, durations, f->unit);
      if (r.lost) std::cout << fmt::format("({} events lost: counts are low)\n", r.lost);
    } else {
      exit_code = exit_code ? exit_code : 1;
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    std::exit(exit_code);
  });
}

}  // namespace utramp::cli
