// utramp hist FUNC -- PROGRAM [ARGS]: a log2 latency histogram of FUNC (bcc's
// funclatency), printed when the program ends. Records only FUNC into a scratch trace
// directory that is removed afterwards.
#include <fmt/format.h>

#include <iostream>
#include <memory>

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
  auto target = resolve_target(f.command[0]);
  if (!target) return {};  // run_record says why
  if (!f.libs && imported(target->binary, symbols::Globs({f.func}))) return {};
  std::vector<std::string> objects = {target->binary};
  std::string note;
  if (f.libs)
    for (auto& l : needed_libraries(target->binary, &note)) objects.push_back(std::move(l));
  const symbols::Globs want({f.func});
  std::vector<std::string> refused;
  bool stripped = false;
  for (const auto& path : objects) {
    auto obj = sites::analyse_file(path);
    if (!obj) continue;
    if (path == target->binary && obj->functions.empty()) stripped = true;
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
  if (stripped)
    return fmt::format("{} has no function symbols (stripped): its own functions cannot be named, nor does it "
                       "call a library function matching '{}'; the libraries' own functions can be named with --libs",
                       target->binary, f.func);
  return fmt::format("no function of {} matches '{}', nor does it call a library function matching it (the "
                     "libraries' own functions are searched with --libs)",
                     target->binary, f.func);
}

// Records only FUNC into a scratch directory, removed when this returns.
int hist(const HistFlags& f) {
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
  const int code = run_record(o, &r);
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
  sub->add_option("command", f->command, "-- PROGRAM [ARGS]")->required();
  sub->callback([f] { std::exit(hist(*f)); });
}

}  // namespace utramp::cli
