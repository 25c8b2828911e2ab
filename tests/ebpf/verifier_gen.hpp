// Programs generated from bytes, for the verifier's differential fuzzing: the same bytes
// always make the same case (verifier_cases.hpp), so libFuzzer can mutate them and a
// failing input reproduces.
//
// The programs are built from the shapes real programs have, with every parameter
// taken from the bytes: ALU on registers and constants (edge values), stack stores and
// loads, context reads, map lookups with or without the NULL check and accesses at
// constant, masked or compared offsets, ring buffer reservations submitted on some
// paths, helper calls, pointer arithmetic, atomics, forward branches and counted loops.
// r6 keeps the context throughout. Each shape is made either tame (safe by
// construction) or wild (any parameter): programs mix them at a rate the bytes choose,
// so that many are accepted and many are refused close to the line.
#pragma once

#include <cstddef>
#include <cstdint>

#include "verifier_cases.hpp"

namespace utramp::ebpf::testing {

VerifierCase generate_case(const uint8_t* data, size_t size);

}  // namespace utramp::ebpf::testing
