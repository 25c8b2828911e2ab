// Both managers are made when a shared copy of the runtime loads (libutramp.so, the
// agent, libutramp-internal.so), not on first use: their constructors register the fork
// handlers, and a fork() while another thread was in the middle of the first instance()
// left the child waiting forever on the half-made static (seen as
// ProbeStress.ForkWhileAnotherThreadAttaches hanging about one run in four). The
// constructors only allocate and register handlers (threads start on first attach).
//
// Not in the CLI (src/CMakeLists.txt compiles this file into the shared copies only):
// it attaches nothing in its own process, so it would pay for both managers, their fork
// handlers and exit handler at every start for nothing; unit_boundary.lean_start checks.
#include "common/init.hpp"
#include "probe/probe.hpp"

namespace utramp::probe {
namespace {
__attribute__((constructor(UTRAMP_INIT_RUNTIME))) void make_managers_early() { (void)Manager::instance(); }
}  // namespace
}  // namespace utramp::probe
