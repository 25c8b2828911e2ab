// One file per subcommand; each registers itself on the CLI11 app.
#pragma once

#include <CLI/CLI.hpp>

namespace utramp::cli {

void add_list(CLI::App& app);
void add_replay(CLI::App& app);
void add_report(CLI::App& app);
void add_dump(CLI::App& app);
void add_record(CLI::App& app);
void add_hist(CLI::App& app);
void add_run(CLI::App& app);

// The status the CLI exits with if its output's reader goes away from now on (SIGPIPE:
// a normal end, `utramp replay | head`); 0 unless a command knows better (record: the
// target's status).
void set_exit_on_broken_pipe(int code);

}  // namespace utramp::cli
