// utramp list PROGRAM [GLOB]: the functions of a program and whether each can be
// attached, like ftrace's available_filter_functions.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "libraries.hpp"
#include "os/elf_file.hpp"
#include "sites/object.hpp"
#include "symbols/glob.hpp"

namespace utramp::cli {

namespace {

struct Options {
  std::string program;
  std::string glob;
  bool attachable_only = false;
  bool libs = false;
  bool json = false;
  // A catalogue: full names tell overloads apart (replay's default is simple).
  std::string demangle = "full";
  symbols::Style names = symbols::Style::full;  // from `demangle`
};

int run(const Options& o) {
  if (access(o.program.c_str(), F_OK) != 0) {
    fmt::print(stderr, "utramp list: {}: no such file\n", o.program);
    return 2;
  }
  std::vector<std::string> paths{o.program};
  if (o.libs) {
    std::string note;
    for (auto& l : needed_libraries(o.program, &note)) paths.push_back(l);
    if (!note.empty()) fmt::print(stderr, "utramp list: {}: {}\n", o.program, note);
  }

  nlohmann::json js = nlohmann::json::array();
  size_t shown = 0, total = 0, matched = 0;
  bool header = false;
  for (size_t pi = 0; pi < paths.size(); ++pi) {
    auto obj = sites::analyse_file(paths[pi]);
    if (!obj) {
      fmt::print(stderr, "utramp list: {}\n", obj.error().message);
      if (pi == 0) return 2;
      continue;
    }
    if (obj->stripped)
      fmt::print(stderr, "utramp list: {}: stripped (no .symtab): only exported functions from "
                         ".dynsym are listed\n", paths[pi]);
    if (obj->functions.empty() && pi == 0) {
      fmt::print(stderr, "utramp list: {}: no function symbols at all (fully stripped)\n",
                 paths[pi]);
      return 2;
    }
    for (const auto& f : obj->functions) {
      ++total;
      const symbols::Name name(f.name);
      const std::string& shown_name = name.in(o.names);
      if (!o.glob.empty() && !symbols::glob_matches(o.glob, name)) continue;
      ++matched;
      if (o.attachable_only && !f.attachable) continue;
      ++shown;
      if (o.json) {
        js.push_back({{"name", shown_name},
                      {"symbol", f.name},
                      {"object", obj->path},
                      {"address", fmt::format("{:#x}", f.func)},
                      {"site", fmt::format("{:#x}", f.site)},
                      {"size", f.size},
                      {"kind", std::string(sites::site_kind_name(f.kind))},
                      {"endbr64", f.endbr},
                      {"listed", f.listed},
                      {"attachable", f.attachable},
                      {"reason", f.reason}});
        continue;
      }
      if (!header) {
        fmt::print("{:<18} {:<14} {:<6} {:<24} {}\n", "ADDRESS", "SITE", "ATTACH", "OBJECT",
                   "FUNCTION");
        header = true;
      }
      std::string objname = obj->path.substr(obj->path.rfind('/') + 1);
      fmt::print("{:#018x} {:<14} {:<6} {:<24} {}{}\n", f.func,
                 fmt::format("{}{}", f.endbr ? "endbr+" : "", sites::site_kind_name(f.kind)),
                 f.attachable ? "yes" : "no", objname, shown_name,
                 f.attachable ? "" : fmt::format("  ({})", f.reason));
    }
  }
  if (o.json) fmt::print("{}\n", js.dump(2));
  if (shown == 0 && !o.glob.empty()) {
    if (matched)
      fmt::print(stderr, "utramp list: {} function(s) match '{}', none of them attachable\n",
                 matched, o.glob);
    else
      fmt::print(stderr, "utramp list: no function matches '{}' ({} functions looked at)\n",
                 o.glob, total);
    return 1;
  }
  return 0;
}

}  // namespace

void add_list(CLI::App& app) {
  auto opts = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "list", "List a program's functions, their patch site kind and whether they can be attached");
  sub->add_option("program", opts->program, "ELF executable or shared library")->required();
  sub->add_option("glob", opts->glob,
                  "only functions this glob names (symbol, full or simple name: docs/tracing.md)");
  sub->add_flag("-a,--attachable", opts->attachable_only, "only functions that can be attached");
  sub->add_flag("-l,--libs", opts->libs, "also the shared libraries the program loads");
  sub->add_flag("--json", opts->json, "machine-readable output");
  add_name_options(sub, &opts->demangle);
  sub->callback([opts] {
    if (!name_style("list", opts->demangle, &opts->names)) std::exit(2);
    std::exit(run(*opts));
  });
}

}  // namespace utramp::cli
