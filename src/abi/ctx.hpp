// The context a tracing program receives: the kernel's u64 ctx[] array, so BPF programs
// written for kernel fentry/fexit work unchanged. One definition for the images that
// build it (arch/), the helpers and tracers that read it (ebpf/, ftrace/, capi/) and the
// public header that documents it (include/utramp/utramp.h, checked against this one in
// capi/utramp.cpp).
//
//   ctx[-5]          the function's entry stack pointer: the address of the slot holding
//                    its caller's return address (utramp's; stored only when a link asks,
//                    flagged by bit 34 of ctx[-1]: the stack helpers unwind from there)
//   ctx[-4]          the caller's return address (utramp's; stored only when a link asks)
//   ctx[-3]          the attach cookie of the running link (utramp's)
//   ctx[-2]          the function's address (the kernel's, for bpf_get_func_ip)
//   ctx[-1]          bits 0..31: number of argument slots n (the kernel's, for
//                    bpf_get_func_arg_cnt); bit 32: set while the return slot ctx[n] is
//                    valid (fmod_ret and fexit programs; the kernel's verifier refuses
//                    bpf_get_func_ret in fentry programs, utramp says -EOPNOTSUPP);
//                    bit 33: the context is a uprobe's struct pt_regs (utramp's: the
//                    agent's uprobe handler sets it; the stack helpers read the
//                    registers there); bit 34: ctx[-5] holds the entry stack pointer
//                    (an image's, for the stack helpers of fentry, fexit and fmod_ret
//                    programs)
//   ctx[0..n-1]      arguments, each widened to u64; an argument of 9..16 bytes passed in
//                    registers (a struct, __int128) takes two slots; an argument passed in
//                    memory (a struct larger than 16 bytes, long double) takes one slot
//                    holding its address
//   ctx[n], ctx[n+1] the return value for fexit (two slots for rax:rdx, xmm0:xmm1 and
//                    x87 long double; a value returned through a hidden pointer is that
//                    pointer, as the function returns it in rax); for fmod_ret the
//                    previous fmod_ret program's result (0 for the first)
#pragma once

#include <cstdint>

namespace utramp::abi {

// Slots below ctx[0], as indices (ctx[kCtxCookie] is the cookie).
inline constexpr int kCtxEntrySp = -5;
inline constexpr int kCtxCaller = -4;
inline constexpr int kCtxCookie = -3;
inline constexpr int kCtxFuncIp = -2;
inline constexpr int kCtxArgCount = -1;
inline constexpr int kCtxHeaderSlots = 5;  // ctx[-5..-1]

// ctx[kCtxArgCount]: the argument count in the low half, flags in the high half.
inline constexpr uint64_t kCtxArgCountMask = 0xffffffffull;
inline constexpr uint64_t kCtxRetValid = 1ull << 32;
inline constexpr uint64_t kCtxPtRegs = 1ull << 33;
inline constexpr uint64_t kCtxEntrySpValid = 1ull << 34;

inline uint64_t ctx_arg_count(const uint64_t* ctx) noexcept { return ctx[kCtxArgCount] & kCtxArgCountMask; }
inline bool ctx_ret_valid(const uint64_t* ctx) noexcept { return (ctx[kCtxArgCount] & kCtxRetValid) != 0; }

}  // namespace utramp::abi
