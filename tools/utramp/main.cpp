#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.hpp"
#include "utramp_version.hpp"

int main(int argc, char** argv) {
  CLI::App app{"utramp: dynamic tracing for user-space x86-64 processes"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "utramp " UTRAMP_VERSION_STRING);
  utramp::cli::add_list(app);
  utramp::cli::add_replay(app);
  utramp::cli::add_report(app);
  utramp::cli::add_dump(app);
  utramp::cli::add_record(app);
  utramp::cli::add_hist(app);
  utramp::cli::add_run(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
