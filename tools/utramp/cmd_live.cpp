// utramp live [record options] [--] PROGRAM [ARGS], and `utramp PROGRAM [ARGS]` (main.cpp):
// uftrace's live mode. Records into a scratch directory, shows it as `utramp replay`
// does, and removes it; exits with the program's status, as `record` does.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include "commands.hpp"
#include "launch.hpp"
#include "record_run.hpp"

namespace utramp::cli {

namespace {

int live(RecordFlags& f) {
  auto scratch = ScratchDir::create("utramp-live");
  if (!scratch) {
    fmt::print(stderr, "utramp live: {}\n", scratch.error().message);
    return 2;
  }
  if (f.rec.output != "utramp.data")
    fmt::print(stderr, "utramp live: -o {}: ignored, the trace goes into a scratch directory "
                       "(record -o keeps one)\n", f.rec.output);
  f.rec.output = scratch->path() + "/trace";
  f.rec.quiet = true;
  RecordResult r;
  const int code = run_record(f.rec, &r);
  if (r.ended.empty()) return code;  // the program never ran (run_record said why)
  std::fflush(stdout);  // the program's output first, then the graph
  if (const int shown = replay_trace(f.rec.output); shown != 0 && code == 0) return shown;
  if (r.lost) fmt::print(stderr, "utramp live: {} events lost (rings too small: --buffer-size)\n", r.lost);
  return code;
}

}  // namespace

void add_live(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "live", "Record a program and show its call graph (record, then replay, into a scratch directory)");
  auto f = add_record_options(sub);
  sub->callback([f] {
    if (!finish_record_flags(*f, "live")) std::exit(2);
    std::exit(live(*f));
  });
}

}  // namespace utramp::cli
