// One file per subcommand; each registers itself on the CLI11 app.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <string>

#include "symbols/names.hpp"

namespace utramp::cli {

void add_list(CLI::App& app);
void add_replay(CLI::App& app);
void add_report(CLI::App& app);
void add_dump(CLI::App& app);
void add_record(CLI::App& app);
void add_hist(CLI::App& app);
void add_run(CLI::App& app);
void add_live(CLI::App& app);
void add_info(CLI::App& app);
void add_graph(CLI::App& app);
void add_show(CLI::App& app);
void add_detach(CLI::App& app);

// `utramp replay DIR` with replay's defaults (live shows its recording so).
int replay_trace(const std::string& dir);

// The status the CLI exits with if its output's reader goes away from now on (SIGPIPE:
// a normal end, `utramp replay | head`); 0 unless a command knows better (record: the
// target's status).
void set_exit_on_broken_pipe(int code);

// How commands show function names: `--demangle simple` ("ns::Box::get"), `full`
// ("ns::Box<int>::get() const") or `no` (the symbol, "_ZNK2ns3BoxIiE3getEv"), and
// `--no-demangle`, the same as `--demangle no`. DEMANGLE holds the command's default;
// name_style() reads it once the command line is parsed.
inline void add_name_options(CLI::App* sub, std::string* demangle) {
  sub->add_option("--demangle", *demangle,
                  "function names: simple (no template arguments or parameters), full, or no "
                  "(symbols as in the object); default " + *demangle);
  sub->add_flag_callback("--no-demangle", [demangle] { *demangle = "no"; },
                         "show symbols as in the object (--demangle no)");
}

// Sets STYLE to the style DEMANGLE names; false, with the message printed for
// subcommand CMD, when it names none.
inline bool name_style(const char* cmd, const std::string& demangle, symbols::Style* style) {
  if (demangle == "simple") *style = symbols::Style::simple;
  else if (demangle == "full") *style = symbols::Style::full;
  else if (demangle == "no") *style = symbols::Style::mangled;
  else {
    fmt::print(stderr, "utramp {}: unknown --demangle '{}' (simple, full, no)\n", cmd, demangle);
    return false;
  }
  return true;
}

}  // namespace utramp::cli
