// Reads of the running CPU's state that feature code needs on its hot paths, inline:
// the thread pointer and the cycle counter. The implementation is the architecture's
// (chosen here, the one place that names it).
#pragma once

#include "arch/x86_64/cpu_inline.hpp"
