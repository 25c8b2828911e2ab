// utramp detach -p PID: removes everything utramp put into a running process, every
// client's (every link, every patched site back to the file's bytes, the library calls'
// GOT slots, the loader's hook) and leaves it running untraced. A recording of it (`utramp record`)
// keeps what was recorded and ends when the process does. Asked over the control
// channel (agent/control_protocol.hpp; docs/attach.md).
#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "agent/control_protocol.hpp"
#include "commands.hpp"

namespace utramp::cli {

namespace {
// Detaching waits for threads to leave the programs it removes (tramp::Manager::detach).
constexpr int kDetachTimeoutMs = 60000;
}  // namespace

void add_detach(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("detach", "Remove everything utramp put into a running process, every "
                                               "client's; it runs on untraced");
  auto pid = std::make_shared<int>(0);
  sub->add_option("-p,--pid", *pid, "the process")->required()->check(CLI::PositiveNumber);
  sub->callback([pid] {
    using nlohmann::json;
    auto r = agent::control::call(*pid, {agent::control::MsgType::detach, json::object()}, kDetachTimeoutMs);
    if (!r) {
      fmt::print(stderr, "utramp detach: process {}: {}\n", *pid, r.error().message);
      std::exit(2);
    }
    try {
      if (r->value("already_detached", false)) {
        fmt::print("process {}: already detached, nothing of utramp's is left in it\n", *pid);
        std::exit(0);
      }
      fmt::print("process {}: detached: {} links removed, {} sites back to the file's bytes, {} library-call "
                 "slots put back\n",
                 *pid, r->value("links_detached", 0), r->value("sites_restored", 0),
                 r->value("library_slots_restored", 0));
      for (const json& l : (*r)["left"]) fmt::print("left: {}\n", l.get<std::string>());
      const json& errors = (*r)["errors"];
      for (const json& e : errors) fmt::print(stderr, "utramp detach: process {}: {}\n", *pid, e.get<std::string>());
      std::exit(errors.empty() ? 0 : 1);
    } catch (const json::exception& e) {
      fmt::print(stderr, "utramp detach: process {}: the agent's answer is not what this utramp reads: {}\n",
                 *pid, e.what());
      std::exit(1);
    }
  });
}

}  // namespace utramp::cli
