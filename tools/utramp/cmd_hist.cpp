// utramp hist FUNC -- PROGRAM [ARGS]: a log2 latency histogram of FUNC (bcc's
// funclatency), printed when the program ends. Records only FUNC into a scratch trace
// directory that is removed afterwards. `hist FUNC -p PID` does the same on a running
// process, as `record -p` records it (attach.hpp), until Ctrl-C or --duration.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "attach.hpp"
#include "commands.hpp"
#include "hist_print.hpp"
#include "launch.hpp"
#include "libraries.hpp"
#include "os/elf_file.hpp"
#include "record_run.hpp"
#include "sites/object.hpp"
#include "symbols/glob.hpp"
#include "trace_walk.hpp"

namespace utramp::cli {

namespace {

struct HistFlags {
  std::string func;
  std::string unit = "nsecs";
  bool libs = false;
  std::vector<std::string> command;
  int pid = 0;  // -p: a running process instead of a program
  std::string duration;
};

// Whether FUNC names a function PROGRAM imports from its shared libraries (its .dynsym's
// undefined symbols): without --libs, such a function is measured at the program's calls
// to it, through its PLT/GOT (record's library calls), as uftrace shows them.
bool imported(const std::string& binary, const symbols::Globs& want) {
  auto outline = os::read_outline(binary);
  if (!outline) return false;
  for (const auto& name : outline->undefined_dynamic)
    if (want.matches(symbols::Name(name))) return true;
  return false;
}

// Why FUNC cannot be measured in PROGRAM (and, with --libs, the libraries it loads),
// before anything runs: no function matches, or none that matches can be attached (each
// with its reason). "" when it can, or when it may be in an object known only at run
// time (a library loaded later, with --libs), or when the program calls it in a library.
std::string cannot_measure(const HistFlags& f) {
  std::string binary;
  if (f.pid) {
    binary = program_of(f.pid);
    if (binary.empty()) return {};  // run_record_attach says why
  } else {
    auto target = resolve_target(f.command[0]);
    if (!target) return {};  // run_record says why
    binary = target->binary;
    // Library calls are traced in a program utramp starts, not in a running process.
    if (!f.libs && imported(binary, symbols::Globs({f.func}))) return {};
  }
  std::vector<std::string> objects = {binary};
  std::string note;
  if (f.libs)
    for (auto& l : needed_libraries(binary, &note)) objects.push_back(std::move(l));
  const symbols::Globs want({f.func});
  std::vector<std::string> refused;
  bool stripped = false;
  for (const auto& path : objects) {
    auto obj = sites::analyse_file(path);
    if (!obj) continue;
    if (path == binary && obj->functions.empty()) stripped = true;
    for (const auto& fn : obj->functions) {
      if (!want.matches(symbols::Name(fn.name))) continue;
      if (fn.attachable) return {};
      refused.push_back(fmt::format("  {} in {}: {}", symbols::Name(fn.name).full(), path, fn.reason));
    }
  }
  if (!refused.empty()) {
    std::string why = fmt::format("no function matching '{}' can be attached:", f.func);
    for (const auto& r : refused) why += "\n" + r;
    return why;
  }
  if (f.libs) return {};  // perhaps in a library the program loads later
  if (f.pid && imported(binary, want))
    return fmt::format("'{}' names a library function {} calls: library calls are traced in a program utramp "
                       "starts, not in a running process (docs/attach.md); its library's own function can be "
                       "named with --libs",
                       f.func, binary);
  if (stripped)
    return fmt::format("{} has no function symbols (stripped): its own functions cannot be named, nor does it "
                       "call a library function matching '{}'; the libraries' own functions can be named with --libs",
                       binary, f.func);
  return fmt::format("no function of {} matches '{}', nor does it call a library function matching it (the "
                     "libraries' own functions are searched with --libs)",
                     binary, f.func);
}

// Records only FUNC into a scratch directory, removed when this returns.
int hist(const HistFlags& f) {
  if (f.pid && !f.command.empty()) {
    fmt::print(stderr, "utramp hist: -p measures a running process: give no program as well\n");
    return 2;
  }
  if (!f.pid && f.command.empty()) {
    fmt::print(stderr, "utramp hist: no program given (utramp hist FUNC -- PROGRAM [ARGS], or -p PID)\n");
    return 2;
  }
  uint64_t duration_ns = 0;
  if (!f.duration.empty() && (!f.pid || !parse_duration(f.duration, &duration_ns) || duration_ns == 0)) {
    fmt::print(stderr, "utramp hist: --duration '{}': {}\n", f.duration,
               f.pid ? "expected a duration above 0: a number and one of ns, us, ms, s (10s, 500ms)"
                     : "only with -p PID (a program started by hist is measured until it ends)");
    return 2;
  }
  if (std::string why = cannot_measure(f); !why.empty()) {
    fmt::print(stderr, "utramp hist: {}\n", why);
    return 2;
  }
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
  o.agent.only = {f.func};
  o.agent.libraries = f.libs;
  RecordResult r;
  const int code = f.pid ? run_record_attach(f.pid, o, static_cast<double>(duration_ns) / 1e9, &r)
                         : run_record(o, &r);
  if (r.ended.empty()) return code;  // the program never ran (run_record said why)
  auto reader = open_trace("hist", dir);
  if (!reader) return code ? code : 1;
  const auto durations = function_durations(*reader, symbols::Globs({f.func}));
  std::cout << fmt::format("{} calls of {}; target {}\n", durations.size(), f.func, r.ended);
  print_latency_hist(std::cout, durations, f.unit);
  if (durations.empty() && f.libs && !f.command.empty())
    if (auto target = resolve_target(f.command[0]); target && imported(target->binary, symbols::Globs({f.func})))
      fmt::print(stderr,
                 "utramp hist: with --libs, '{}' is traced inside its library, where a function utramp itself "
                 "calls (malloc, memcpy...) takes no trampoline; without --libs the program's calls to it are "
                 "measured\n",
                 f.func);
  if (r.lost) std::cout << fmt::format("({} events lost: counts are low)\n", r.lost);
  if (!r.cut.empty()) std::cout << fmt::format("(the recording was cut: {}: counts are low)\n", r.cut);
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
  sub->add_option("command", f->command, "-- PROGRAM [ARGS]");
  sub->add_option("-p,--pid", f->pid, "measure the running process PID instead of starting a program");
  sub->add_option("--duration", f->duration, "with -p: measure this long, then detach (default: until Ctrl-C)");
  sub->callback([f] { std::exit(hist(*f)); });
}

}  // namespace utramp::cli
