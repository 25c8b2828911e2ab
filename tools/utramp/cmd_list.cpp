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
#include "os/elf_file.hpp"
#include "sites/object.hpp"
#include "symbols/glob.hpp"

namespace utramp::cli {

namespace {

// The shared libraries the dynamic loader would map for `program`, as `ld.so --list`
// resolves them. The loader is the one this process runs under, never one the file
// names (a file's PT_INTERP could be any program), and in list mode it maps the objects
// and exits without running any of their code. Executing the program itself with
// LD_TRACE_LOADED_OBJECTS set, as ldd does, would run a statically linked program and
// crash a shared library. `note` says why the list is empty when it is for a reason.
std::vector<std::string> needed_libraries(const std::string& program, std::string* note) {
  std::vector<std::string> out;
  auto elf = os::ElfFile::open(program);
  if (!elf) return out;
  if (!(*elf)->has_dynamic()) {
    *note = "statically linked: no shared libraries";
    return out;
  }
  auto self = os::ElfFile::open("/proc/self/exe");
  if (!self || (*self)->interp().empty()) {
    *note = "cannot find the dynamic loader this process runs under";
    return out;
  }
  const std::string loader = (*self)->interp();
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return out;
  // Only LD_LIBRARY_PATH, which changes what the program would load, is passed on.
  std::string libpath = getenv("LD_LIBRARY_PATH") ? getenv("LD_LIBRARY_PATH") : "";
  std::string envvar = "LD_LIBRARY_PATH=" + libpath;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, STDIN_FILENO);
      dup2(null, STDERR_FILENO);
    }
    char* argv[] = {const_cast<char*>(loader.c_str()), const_cast<char*>("--list"),
                    const_cast<char*>(program.c_str()), nullptr};
    char* envp[] = {libpath.empty() ? nullptr : envvar.data(), nullptr};
    execve(loader.c_str(), argv, envp);
    _exit(127);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return out;
  }
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  // Lines: "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)"
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    size_t arrow = line.find("=> /");
    if (arrow == std::string::npos) continue;
    size_t start = arrow + 3, end = line.find(" (", start);
    out.push_back(line.substr(start, end == std::string::npos ? std::string::npos : end - start));
  }
  if (out.empty() && note->empty()) *note = "the dynamic loader lists no shared libraries";
  return out;
}

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
