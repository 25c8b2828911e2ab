// `record -A/-R` against a function's signature: which ctx slot each captured value is
// read from, and how wide and in what format it is written (ftrace::FuncRecord).
//
// The ABI counts integer and floating-point arguments apart (SysV x86-64: rdi, rsi, rdx,
// rcx, r8, r9 then the stack; xmm0..xmm7), and so do uftrace's argN and fpargN: argN is
// the Nth eightbyte of integer class, fpargN the Nth of SSE class, in the order of the
// parameters. With DWARF the signature is the function's own, and each parameter's C
// type gives the default width, sign and format. Without it the function is traced with
// register_signature(): the six integer argument registers, then the eight SSE ones, and
// the return value as the -R format says (f: xmm0, else rax:rdx).
#pragma once

#include <string>

#include "abi/signature.hpp"
#include "agent/config.hpp"
#include "common/result.hpp"
#include "ftrace/graph.hpp"

namespace utramp::agent {

// The signature of a function with captures and no DWARF; `ret` is the -R format (null:
// no return value captured).
abi::Signature register_signature(const ValueSpec* ret);

// Where CAP is read under SIG, in *out. `typed`: SIG comes from DWARF (its C types give
// the defaults). Errc::not_found when SIG has no such argument, saying what it has.
Result<void> resolve_arg(const ArgCapture& cap, const abi::Signature& sig, bool typed,
                         ftrace::FuncRecord::Value* out);
// Same for the return value in the format SPEC.
Result<void> resolve_ret(const ValueSpec& spec, const abi::Signature& sig, bool typed,
                         ftrace::FuncRecord::Value* out);

}  // namespace utramp::agent
