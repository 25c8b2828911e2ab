#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <string>
#include <system_error>
#include <vector>

#include "commands.hpp"
#include "utramp_version.hpp"

namespace utramp::cli {

namespace {
std::atomic<int> g_pipe_exit{0};
// The reader of our output went away (`utramp replay | head`): a normal end, as for
// `git log | head`, with no message and the status the command had so far.
void on_sigpipe(int) { _exit(g_pipe_exit.load(std::memory_order_relaxed)); }
}  // namespace

void set_exit_on_broken_pipe(int code) { g_pipe_exit.store(code, std::memory_order_relaxed); }

}  // namespace utramp::cli

int main(int argc, char** argv) {
  // A handler, not SIG_IGN: an ignored SIGPIPE would survive exec into the programs
  // record and run start.
  struct sigaction pipe_act {};
  pipe_act.sa_handler = utramp::cli::on_sigpipe;
  sigemptyset(&pipe_act.sa_mask);
  sigaction(SIGPIPE, &pipe_act, nullptr);
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
  utramp::cli::add_live(app);
  utramp::cli::add_info(app);
  utramp::cli::add_graph(app);
  utramp::cli::add_show(app);
  utramp::cli::add_detach(app);
  // `utramp PROGRAM [ARGS]` is `utramp live PROGRAM [ARGS]`, as `uftrace PROGRAM` is
  // uftrace's live mode. The first word names a subcommand when it is one (a program
  // called `record` is run with `utramp live record` or `utramp ./record`); an option
  // first (`-F x PROG`) is not taken for a program: use `utramp live`.
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && !args[0].empty() && args[0][0] != '-') {
    bool sub = false;
    for (const CLI::App* s : app.get_subcommands({}))
      sub = sub || s->check_name(args[0]);
    if (!sub) args.insert(args.begin(), {"live", "--"});
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit 2, as every refusal of bad input does (CLI11's own codes are
    // 100+); --help and --version are not errors.
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const std::system_error& e) {
    if (e.code().value() == EPIPE) return 0;  // as SIGPIPE above, when a write reports it
    fmt::print(stderr, "utramp: {}\n", e.what());
    return 1;
  }
  return 0;
}
