// Load-time constructor priorities of the runtime (lower runs first). Every copy of the
// runtime (libutramp.so, libutramp-agent.so, libutramp-internal.so) runs them in this
// order, before any unprioritised constructor of the same object:
//   kInitGlue     link glue the rest may use (arch/x86_64/asmjit_glue.cpp)
//   kInitRuntime  the runtime's own state: fork handlers, thread registry, CPU features,
//                 the managers (their constructors register the fork handlers; made
//                 by the shared copies only, probe/managers_early.cpp)
//   kInitAgent    the agent, which uses all of the above (agent/agent.cpp)
// The runtime has no namespace-scope object that needs a constructor at run time
// (constant initialisation only): the agent's start-up runs before those would, and a
// hit path may run in a constructor of another object. tests/unit checks this on the
// built objects.
#pragma once

#define UTRAMP_INIT_GLUE 101
#define UTRAMP_INIT_RUNTIME 150
#define UTRAMP_INIT_AGENT 200
