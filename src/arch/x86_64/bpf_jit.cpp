// The eBPF JIT's x86-64 back end.
//
// Registers (the kernel's mapping, so that helpers are plain System V calls):
//
//   BPF  r0  r1  r2  r3  r4  r5  r6  r7  r8  r9  r10
//   x86  rax rdi rsi rdx rcx r8  rbx r13 r14 r15 rbp
//
//   r12: the run state (ebpf::RunState, memory.hpp), also the body's rsp
//   r9, r10, r11: scratch (r11 holds the effective address of a checked access)
//
// Frame of the entry function, from r12 (= rsp in the body, 16-byte aligned):
//
//   r12+4248          return address into the caller
//   r12+4200..4248    saved r15, r14, r13, r12, rbx, rbp (six pushes, r15 lowest)
//   r12+4192..4200    padding (keeps rsp 16-aligned)
//   r12+4192          stack_hi: r10 of the main function
//   r12+96..4192      the BPF stack: kMaxFrames frames of 512 bytes, the main function's
//                     on top; a local call moves r10 down 512 (min_fp = r12+608)
//   r12+88..96        padding
//   r12+0..88         RunState (memory.hpp)
//
// The BPF stack is apart from the native one: a local call pushes the caller's
// r6-r9/r10 and a return address on the native stack, which programs cannot address,
// so no program store can reach a return address. Local calls:
//
//   lea  r11, [rbp-512]          ; the callee's frame pointer
//   cmp  r11, [r12+min_fp]       ; deeper than kMaxFrames?
//   jb   fault(call_depth)
//   push rbp/rbx/r13/r14/r15     ; 40 bytes + the call's 8: the callee runs 16-aligned
//   mov  rbp, r11
//   call L_target
//   pop  r15/r14/r13/rbx/rbp
//
// and `exit` returns from the program only in the main frame:
//
//   cmp  rbp, [r12+stack_hi]
//   je   exit_main
//   ret
//
// Memory: an access [reg+off] with reg = r10 and the bytes inside the current frame
// goes straight to memory. Any other computes r11 = reg+off and tests, inline, the BPF
// stack and the context; outside both, a stub saves r0-r5 and calls the C slow path
// (static regions, then the fault-safe copy for loads; allowed or fault for stores):
//
//   lea  r11, [rsi+8]            ; ldxdw r0, [r2+8]
//   lea  r10, [r11-96]
//   sub  r10, r12
//   cmp  r10, 4096-8             ; in the BPF stack?
//   jbe  direct
//   mov  r10, r11
//   sub  r10, [r12+ctx_lo]
//   cmp  r10, ctx_size-8         ; in the context? (a per-run length: two compares)
//   jbe  direct
//   jmp  slow                    ; out of line: mov r10d, 8; call load_stub; mov rax, r11
//   direct: mov rax, [r11]
//
// A fault stores its kind, instruction and address in the run state and jumps to one
// exit that resets rsp to r12 (dropping local-call frames), reports it and returns 0.
//
// Tail calls (`call 12`, bpf_tail_call). The count of tail calls taken in the invocation
// lives in the frame of a program that makes them (the run state's padding, r12+88, or
// in a lean program a 16-byte slot at the bottom of its frame, [rsp] in its main
// function, where tail calls are taken). The sequence, r1-r3 = ctx, map, index:
//
//   lea  rcx, COUNT
//   push rdi; push rdi                    ; the context, kept (twice: rsp stays aligned)
//   mov  rdi, rsi; mov rsi, rdx; mov rdx, rcx
//   call utramp_ebpf_tail_entry           ; the target's tail entry, or 0 (++COUNT)
//   pop  rdi; pop rdi
//   test rax, rax; jz fall_through
//   mov  r10, rax; mov rax, COUNT
//   mov  rsi, LEN; mov rdx, STATUS        ; the run's context length and status (lean: 0)
//   <the epilogue without its ret>        ; this program's frame and saved registers gone
//   jmp  r10
//
// so the target starts as if the chain's caller had called it, with rax = the count.
// Its entries: native and full start the count at 0 (xor eax, eax) when it makes tail
// calls itself; the tail entry skips that, and (full layout) takes its default status
// when rdx is 0. The replaced program's whole native frame goes, so a chain of 33 tail
// calls uses the stack of one program.
//
// Lean programs. A program that cannot fault and calls nothing (no memory access but
// [r10+off] inside its frame, no atomics, no call of any kind, no backward jump under a
// loop budget) never reads its run state: it gets no RunState, no BPF stack beyond its
// one frame, and saves only the callee-saved registers it uses. Its entry and exit, for
// a program using r6 and r10 (both entries are one):
//
//   push rbp; push rbx            ; the callee-saved registers it uses (r10: rbp)
//   sub  rsp, 512                 ; its frame, r10 16-byte aligned (520 for an even count)
//   lea  rbp, [rsp+512]
//   mov  rsi, ctx_size            ; (fixed-size contexts, when it reads r2)
//   xor  eax, eax; xor ebx, ebx   ; the registers it uses, zero as in every run
//   ...
//   exit_main: add rsp, 512; pop rbx; pop rbp; ret
//
// The cost of an eBPF fentry over a native one is mostly this entry and exit: an empty
// program went from 40 instructions more than an empty C function to 4.
//
// Proven programs. A program the verifier proved (BpfJitSpec::proof) is lean whatever
// it does: every access goes straight to memory ([reg+off], no bounds test, no slow
// path), atomics are aligned, every path ends (no loop budget), local calls nest at
// most proof->frames deep (no depth test), a callx calls the helper the proof names,
// and a division whose divisor is proven non-zero (and, signed, never -1) is the bare
// x86 division. Helpers are called in their trusted forms, which need no run state. The
// frame holds proof->frames BPF frames below the pushes, the main one on top:
//
//   push rbp; push rbx; ...       ; rbp, rbx, r13-r15 when it makes local calls
//   sub  rsp, 512*frames (+8)     ; rsp 16-aligned: helpers are called from here
//   lea  rbp, [rsp+512*frames]
//
// A local call pushes rbp, rbx, r13, r14, r15, moves rbp down 512 and calls; an exit of
// a local function (Proof::kSubprogExit) is `ret`, the main function's a jump to the
// epilogue. Instructions no path reaches are `ud2`.
//
// Fusions. Compilers emit addresses as `mov P, A; add P, K; add P, B` (B a register
// other than P, the adds in any order, any number of constant ones): when no jump lands
// inside such a group (Emitter::analyse finds every jump and local-call target) it is
// one `lea P, [A+B+K]`. In a proven program a backward liveness pass (over-approximate:
// calls leave r1-r5 live, atomics read r0) says which registers some later instruction
// still reads; when P is not one of them after a load or store through P that follows
// the group (not itself a target, the stored value not P), the access takes the address
// and P is never written. fnv's fill loop (bench/ebpf_engines.cpp):
//
//   mov r4, r3; add r4, 1            lea  rcx, [rdx+1]
//   mul r4, r2; rsh r4, 8            imul rcx, rsi; shr rcx, 8
//   mov r5, r10; add r5, -256        mov  [rbp+rdx-0x100], cl
//   add r5, r3; stxb [r5+0], r4
//   add r3, 1; jlt r3, 256, fill     add rdx, 1; cmp rdx, 0x100; jb fill
//
// Liveness also keeps a division from saving r0/r3 (rax/rdx) and a shift by a register
// from saving r4 (rcx) when they are dead after it, and a proven program's entry from
// setting registers no path reads before writing (the verifier proves none is read
// uninitialised). Loop heads (targets of backward jumps) are 16-byte aligned with long
// NOPs; bpf_size_bound() allows for the padding.
//
// Strength reduction (proven programs). A loop whose body is straight-line code (one
// way in besides its back edge: falling into the head; no call, division, shift by a
// register or atomic, which use r9/r10) with a register I stepped once per iteration
// by `add I, C`, after a group `mov T, I; [add T, K;] mul T, R` (64-bit, R a register
// the loop never writes, or a constant), keeps (I + K) * R in r9 (wrapping as the
// multiply does: the product is linear in I modulo 2^64). fnv's fill loop:
//
//   mov r4, r3; add r4, 1            lea  r9, [rdx+1]; imul r9, rsi   (before the head)
//   mul r4, r2                       mov  rcx, r9
//   ...; add r3, 1                   ...; add rdx, 1; add r9, rsi
//
// The step is R when C is 1, -R (sub) when C is -1, else C * R from r10 (set before
// the head) or a constant that fits an add.
//
// Byte fills (proven programs). A loop with one way in (falling into its head), closed
// by `jlt I, N` or `jne I, N` (N > 16), whose body only stores bytes of a value stepped
// by R each iteration, is run 16 iterations at a time. The body, in this order where
// it matters: the value, either the reduced product above (r9, its I the loop's) or
// `mov T, V` with V stepped by `add V, R` after it (R a register the loop never writes,
// or a constant: clang -O2 reduces fnv's multiply so itself); at most `rsh T, S` with
// S <= 8 in all; an address group P = A + I + disp (A a register the loop never
// writes); `stxb [P+off], T`; then `add I, 1`; nothing else. Each byte is bits S..S+7
// of the value, bits of its low 16, which 16-bit SSE2 lanes compute exactly: before the
// head, while I + 16 < N, a chunk stores 16 iterations' bytes at once (pmullw for the
// lanes' start, paddw by 16 * R, psrlw, pand when S < 8, packuswb, one movdqu; V
// stepped by 16 * R from r11). The scalar loop then runs what is left, at least the
// last iteration, so every register leaves the loop as it would. fnv's fill: 15 chunks
// and 16 scalar iterations, as gcc -O2 vectorises it. The stores are proven in bounds
// one by one, and a chunk stores exactly the bytes of 16 iterations that run; the loop
// loads nothing, so no order of its stores can be seen. The code then uses xmm0-5: a
// uprobe handler reaching it gets the vector state saved (docs/probes.md, "Vector
// state").
//
// Remainders (proven programs). `mov Q, A; div Q, B; mul Q, B; mov R, A; sub R, Q`,
// with Q dead after it and no jump landing inside, is `mov R, A; mod R, B`: x86's div
// leaves the remainder in rdx (prime's loop: `mov rcx, rdi; mov rax, rcx; xor edx, edx;
// div rsi; mov rcx, rdx`). B = 0 gives A both ways.
#include "arch/bpf_jit.hpp"

#include <asmjit/x86.h>
#include <fmt/format.h>

#include <functional>
#include <optional>

#include "arch/arch.hpp"
#include "arch/x86_64/asm_util.hpp"
#include "ebpf/engine.hpp"
#include "ebpf/helpers.hpp"
#include "ebpf/memory.hpp"

namespace utramp::arch {

namespace {

namespace ax = asmjit::x86;
using asmjit::Imm;
using asmjit::Label;
using ebpf::FaultKind;
using ebpf::Insn;
namespace op = ebpf::op;
namespace rs = ebpf::rs;

const ax::Gp kReg[ebpf::kNumRegs] = {ax::rax, ax::rdi, ax::rsi, ax::rdx, ax::rcx, ax::r8,
                                     ax::rbx, ax::r13, ax::r14, ax::r15, ax::rbp};
const ax::Gp kState = ax::r12;

constexpr uint32_t kLoopAlign = 16;  // loop heads start on this boundary
constexpr int32_t kStateBytes = 96;  // RunState (88) rounded to 16
constexpr int32_t kTailCount = 88;   // the run state's padding: the tail-call count
constexpr int32_t kBpfStack = static_cast<int32_t>(ebpf::kStackBytes);
constexpr int32_t kFrameBytes = kStateBytes + kBpfStack + 8;
static_assert(sizeof(ebpf::RunState) <= kTailCount && kTailCount + 8 <= kStateBytes);
static_assert(kFrameBytes % 16 == 8, "six pushes + return address + frame keep rsp 16-aligned");

ax::Mem st(int32_t off, uint32_t size = 8) { return ax::ptr(kState, off, size); }

class Emitter {
 public:
  Emitter(ax::Assembler& a, const BpfJitSpec& s, uint64_t base, bool far)
      : a_(a), s_(s), base_(base), far_(far), n_(s.insns.size()) {}

  void emit(Label native_entry, Label full_entry, Label tail_entry);
  // Whether the program is lean (above): decided before emitting.
  bool lean() const;
  Error error;  // set by checks that are not asmjit's
  bool failed = false;

 private:
  ax::Gp R(uint8_t r) const { return kReg[r]; }
  void call_abs(uint64_t target);
  Label defer(std::function<void()> body) {
    Label l = a_.newLabel();
    deferred_.push_back([this, l, body = std::move(body)] {
      a_.bind(l);
      body();
    });
    return l;
  }
  // A fault at insn `i`: fault_addr from r11 when `with_addr`.
  Label fault(FaultKind k, size_t i, bool with_addr) {
    return defer([this, k, i, with_addr] {
      a_.mov(st(rs::kFaultKind, 4), Imm(static_cast<uint32_t>(k)));
      a_.mov(st(rs::kFaultInsn, 4), Imm(static_cast<uint32_t>(i)));
      if (with_addr) a_.mov(st(rs::kFaultAddr), ax::r11);
      else a_.mov(st(rs::kFaultAddr), Imm(0));
      a_.jmp(fault_common_);
    });
  }
  void epilogue_and_stubs();
  // Jump targets, loop heads and (proven programs) the registers live after each
  // instruction: what the fusions below may rely on.
  void analyse();
  bool live_after(size_t i, uint8_t r) const { return !s_.proof || (live_out_[i] >> r & 1); }
  // An address computation (see the file's comment): `mov P, A` then adds to P of
  // constants and of at most one register B other than P, no instruction after the
  // first a jump target; P = A + B + disp. len 0: none at i.
  struct AddrGroup {
    size_t len = 0;
    uint8_t p = 0, a = 0, b = 0xff;
    int64_t disp = 0;
  };
  AddrGroup addr_group(size_t i) const;
  // [A + B + disp + off] of a group, when it fits a displacement.
  std::optional<ax::Mem> group_mem(const AddrGroup& g, int16_t off, unsigned size) const;
  // Emits the group at i and, in a proven program, the load or store through P right
  // after it as one access [A+B+disp+off] when P is dead after it. Returns the index of
  // the last instruction emitted (i when there is no group).
  size_t fused(size_t i);
  // Strength reduction (see the file's comment): in a proven program, a straight-line
  // loop whose induction variable I steps by a constant C once per iteration, and
  // which computes T = (I + K) * R (`mov T, I; [add T, K;] mul T, R`, R not written in
  // the loop, or a constant), keeps that product in r9: set at the loop's entry, moved
  // into T where the group was, stepped by C * R (r10, or a constant) where I steps.
  struct IvMul {
    size_t head = 0, group = 0, len = 0, inc = 0;
    uint8_t iv = 0, t = 0, r = 0xff;  // r 0xff: R is the constant rimm
    int32_t k = 0, c = 0, rimm = 0;
    // C * R when R is a constant (64-bit, wrapping).
    uint64_t const_step() const {
      return static_cast<uint64_t>(static_cast<int64_t>(c)) * static_cast<uint64_t>(static_cast<int64_t>(rimm));
    }
    bool step_fits_add() const { return static_cast<int64_t>(const_step()) == static_cast<int32_t>(const_step()); }
  };
  void find_iv_muls(const std::vector<uint16_t>& def, const std::vector<uint16_t>& jumps_to);
  void iv_mul_entry(const IvMul& m);
  void iv_mul_step(const IvMul& m);
  // Byte fills (see the file's comment): a straight-line loop whose only effect is
  // `stxb [A+I+disp+off], T` with T bits S..S+7 (S <= 8) of a value stepped by R once
  // per iteration, I stepping by 1 after the store, closed by `jlt/jne I, N` (N > 16):
  // its iterations run 16 at a time in SSE2 16-bit lanes while more than 16 are left.
  struct VecFill {
    size_t head = 0;
    uint8_t iv = 0;           // I
    int32_t iv_mul = -1;      // the value: the reduced product in r9 (index in iv_muls_), or
    uint8_t v = 0xff;         // a register V the loop steps by `add V, R` after reading it
    uint8_t r = 0xff;         // R, or 0xff: the constant rimm
    int32_t rimm = 0;
    AddrGroup g;
    int16_t off = 0;
    uint8_t shift = 0;
    int32_t bound = 0;  // N
  };
  void find_vec_fills(const std::vector<uint16_t>& def, const std::vector<uint16_t>& jumps_to);
  std::optional<VecFill> vec_fill_at(size_t h, size_t j, const std::vector<uint16_t>& def) const;
  void vec_fill(const VecFill& v);
  // A remainder as compilers decompose it (LLVM's DivRemPairs), in a proven program:
  // `mov Q, A; div Q, B; mul Q, B; mov R, A; sub R, Q` with Q dead after it is
  // `mov R, A; mod R, B` (the same for B = 0: both give A). Returns the index of the
  // last instruction emitted (i when there is none at i).
  size_t div_rem(size_t i);
  void alu(size_t i, const Insn& n);
  // `dead`: registers known dead after it besides what liveness says (div_rem's Q).
  void divmod(size_t i, const Insn& n, uint16_t dead = 0);
  void shift(size_t i, const Insn& n);
  void jump(size_t i, const Insn& n);
  void jump_to(size_t i, std::function<void(Label)> jcc, std::function<void(Label)> jncc);
  void call(size_t i, const Insn& n);
  void tail_call(size_t i);
  // The epilogue up to its ret (the frame and saved registers gone).
  void unwind_frame();
  // Where the tail-call count is (see the file's comment).
  ax::Mem tail_count() const { return lean_ ? ax::qword_ptr(ax::rsp) : st(kTailCount); }
  // r11 = base+off, then to `direct` if inside the stack (or context); else to the
  // returned out-of-line label's code (the caller fills it).
  void check_inline(uint8_t base, int16_t off, unsigned size, bool ctx_ok, Label direct, Label slow);
  // `at`: the access's memory operand when fused (proven programs only).
  void load(size_t i, const Insn& n, const ax::Mem* at = nullptr);
  void store(size_t i, const Insn& n, const ax::Mem* at = nullptr);
  void mem_op(const Insn& n, const ax::Mem& m);
  static bool in_frame(int16_t off, unsigned size) {
    return off >= -static_cast<int32_t>(ebpf::kStackSize) && off + static_cast<int32_t>(size) <= 0;
  }

  ax::Assembler& a_;
  const BpfJitSpec& s_;
  uint64_t base_;
  bool far_;
  size_t n_;
  std::vector<Label> L_;
  std::vector<uint8_t> target_;      // per instruction: some jump or local call lands on it
  std::vector<uint8_t> loop_head_;   // per instruction: a backward jump lands on it
  std::vector<uint16_t> live_out_;   // proven programs: BPF registers live after each
  uint16_t live_in_ = 0xffff;        // proven programs: registers live at instruction 0
  std::vector<IvMul> iv_muls_;
  std::vector<VecFill> vec_fills_;
  std::vector<int32_t> fill_head_;  // per instruction: the index in vec_fills_ of the loop it heads, or -1
  // Per instruction, the index in iv_muls_ of the loop it heads, the group it starts,
  // the step of I it is; -1: none.
  std::vector<int32_t> iv_head_, iv_group_, iv_inc_;
  Label exit_main_, fault_common_, load_stub_, store_stub_;
  bool lean_ = false;
  bool tail_calls_ = false;  // the program makes tail calls (keeps their count)
  std::vector<ax::Gp> lean_saved_;  // pushed in this order
  int32_t lean_frame_ = 0;          // bytes below the pushes
  std::vector<std::function<void()>> deferred_;
};

void Emitter::call_abs(uint64_t target) {
  // rel32 when the target is in reach from anywhere in the code (bounded by 1 GB here:
  // programs are far smaller), else through r11.
  if (!far_ && x86::rel32_reaches_block(base_, uint64_t{1} << 30, target)) {
    a_.call(Imm(target));
  } else {
    a_.mov(ax::r11, Imm(target));
    a_.call(ax::r11);
  }
}

// Entry. The native entry sets the arguments of the full one and falls into it:
//
//   native: mov  rdx, default_status
//   full:   push rbp, rbx, r12, r13, r14, r15
//           sub  rsp, 4200
//           mov  r12, rsp
//           xor  edi, edi; xor esi, esi            (proven with no context)
//           mov  rsi, ctx_size                     (fixed-size contexts)
//           mov  [r12+ctx_lo], rdi ... (the run state's fields)
//           lea  rbp, [r12+96+4096]
//           xor  r0, r3-r9
void Emitter::emit(Label native_entry, Label full_entry, Label tail_entry) {
  for (const Insn& n : s_.insns)
    tail_calls_ |= n.code == op::kCallOp && n.src == op::kCallHelper &&
                   static_cast<uint32_t>(n.imm) == ebpf::kTailCallHelper;
  L_.resize(n_);
  for (auto& l : L_) l = a_.newLabel();
  analyse();
  a_.addEncodingOptions(asmjit::EncodingOptions::kOptimizedAlign);  // padding: long NOPs
  exit_main_ = a_.newLabel();
  fault_common_ = a_.newLabel();
  load_stub_ = a_.newLabel();
  store_stub_ = a_.newLabel();

  lean_ = lean();
  if (lean_) {
    // Which BPF registers appear at all (src of an immediate form reads as r0: harmless).
    bool used[ebpf::kNumRegs] = {true};  // r0: exit returns it
    bool calls = false, local_calls = false;
    for (const Insn& n : s_.insns) {
      if (n.dst < ebpf::kNumRegs) used[n.dst] = true;
      if (n.src < ebpf::kNumRegs) used[n.src] = true;
      calls |= n.code == op::kCallOp || n.code == op::kCallxOp;
      local_calls |= n.code == op::kCallOp && n.src == op::kCallLocal;
    }
    if (local_calls)  // the call sequence saves and moves them
      for (uint8_t r : {6, 7, 8, 9, 10}) used[r] = true;
    if (used[ebpf::kFp]) lean_saved_.push_back(ax::rbp);
    for (uint8_t r = 6; r <= 9; ++r)
      if (used[r]) lean_saved_.push_back(R(r));
    a_.bind(native_entry);
    a_.bind(full_entry);
    if (tail_calls_) a_.xor_(ax::eax, ax::eax);  // no tail call taken yet
    a_.bind(tail_entry);
    for (const ax::Gp& r : lean_saved_) a_.push(r);
    const uint32_t frames = s_.proof ? s_.proof->frames : 1;
    const int32_t stack = static_cast<int32_t>(ebpf::kStackSize * frames);
    const int32_t count_slot = tail_calls_ ? 16 : 0;  // [rsp]: the count, then padding
    if (used[ebpf::kFp] || calls) {
      // rsp is 8 mod 16 at entry; r10 = rsp + stack after the sub, and rsp itself (at
      // helper calls), must be 0 mod 16.
      lean_frame_ = (used[ebpf::kFp] ? stack : 0) + count_slot + (lean_saved_.size() % 2 ? 0 : 8);
      if (lean_frame_) a_.sub(ax::rsp, Imm(lean_frame_));
      if (used[ebpf::kFp]) a_.lea(ax::rbp, ax::ptr(ax::rsp, stack + count_slot));
    }
    if (tail_calls_) a_.mov(tail_count(), ax::rax);
    // A proven program reads no register before writing it: only those some path from
    // the entry reads (liveness, which over-approximates) are set.
    for (uint8_t r = 0; r <= 9; ++r) used[r] &= (live_in_ >> r & 1) != 0;
    if (s_.no_ctx && used[1]) a_.xor_(ax::edi, ax::edi);
    if (s_.no_ctx && used[2]) a_.xor_(ax::esi, ax::esi);
    if (s_.ctx_size && used[2]) a_.mov(ax::rsi, Imm(s_.ctx_size));
    for (uint8_t r : {0, 3, 4, 5, 6, 7, 8, 9})
      if (used[r]) a_.xor_(R(r).r32(), R(r).r32());
  } else {
    a_.bind(native_entry);
    a_.mov(ax::rdx, Imm(s_.default_status));
    a_.bind(full_entry);
    if (tail_calls_) a_.xor_(ax::eax, ax::eax);  // no tail call taken yet
    Label body = a_.newLabel();
    a_.bind(body);
    // The tail entry: status 0 is this program's own.
    defer([this, tail_entry, body] {
      a_.bind(tail_entry);
      a_.test(ax::rdx, ax::rdx);
      a_.jnz(body);
      a_.mov(ax::rdx, Imm(s_.default_status));
      a_.jmp(body);
    });
    for (const ax::Gp& r : {ax::rbp, ax::rbx, ax::r12, ax::r13, ax::r14, ax::r15}) a_.push(r);
    a_.sub(ax::rsp, Imm(kFrameBytes));
    a_.mov(kState, ax::rsp);
    if (tail_calls_) a_.mov(tail_count(), ax::rax);
    if (s_.no_ctx) a_.xor_(ax::edi, ax::edi);
    if (s_.no_ctx) a_.xor_(ax::esi, ax::esi);
    if (s_.ctx_size) a_.mov(ax::rsi, Imm(s_.ctx_size));
    a_.mov(st(rs::kCtxLo), ax::rdi);
    a_.mov(st(rs::kCtxLen), ax::rsi);
    a_.lea(ax::r11, ax::ptr(kState, kStateBytes));
    a_.mov(st(rs::kStackLo), ax::r11);
    a_.lea(ax::r11, ax::ptr(kState, kStateBytes + static_cast<int32_t>(ebpf::kStackSize)));
    a_.mov(st(rs::kMinFp), ax::r11);
    a_.lea(ax::rbp, ax::ptr(kState, kStateBytes + kBpfStack));
    a_.mov(st(rs::kStackHi), ax::rbp);
    a_.mov(ax::r11, Imm(s_.loop_budget));
    a_.mov(st(rs::kBudget), ax::r11);
    a_.mov(ax::r11, Imm(s_.env));
    a_.mov(st(rs::kEnv), ax::r11);
    a_.mov(st(rs::kStatus), ax::rdx);
    if (s_.publish_run) {
      const int64_t tls = ebpf::current_run_tls_offset();
      a_.mov(ax::r11, x86::fs_mem(tls, 8));
      a_.mov(st(rs::kPrev), ax::r11);
      a_.mov(x86::fs_mem(tls, 8), kState);
    }
    for (const ax::Gp& r : {ax::eax, ax::edx, ax::ecx, ax::r8d, ax::ebx, ax::r13d, ax::r14d, ax::r15d})
      a_.xor_(r, r);
  }

  for (size_t i = 0; i < n_; ++i) {
    // Before the loop: the product's set-up, a fill's chunks.
    if (iv_head_[i] >= 0) iv_mul_entry(iv_muls_[static_cast<size_t>(iv_head_[i])]);
    if (fill_head_[i] >= 0) vec_fill(vec_fills_[static_cast<size_t>(fill_head_[i])]);
    if (loop_head_[i]) a_.align(asmjit::AlignMode::kCode, kLoopAlign);
    a_.bind(L_[i]);
    const Insn& n = s_.insns[i];
    if (s_.proof && !(s_.proof->insn[i] & ebpf::Proof::kReached)) {
      a_.ud2();  // no path runs it
      if (n.code == op::kLddw) a_.bind(L_[++i]);
      continue;
    }
    if (iv_group_[i] >= 0) {
      const IvMul& m = iv_muls_[static_cast<size_t>(iv_group_[i])];
      a_.mov(R(m.t), ax::r9);
      for (const size_t last = i + m.len - 1; i < last;) a_.bind(L_[++i]);  // never jump targets
      continue;
    }
    if (iv_inc_[i] >= 0) {
      alu(i, n);
      iv_mul_step(iv_muls_[static_cast<size_t>(iv_inc_[i])]);
      continue;
    }
    if (const size_t last = div_rem(i); last != i) {
      while (i < last) a_.bind(L_[++i]);  // never jump targets (div_rem)
      continue;
    }
    if (const size_t last = fused(i); last != i) {
      while (i < last) a_.bind(L_[++i]);  // never jump targets (addr_group)
      continue;
    }
    switch (op::cls(n.code)) {
      case op::kAlu:
      case op::kAlu64: alu(i, n); break;
      case op::kJmp:
      case op::kJmp32: jump(i, n); break;
      case op::kLd:
        a_.mov(R(n.dst), Imm(ebpf::imm64(s_.insns, i)));
        a_.bind(L_[++i]);  // never a target (checked); bound for completeness
        break;
      case op::kLdx: load(i, n); break;
      default: store(i, n); break;
    }
  }
  epilogue_and_stubs();
  // Out-of-line blocks may add more (none do today); run until all are emitted.
  for (size_t k = 0; k < deferred_.size(); ++k) deferred_[k]();
}

// exit_main:  (rsp == r12)
//   mov  r11, [r12+prev]; mov fs:[current_run], r11    (publish_run only)
//   add  rsp, 4200
//   pop  r15, r14, r13, r12, rbx, rbp
//   ret
// fault_common:
//   mov  rsp, r12; mov rdi, r12; call utramp_ebpf_report; xor eax, eax; jmp exit_main
// load_stub:  in r11 = address, r10 = size; out r11 = value; keeps r0-r5
//   push rax, rdi, rsi, rdx, rcx, r8; sub rsp, 8
//   mov rdi, r12; mov rsi, r11; mov rdx, r10; call utramp_ebpf_load; mov r11, rax
//   add rsp, 8; pop r8, rcx, rdx, rsi, rdi, rax; ret
// store_stub: in r11 = address, r10 = size; out r10 = allowed; keeps r0-r5 and r11
void Emitter::analyse() {
  target_.assign(n_, 0);
  loop_head_.assign(n_, 0);
  std::vector<uint8_t> second(n_, 0);  // the second slot of an lddw
  std::vector<uint16_t> jumps_to(n_, 0);  // jumps and local calls landing on each
  for (size_t i = 0; i < n_; ++i) {
    const Insn& n = s_.insns[i];
    if (n.code == op::kLddw) {
      if (i + 1 < n_) second[i + 1] = 1;
      ++i;
      continue;
    }
    if (!op::is_jmp(n.code) || n.code == op::kExitOp || n.code == op::kCallxOp) continue;
    if (n.code == op::kCallOp && n.src != op::kCallLocal) continue;
    const int64_t t = n.code == op::kCallOp ? static_cast<int64_t>(i) + 1 + n.imm : ebpf::jump_target(i, n);
    if (t < 0 || static_cast<uint64_t>(t) >= n_) continue;  // checked programs have none
    target_[static_cast<size_t>(t)] = 1;
    ++jumps_to[static_cast<size_t>(t)];
    if (n.code != op::kCallOp && t <= static_cast<int64_t>(i)) loop_head_[static_cast<size_t>(t)] = 1;
  }
  iv_head_.assign(n_, -1);
  iv_group_.assign(n_, -1);
  iv_inc_.assign(n_, -1);
  fill_head_.assign(n_, -1);
  if (!s_.proof) return;
  // Backward liveness to a fixed point. Over-approximate where it is unsure: a call
  // reads r1-r5 and leaves them live (only r0 is written), an atomic reads r0 and
  // writes nothing, an exit reads r0 (a local function's caller gets r6-r9 back from
  // the native stack; r1-r5 are unreadable after a call, which the proof guarantees).
  constexpr uint16_t kArgs = 0x3e;  // r1-r5
  auto bit = [](uint8_t r) { return static_cast<uint16_t>(1u << r); };
  std::vector<uint16_t> use(n_, 0), def(n_, 0), in(n_ + 2, 0);
  for (size_t i = 0; i < n_; ++i) {
    const Insn& n = s_.insns[i];
    const bool x = op::src_bit(n.code) == op::kX;
    switch (op::cls(n.code)) {
      case op::kAlu:
      case op::kAlu64:
        if (op::alu_op(n.code) != op::kMov) use[i] |= bit(n.dst);
        if (x && op::alu_op(n.code) != op::kEnd) use[i] |= bit(n.src);
        def[i] = bit(n.dst);
        break;
      case op::kLd: def[i] = bit(n.dst); break;
      case op::kLdx:
        use[i] = bit(n.src);
        def[i] = bit(n.dst);
        break;
      case op::kSt: use[i] = bit(n.dst); break;
      case op::kStx:
        use[i] = bit(n.dst) | bit(n.src);
        if (op::mode(n.code) == op::kAtomic) use[i] |= bit(0);
        break;
      default:  // jumps
        if (n.code == op::kExitOp) {
          use[i] = bit(0);
        } else if (n.code == op::kCallOp || n.code == op::kCallxOp) {
          use[i] = kArgs | (n.code == op::kCallxOp ? bit(n.dst) : 0);
          def[i] = bit(0);
        } else if (op::jmp_op(n.code) != op::kJa) {
          use[i] = bit(n.dst) | (x ? bit(n.src) : 0);
        }
        break;
    }
    use[i] &= 0x7ff;
    def[i] &= 0x7ff;
  }
  live_out_.assign(n_, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = n_; i-- > 0;) {
      if (second[i]) continue;
      const Insn& n = s_.insns[i];
      uint16_t out = 0;
      auto succ = [&](int64_t t) {
        if (t >= 0 && static_cast<uint64_t>(t) < n_) out |= in[static_cast<size_t>(t)];
      };
      const bool jmp = op::is_jmp(n.code) && n.code != op::kCallOp && n.code != op::kCallxOp;
      if (n.code == op::kExitOp) {
      } else if (jmp) {
        succ(ebpf::jump_target(i, n));
        if (op::jmp_op(n.code) != op::kJa) succ(static_cast<int64_t>(i) + 1);
      } else {
        succ(static_cast<int64_t>(i) + (n.code == op::kLddw ? 2 : 1));
      }
      const uint16_t li = use[i] | (out & ~def[i]);
      if (out != live_out_[i] || li != in[i]) changed = true;
      live_out_[i] = out;
      in[i] = li;
    }
  }
  live_in_ = n_ ? in[0] : 0;
  find_iv_muls(def, jumps_to);
  find_vec_fills(def, jumps_to);
}

void Emitter::find_iv_muls(const std::vector<uint16_t>& def, const std::vector<uint16_t>& jumps_to) {
  constexpr uint8_t kMovX = op::kAlu64 | op::kMov | op::kX;
  constexpr uint8_t kAddK = op::kAlu64 | op::kAdd | op::kK;
  constexpr uint8_t kMulX = op::kAlu64 | op::kMul | op::kX, kMulK = op::kAlu64 | op::kMul | op::kK;
  for (size_t j = 0; j < n_; ++j) {
    const Insn& b = s_.insns[j];
    if (b.code == op::kLddw) {
      ++j;
      continue;
    }
    if (!op::is_jmp(b.code) || b.code == op::kExitOp || b.code == op::kCallOp || b.code == op::kCallxOp) continue;
    const int64_t t = ebpf::jump_target(j, b);
    if (t < 0 || t > static_cast<int64_t>(j) || !(s_.proof->insn[j] & ebpf::Proof::kReached)) continue;
    const size_t h = static_cast<size_t>(t);
    // No way in but the fall into the head and this back edge; the body straight-line
    // code that neither calls nor uses r9/r10 (divisions, shifts by a register and
    // atomics do), every instruction of it reached.
    if (jumps_to[h] != 1 || iv_head_[h] >= 0 || (j > h && target_[j])) continue;
    bool ok = true;
    uint16_t defs = 0;
    for (size_t k = h; k < j && ok; ++k) {
      const Insn& n = s_.insns[k];
      ok = (k == h || !target_[k]) && (s_.proof->insn[k] & ebpf::Proof::kReached);
      defs |= def[k];
      switch (op::cls(n.code)) {
        case op::kAlu:
        case op::kAlu64: {
          const uint8_t o = op::alu_op(n.code);
          ok &= o != op::kDiv && o != op::kMod &&
                !((o == op::kLsh || o == op::kRsh || o == op::kArsh) && op::src_bit(n.code) == op::kX);
          break;
        }
        case op::kLd: ++k; break;
        case op::kLdx: break;
        case op::kSt:
        case op::kStx: ok &= op::mode(n.code) == op::kMem; break;
        default: ok = false; break;
      }
    }
    if (!ok) continue;
    for (size_t e = h; e + 2 < j; ++e) {
      const Insn& m = s_.insns[e];
      if (m.code != kMovX || m.off != 0 || m.dst == m.src) continue;
      IvMul v;
      v.head = h;
      v.group = e;
      v.iv = m.src;
      v.t = m.dst;
      size_t at = e + 1;
      if (s_.insns[at].code == kAddK && s_.insns[at].dst == v.t && s_.insns[at].off == 0) v.k = s_.insns[at++].imm;
      const Insn& mul = s_.insns[at];
      if (mul.dst != v.t || mul.off != 0 || (mul.code != kMulX && mul.code != kMulK)) continue;
      if (mul.code == kMulX) {
        if (mul.src == v.t || (defs >> mul.src & 1)) continue;  // R changes in the loop
        v.r = mul.src;
      } else {
        v.rimm = mul.imm;
      }
      v.len = at + 1 - e;
      // I steps once, by a constant, after the group.
      size_t inc = 0, steps = 0;
      for (size_t k = h; k < j; ++k) {
        if (s_.insns[k].code == op::kLddw) {
          if (s_.insns[k].dst == v.iv) steps = 2;
          ++k;
          continue;
        }
        if (def[k] >> v.iv & 1) {
          ++steps;
          inc = k;
        }
      }
      const Insn& n = s_.insns[inc];
      if (steps != 1 || inc < at + 1 || n.code != kAddK || n.dst != v.iv || n.off != 0) continue;
      v.inc = inc;
      v.c = n.imm;
      const int32_t idx = static_cast<int32_t>(iv_muls_.size());
      iv_muls_.push_back(v);
      iv_head_[h] = idx;
      iv_group_[e] = idx;
      iv_inc_[inc] = idx;
      break;
    }
  }
}

// r9 = (I + K) * R, and r10 = C * R when the step is neither R, -R nor a constant that
// fits an instruction.
void Emitter::iv_mul_entry(const IvMul& m) {
  if (m.k == 0) a_.mov(ax::r9, R(m.iv));
  else a_.lea(ax::r9, ax::ptr(R(m.iv), m.k));
  if (m.r == 0xff) {
    a_.imul(ax::r9, ax::r9, Imm(static_cast<int64_t>(m.rimm)));
    if (!m.step_fits_add()) a_.mov(ax::r10, Imm(m.const_step()));
    return;
  }
  a_.imul(ax::r9, R(m.r));
  if (m.c != 1 && m.c != -1) a_.imul(ax::r10, R(m.r), Imm(static_cast<int64_t>(m.c)));
}

void Emitter::find_vec_fills(const std::vector<uint16_t>& def, const std::vector<uint16_t>& jumps_to) {
  for (size_t j = 0; j < n_; ++j) {
    const Insn& b = s_.insns[j];
    if (b.code == op::kLddw) {
      ++j;
      continue;
    }
    if (b.code != (op::kJmp | op::kJlt | op::kK) && b.code != (op::kJmp | op::kJne | op::kK)) continue;
    const int64_t t = ebpf::jump_target(j, b);
    if (t < 0 || t >= static_cast<int64_t>(j) || !(s_.proof->insn[j] & ebpf::Proof::kReached)) continue;
    const size_t h = static_cast<size_t>(t);
    // One way in besides the back edge (falling into the head), no jump into the body.
    if (jumps_to[h] != 1 || fill_head_[h] >= 0 || target_[j]) continue;
    auto v = vec_fill_at(h, j, def);
    if (!v) continue;
    fill_head_[h] = static_cast<int32_t>(vec_fills_.size());
    vec_fills_.push_back(*v);
  }
}

// What each register holds in the iteration, from the head to the back edge j:
// lane(S): bits from S of the stepped value (of r9 or of V), addr: A + I + disp.
std::optional<Emitter::VecFill> Emitter::vec_fill_at(size_t h, size_t j, const std::vector<uint16_t>& def) const {
  constexpr uint8_t kMovX = op::kAlu64 | op::kMov | op::kX, kRshK = op::kAlu64 | op::kRsh | op::kK;
  constexpr uint8_t kAddK = op::kAlu64 | op::kAdd | op::kK, kAddX = op::kAlu64 | op::kAdd | op::kX;
  constexpr uint8_t kStxB = op::kStx | op::kMem | op::kB;
  const Insn& b = s_.insns[j];
  VecFill v;
  v.head = h;
  v.iv = b.dst;
  v.bound = b.imm;
  if (b.imm <= 16 || b.dst == ebpf::kFp) return std::nullopt;
  uint16_t defs = 0;
  int writes[ebpf::kNumRegs] = {};
  for (size_t k = h; k < j; ++k) {
    if (k > h && target_[k]) return std::nullopt;
    if (!(s_.proof->insn[k] & ebpf::Proof::kReached)) return std::nullopt;
    defs |= def[k];
    for (uint8_t r = 0; r < ebpf::kNumRegs; ++r) writes[r] += def[k] >> r & 1;
  }
  const IvMul* m = iv_head_[h] >= 0 ? &iv_muls_[static_cast<size_t>(iv_head_[h])] : nullptr;
  if (m && (m->iv != v.iv || m->c != 1)) m = nullptr;
  enum Kind : uint8_t { kNone, kLane, kAddr };
  Kind kind[ebpf::kNumRegs] = {};
  uint8_t shift[ebpf::kNumRegs] = {};
  bool stored = false, i_stepped = false, v_stepped = false, have_g = false;
  for (size_t k = h; k < j;) {
    const Insn& n = s_.insns[k];
    if (m && k == m->group) {  // T = (I + K) * R, kept in r9
      if (v.v != 0xff || v.iv_mul >= 0) return std::nullopt;
      v.iv_mul = iv_head_[h];
      v.r = m->r;
      v.rimm = m->rimm;
      kind[m->t] = kLane;
      shift[m->t] = 0;
      k += m->len;
      continue;
    }
    ++k;
    if (n.off != 0 && op::cls(n.code) != op::kStx) return std::nullopt;
    if (n.code == kAddK && n.dst == v.iv && n.imm == 1 && stored && !i_stepped) {
      i_stepped = true;
    } else if ((n.code == kAddK || n.code == kAddX) && n.dst == v.v && !v_stepped) {
      // V += R (R not written in the loop), after T read it.
      if (n.code == kAddX && (n.src == v.v || (defs >> n.src & 1))) return std::nullopt;
      v.r = n.code == kAddX ? n.src : 0xff;
      v.rimm = n.imm;
      v_stepped = true;
      kind[v.v] = kNone;
    } else if (n.code == kMovX && v.v == 0xff && v.iv_mul < 0 && n.src != n.dst && n.src != v.iv &&
               n.dst != v.iv && n.src != ebpf::kFp && writes[n.src] == 1) {
      v.v = n.src;  // T = V
      kind[n.dst] = kLane;
      shift[n.dst] = 0;
    } else if (n.code == kRshK && kind[n.dst] == kLane && n.imm >= 0 && shift[n.dst] + n.imm <= 8) {
      shift[n.dst] = static_cast<uint8_t>(shift[n.dst] + n.imm);
    } else if (const AddrGroup g = addr_group(k - 1); g.len && !have_g && !i_stepped) {
      // P = A + I + disp, A not written in the loop.
      const uint8_t base = g.a == v.iv ? g.b : g.b == v.iv ? g.a : 0xff;
      if (base == 0xff || base == v.iv || (defs >> base & 1) || g.p == v.iv || g.p == base) return std::nullopt;
      v.g = g;
      have_g = true;
      kind[g.p] = kAddr;
      k += g.len - 1;
    } else if (n.code == kStxB && have_g && n.dst == v.g.p && kind[n.dst] == kAddr && kind[n.src] == kLane &&
               !stored) {
      v.shift = shift[n.src];
      v.off = n.off;
      stored = true;
      if (!group_mem(v.g, v.off, 16)) return std::nullopt;
    } else {
      return std::nullopt;
    }
  }
  // I and V are each written once (by their steps), and the value is one of the two.
  if (!stored || !i_stepped || writes[v.iv] != 1) return std::nullopt;
  if (v.iv_mul < 0 && (v.v == 0xff || !v_stepped)) return std::nullopt;
  return v;
}

// A byte fill's 16-iteration chunks, between the product's set-up and the loop head
// (r9 = (I + K) * R there). A chunk runs only while I + 16 < N, so that the scalar
// loop still runs the last iteration (at least one): T, P and r9 leave the loop as
// they would, and a loop entered with I >= N - 16 runs as before. The byte of
// iteration I + j is bits S..S+7 of (r9 + j*R) mod 2^64: bits of its low 16, which
// 16-bit lanes compute exactly (sums and products mod 2^16).
//
//   cmp  I, N-16; jae head
//   xmm0 = r9 + (0..7)*R, xmm1 = r9 + (8..15)*R, xmm3 = 16*R  (words; pmullw, paddw)
//   xmm2 = 0x00ff in each word                                 (S < 8 only)
//   vloop: movdqa xmm4, xmm0; movdqa xmm5, xmm1; psrlw xmm4/xmm5, S
//          [pand xmm4/xmm5, xmm2]; packuswb xmm4, xmm5; movdqu [A+I+disp+off], xmm4
//          paddw xmm0, xmm3; paddw xmm1, xmm3; add I, 16; cmp I, N-16; jb vloop
//   r9 = (I + K) * R
void Emitter::vec_fill(const VecFill& v) {
  const ax::Gp i = R(v.iv);
  const int32_t last = v.bound - 16;
  a_.cmp(i, Imm(last));
  a_.jae(L_[v.head]);
  auto splat = [this](const ax::Xmm& x) {
    a_.pshuflw(x, x, Imm(0));
    a_.punpcklqdq(x, x);
  };
  a_.movd(ax::xmm0, v.iv_mul >= 0 ? ax::r9d : R(v.v).r32());
  splat(ax::xmm0);
  if (v.r == 0xff) {
    a_.mov(ax::r11d, Imm(static_cast<uint32_t>(v.rimm)));
    a_.movd(ax::xmm3, ax::r11d);
  } else {
    a_.movd(ax::xmm3, R(v.r).r32());
  }
  splat(ax::xmm3);
  a_.mov(ax::r11, Imm(0x0003000200010000ull));
  a_.movq(ax::xmm4, ax::r11);
  a_.mov(ax::r11, Imm(0x0007000600050004ull));
  a_.movq(ax::xmm5, ax::r11);
  a_.punpcklqdq(ax::xmm4, ax::xmm5);
  a_.pmullw(ax::xmm4, ax::xmm3);
  a_.paddw(ax::xmm0, ax::xmm4);
  a_.psllw(ax::xmm3, Imm(3));
  a_.movdqa(ax::xmm1, ax::xmm0);
  a_.paddw(ax::xmm1, ax::xmm3);
  a_.paddw(ax::xmm3, ax::xmm3);
  if (v.shift < 8) {
    a_.pcmpeqw(ax::xmm2, ax::xmm2);
    a_.psrlw(ax::xmm2, Imm(8));
  }
  if (v.iv_mul < 0) {  // r11 = 16 * R: V's step per chunk
    if (v.r == 0xff) {
      a_.mov(ax::r11, Imm(static_cast<uint64_t>(static_cast<int64_t>(v.rimm)) << 4));
    } else {
      a_.mov(ax::r11, R(v.r));
      a_.shl(ax::r11, Imm(4));
    }
  }
  Label loop = a_.newLabel();
  a_.align(asmjit::AlignMode::kCode, kLoopAlign);
  a_.bind(loop);
  a_.movdqa(ax::xmm4, ax::xmm0);
  a_.movdqa(ax::xmm5, ax::xmm1);
  if (v.shift) {
    a_.psrlw(ax::xmm4, Imm(v.shift));
    a_.psrlw(ax::xmm5, Imm(v.shift));
  }
  if (v.shift < 8) {
    a_.pand(ax::xmm4, ax::xmm2);
    a_.pand(ax::xmm5, ax::xmm2);
  }
  a_.packuswb(ax::xmm4, ax::xmm5);
  a_.movdqu(*group_mem(v.g, v.off, 16), ax::xmm4);
  a_.paddw(ax::xmm0, ax::xmm3);
  a_.paddw(ax::xmm1, ax::xmm3);
  if (v.iv_mul < 0) a_.add(R(v.v), ax::r11);
  a_.add(i, Imm(16));
  a_.cmp(i, Imm(last));
  a_.jb(loop);
  if (v.iv_mul >= 0) iv_mul_entry(iv_muls_[static_cast<size_t>(v.iv_mul)]);  // r9 for the iterations left
}

size_t Emitter::div_rem(size_t i) {
  constexpr uint8_t kMovX = op::kAlu64 | op::kMov | op::kX, kSubX = op::kAlu64 | op::kSub | op::kX;
  if (!s_.proof || i + 4 >= n_) return i;
  const Insn* n = &s_.insns[i];
  const uint8_t q = n[0].dst, a = n[0].src, r = n[3].dst;
  const uint8_t form = n[1].code & op::kX;  // divisor a register or a constant, as in the mul
  const bool x = form == op::kX;
  if (n[0].code != kMovX || n[0].off != 0 || q == a) return i;
  if (n[1].code != (op::kAlu64 | op::kDiv | form) || n[1].dst != q || n[1].off != 0) return i;
  if (n[2].code != (op::kAlu64 | op::kMul | form) || n[2].dst != q || n[2].off != 0) return i;
  if (x ? (n[2].src != n[1].src || n[1].src == q) : n[2].imm != n[1].imm) return i;
  if (n[3].code != kMovX || n[3].off != 0 || n[3].src != a || r == q || r == a || (x && r == n[1].src)) return i;
  if (n[4].code != kSubX || n[4].dst != r || n[4].src != q || n[4].off != 0 || live_after(i + 4, q)) return i;
  for (size_t k = i; k <= i + 4; ++k)
    if ((k > i && target_[k]) || !(s_.proof->insn[k] & ebpf::Proof::kReached) || iv_group_[k] >= 0 ||
        iv_inc_[k] >= 0 || (k > i && iv_head_[k] >= 0))
      return i;
  a_.mov(R(r), R(a));
  Insn mod = n[1];
  mod.code = static_cast<uint8_t>(op::kAlu64 | op::kMod | form);
  mod.dst = r;
  // The div's proof facts hold (same divisor, unchanged); registers live after the div
  // are those live after the sub (but R) and more; Q is dead.
  divmod(i + 1, mod, static_cast<uint16_t>(1u << q));
  return i + 4;
}

void Emitter::iv_mul_step(const IvMul& m) {
  if (m.r == 0xff) {
    if (m.step_fits_add()) a_.add(ax::r9, Imm(static_cast<int64_t>(m.const_step())));
    else a_.add(ax::r9, ax::r10);
  } else if (m.c == 1) {
    a_.add(ax::r9, R(m.r));
  } else if (m.c == -1) {
    a_.sub(ax::r9, R(m.r));
  } else {
    a_.add(ax::r9, ax::r10);
  }
}

Emitter::AddrGroup Emitter::addr_group(size_t i) const {
  constexpr uint8_t kMovX = op::kAlu64 | op::kMov | op::kX;
  constexpr uint8_t kAddK = op::kAlu64 | op::kAdd | op::kK, kAddX = op::kAlu64 | op::kAdd | op::kX;
  const Insn& m = s_.insns[i];
  AddrGroup g;
  if (m.code != kMovX || m.off != 0 || m.dst == ebpf::kFp) return {};
  g.p = m.dst;
  g.a = m.src;
  size_t j = i + 1;
  for (; j < n_ && !target_[j]; ++j) {
    const Insn& n = s_.insns[j];
    if (n.dst != g.p || n.off != 0) break;
    if (n.code == kAddK) {
      const int64_t d = g.disp + n.imm;
      if (d < INT32_MIN || d > INT32_MAX) break;
      g.disp = d;
    } else if (n.code == kAddX && n.src != g.p && g.b == 0xff) {
      g.b = n.src;
    } else {
      break;
    }
  }
  if (j - i < 2) return {};
  g.len = j - i;
  return g;
}

std::optional<ax::Mem> Emitter::group_mem(const AddrGroup& g, int16_t off, unsigned size) const {
  const int64_t d = g.disp + off;
  if (d < INT32_MIN || d > INT32_MAX) return std::nullopt;
  if (g.b == 0xff) return ax::ptr(R(g.a), static_cast<int32_t>(d), size);
  return ax::ptr(R(g.a), R(g.b), 0, static_cast<int32_t>(d), size);
}

size_t Emitter::fused(size_t i) {
  const AddrGroup g = addr_group(i);
  if (!g.len) return i;
  const size_t k = i + g.len;  // the instruction after the group
  if (s_.proof && k < n_ && !target_[k] && (s_.proof->insn[k] & ebpf::Proof::kReached)) {
    const Insn& n = s_.insns[k];
    const unsigned size = op::size_bytes(n.code);
    const bool ld = op::cls(n.code) == op::kLdx && n.src == g.p && (n.dst == g.p || !live_after(k, g.p));
    const bool st = (op::cls(n.code) == op::kSt || (op::cls(n.code) == op::kStx && n.src != g.p)) &&
                    op::mode(n.code) == op::kMem && n.dst == g.p && !live_after(k, g.p);
    if (ld || st) {
      if (auto m = group_mem(g, n.off, size)) {
        ld ? load(k, n, &*m) : store(k, n, &*m);
        return k;
      }
    }
  }
  const ax::Gp p = R(g.p);
  if (g.b == 0xff && g.disp == 0) a_.mov(p, R(g.a));
  else if (g.b == 0xff) a_.lea(p, ax::ptr(R(g.a), static_cast<int32_t>(g.disp)));
  else a_.lea(p, ax::ptr(R(g.a), R(g.b), 0, static_cast<int32_t>(g.disp)));
  return k - 1;
}

bool Emitter::lean() const {
  if (s_.proof) return true;
  if (s_.publish_run) return false;
  for (size_t i = 0; i < n_; ++i) {
    const Insn& n = s_.insns[i];
    switch (op::cls(n.code)) {
      case op::kLd: ++i; break;  // lddw: a constant
      case op::kLdx:
        if (n.src != ebpf::kFp || !in_frame(n.off, op::size_bytes(n.code))) return false;
        break;
      case op::kSt:
      case op::kStx:
        if (op::mode(n.code) == op::kAtomic) return false;
        if (n.dst != ebpf::kFp || !in_frame(n.off, op::size_bytes(n.code))) return false;
        break;
      case op::kJmp:
      case op::kJmp32:
        if (n.code == op::kCallOp || n.code == op::kCallxOp) return false;
        if (n.code != op::kExitOp && s_.loop_budget && ebpf::jump_target(i, n) <= static_cast<int64_t>(i))
          return false;
        break;
      default: break;  // ALU: division by zero gives 0 or keeps dst, never a fault
    }
  }
  return true;
}

void Emitter::unwind_frame() {
  if (lean_) {
    if (lean_frame_) a_.add(ax::rsp, Imm(lean_frame_));
    for (size_t k = lean_saved_.size(); k-- > 0;) a_.pop(lean_saved_[k]);
    return;
  }
  if (s_.publish_run) {
    a_.mov(ax::r11, st(rs::kPrev));
    a_.mov(x86::fs_mem(ebpf::current_run_tls_offset(), 8), ax::r11);
  }
  a_.add(ax::rsp, Imm(kFrameBytes));
  for (const ax::Gp& r : {ax::r15, ax::r14, ax::r13, ax::r12, ax::rbx, ax::rbp}) a_.pop(r);
}

void Emitter::epilogue_and_stubs() {
  a_.bind(exit_main_);
  unwind_frame();
  a_.ret();
  if (lean_) return;

  a_.bind(fault_common_);
  a_.mov(ax::rsp, kState);
  a_.mov(ax::rdi, kState);
  call_abs(reinterpret_cast<uint64_t>(&ebpf::utramp_ebpf_report));
  a_.xor_(ax::eax, ax::eax);
  a_.jmp(exit_main_);

  const ax::Gp saved[] = {ax::rax, ax::rdi, ax::rsi, ax::rdx, ax::rcx, ax::r8};
  for (int which = 0; which < 2; ++which) {
    a_.bind(which == 0 ? load_stub_ : store_stub_);
    for (const ax::Gp& r : saved) a_.push(r);
    // The seventh slot: padding for the load stub, the address for the store stub.
    a_.push(ax::r11);
    a_.mov(ax::rdi, kState);
    a_.mov(ax::rsi, ax::r11);
    a_.mov(ax::rdx, ax::r10);
    call_abs(which == 0 ? reinterpret_cast<uint64_t>(&ebpf::utramp_ebpf_load)
                        : reinterpret_cast<uint64_t>(&ebpf::utramp_ebpf_store_ok));
    if (which == 0) {
      a_.mov(ax::r11, ax::rax);
      a_.add(ax::rsp, Imm(8));
    } else {
      a_.mov(ax::r10, ax::rax);
      a_.pop(ax::r11);
    }
    for (int k = 5; k >= 0; --k) a_.pop(saved[k]);
    a_.ret();
  }
}

void Emitter::alu(size_t i, const Insn& n) {
  const bool is64 = op::cls(n.code) == op::kAlu64;
  const uint8_t o = op::alu_op(n.code);
  const ax::Gp d64 = R(n.dst);
  const ax::Gp d = is64 ? d64 : d64.r32();
  const bool x = op::src_bit(n.code) == op::kX;
  const ax::Gp s = x ? (is64 ? R(n.src) : R(n.src).r32()) : ax::Gp();
  const Imm imm(static_cast<int64_t>(n.imm));
  switch (o) {
    case op::kAdd: x ? a_.add(d, s) : a_.add(d, imm); break;
    case op::kSub: x ? a_.sub(d, s) : a_.sub(d, imm); break;
    case op::kOr: x ? a_.or_(d, s) : a_.or_(d, imm); break;
    case op::kAnd: x ? a_.and_(d, s) : a_.and_(d, imm); break;
    case op::kXor: x ? a_.xor_(d, s) : a_.xor_(d, imm); break;
    case op::kMul: x ? a_.imul(d, s) : a_.imul(d, d, imm); break;
    case op::kNeg: a_.neg(d); break;
    case op::kMov:
      if (!x) {
        // Shorter forms, same value (BPF has no flags): 0 is xor, a non-negative constant
        // a 32-bit mov (which zero-extends).
        if (n.imm == 0) a_.xor_(d64.r32(), d64.r32());
        else a_.mov(n.imm > 0 ? d64.r32() : d, imm);
      } else if (n.off == 0) {
        a_.mov(d, s);
      } else if (n.off == 8) {
        a_.movsx(d, R(n.src).r8());
      } else if (n.off == 16) {
        a_.movsx(d, R(n.src).r16());
      } else {
        a_.movsxd(d64, R(n.src).r32());
      }
      break;
    case op::kLsh:
    case op::kRsh:
    case op::kArsh: shift(i, n); break;
    case op::kDiv:
    case op::kMod: divmod(i, n); break;
    case op::kEnd: {
      const bool swap = is64 || op::src_bit(n.code) == op::kToBe;
      if (n.imm == 16) {
        if (swap) a_.rol(d64.r16(), Imm(8));
        a_.movzx(d64.r32(), d64.r16());
      } else if (n.imm == 32) {
        if (swap) a_.bswap(d64.r32());
        else a_.mov(d64.r32(), d64.r32());
      } else if (swap) {
        a_.bswap(d64);
      }
      break;
    }
    default:
      failed = true;
      error = make_error(Errc::unsupported, fmt::format("insn {}: unknown ALU operation", i));
  }
}

// lsh/rsh/arsh. x86 masks the count as BPF does (by 63, or 31 for 32-bit operands);
// a register count must be in cl, which is BPF r4:
//
//   mov r10, rcx; mov rcx, SRC; shl DST, cl; mov rcx, r10      (DST not rcx)
//   mov r10, rcx; mov rcx, SRC; shl r10, cl; mov rcx, r10      (DST is rcx)
void Emitter::shift(size_t i, const Insn& n) {
  const bool is64 = op::cls(n.code) == op::kAlu64;
  const uint8_t o = op::alu_op(n.code);
  auto sh = [&](const ax::Gp& r, const auto& count) {
    if (o == op::kLsh) a_.shl(r, count);
    else if (o == op::kRsh) a_.shr(r, count);
    else a_.sar(r, count);
  };
  const ax::Gp d64 = R(n.dst);
  const ax::Gp d = is64 ? d64 : d64.r32();
  if (op::src_bit(n.code) == op::kK) {
    const uint32_t c = static_cast<uint32_t>(n.imm) & (is64 ? 63 : 31);
    if (c != 0) sh(d, Imm(c));
    else if (!is64) a_.mov(d, d);  // a 32-bit operation still zero-extends
    return;
  }
  const ax::Gp src = R(n.src);
  if (src == ax::rcx && d64 != ax::rcx) {
    sh(d, ax::cl);
    return;
  }
  if (d64 != ax::rcx && !live_after(i, 4)) {  // r4 (rcx) dead: no need to keep it
    a_.mov(ax::rcx, src);
    sh(d, ax::cl);
    return;
  }
  a_.mov(ax::r10, ax::rcx);
  if (src != ax::rcx) a_.mov(ax::rcx, src);
  if (d64 == ax::rcx) {
    sh(is64 ? ax::Gp(ax::r10) : ax::Gp(ax::r10d), ax::cl);
    a_.mov(ax::rcx, ax::r10);
  } else {
    sh(d, ax::cl);
    a_.mov(ax::rcx, ax::r10);
  }
}

// div/mod/sdiv/smod. x86 divides rdx:rax, so r0 and r3 are kept in r9/r10 around it
// (the one that is DST is not: its old value is dead):
//
//   mov  r11, SRC           ; divisor (SRC itself when it is neither rax nor rdx)
//   test r11, r11 ; jz zero ; cmp r11, -1 ; je minus_one (signed; both left out
//                             where the proof says the divisor is never 0 or -1)
//   mov  r9, rax ; mov r10, rdx  (each only when DST is not it and it is live after)
//   mov  rax, DST ; xor edx, edx (cqo for signed)
//   div  r11
//   mov  DST, rax (rdx for mod) ; mov rax, r9 ; mov rdx, r10
//
// zero: div -> 0, mod -> DST (truncated to 32 bits for ALU32); minus_one: sdiv -> -DST,
// smod -> 0 (x86 would trap on INT_MIN / -1).
void Emitter::divmod(size_t i, const Insn& n, uint16_t dead) {
  const uint8_t proven = s_.proof ? s_.proof->insn[i] : 0;
  const bool is64 = op::cls(n.code) == op::kAlu64;
  const bool is_mod = op::alu_op(n.code) == op::kMod;
  const bool is_signed = n.off == 1;
  const ax::Gp d64 = R(n.dst);
  const ax::Gp d = is64 ? d64 : d64.r32();
  ax::Gp r11 = is64 ? ax::Gp(ax::r11) : ax::Gp(ax::r11d);  // the divisor
  auto by_zero = [this, is_mod, is64, d] {
    if (!is_mod) a_.xor_(d.r32(), d.r32());
    else if (!is64) a_.mov(d, d);
  };
  auto by_minus_one = [this, is_mod, d] {
    if (!is_mod) a_.neg(d);
    else a_.xor_(d.r32(), d.r32());
  };
  Label done = a_.newLabel();
  if (op::src_bit(n.code) == op::kK) {
    if (n.imm == 0) return by_zero();
    if (is_signed && n.imm == -1) return by_minus_one();
    a_.mov(r11, Imm(static_cast<int64_t>(n.imm)));
  } else {
    // SRC is read as it is unless the division needs its register (rax, rdx): nothing
    // below writes any other before the div.
    const ax::Gp src = is64 ? R(n.src) : R(n.src).r32();
    if (src.id() == ax::Gp::kIdAx || src.id() == ax::Gp::kIdDx) a_.mov(r11, src);
    else r11 = src;
    if (!(proven & ebpf::Proof::kDivisorNonZero)) {
      a_.test(r11, r11);
      a_.jz(defer([this, by_zero, done] {
        by_zero();
        a_.jmp(done);
      }));
    }
    if (is_signed && !(proven & ebpf::Proof::kNoOverflowDiv)) {
      a_.cmp(r11, Imm(-1));
      a_.je(defer([this, by_minus_one, done] {
        by_minus_one();
        a_.jmp(done);
      }));
    }
  }
  // r0 (rax) and r3 (rdx) are kept unless they are DST (its old value is dead) or, in a
  // proven program, no instruction reads them before writing them.
  const bool keep_rax = d64 != ax::rax && live_after(i, 0) && !(dead & 1),
             keep_rdx = d64 != ax::rdx && live_after(i, 3) && !(dead >> 3 & 1);
  if (keep_rax) a_.mov(ax::r9, ax::rax);
  if (keep_rdx) a_.mov(ax::r10, ax::rdx);
  if (d64 != ax::rax) a_.mov(is64 ? ax::Gp(ax::rax) : ax::Gp(ax::eax), d);
  if (is_signed) is64 ? a_.cqo() : a_.cdq();
  else a_.xor_(ax::edx, ax::edx);
  if (is_signed) a_.idiv(r11);
  else a_.div(r11);
  const ax::Gp result = is64 ? ax::Gp(is_mod ? ax::rdx : ax::rax) : ax::Gp(is_mod ? ax::edx : ax::eax);
  // DST is rax or rdx: one move at most, one register back; else a move and both.
  if (result.id() != d.id()) a_.mov(d, result);
  if (keep_rax) a_.mov(ax::rax, ax::r9);
  if (keep_rdx) a_.mov(ax::rdx, ax::r10);
  a_.bind(done);
}

// Insn i's jump to its target (ebpf::jump_target): with a loop budget, a backward one
// first spends one unit:
//
//   j!cc  skip
//   sub   qword [r12+budget], 1
//   jb    fault(loop_budget)
//   jmp   L_target
//   skip:
void Emitter::jump_to(size_t i, std::function<void(Label)> jcc, std::function<void(Label)> jncc) {
  const int64_t t = ebpf::jump_target(i, s_.insns[i]);
  const Label target = L_[static_cast<size_t>(t)];
  if (t > static_cast<int64_t>(i) || s_.loop_budget == 0 || s_.proof) {
    jcc(target);
    return;
  }
  Label skip = a_.newLabel();
  if (jncc) jncc(skip);
  a_.sub(st(rs::kBudget), Imm(1));
  a_.jb(fault(FaultKind::loop_budget, i, false));
  a_.jmp(target);
  a_.bind(skip);
}

void Emitter::jump(size_t i, const Insn& n) {
  const uint8_t o = op::jmp_op(n.code);
  if (n.code == op::kExitOp) {
    if (lean_) {  // the proof says which exits are local functions'; else no local calls
      if (s_.proof && (s_.proof->insn[i] & ebpf::Proof::kSubprogExit)) a_.ret();
      else if (i + 1 < n_) a_.jmp(exit_main_);  // the last instruction falls into it
      return;
    }
    a_.cmp(ax::rbp, st(rs::kStackHi));
    a_.je(exit_main_);
    a_.ret();
    return;
  }
  if (n.code == op::kCallOp || n.code == op::kCallxOp) return call(i, n);
  if (o == op::kJa) {
    jump_to(i, [this](Label l) { a_.jmp(l); }, nullptr);
    return;
  }
  const bool is32 = op::cls(n.code) == op::kJmp32;
  const ax::Gp d = is32 ? R(n.dst).r32() : R(n.dst);
  const bool x = op::src_bit(n.code) == op::kX;
  const ax::Gp s = x ? (is32 ? R(n.src).r32() : R(n.src)) : ax::Gp();
  const Imm imm(static_cast<int64_t>(n.imm));
  if (o == op::kJset) x ? a_.test(d, s) : a_.test(d, imm);
  else if (!x && n.imm == 0) a_.test(d, d);  // the flags of cmp d, 0 (CF = OF = 0)
  else x ? a_.cmp(d, s) : a_.cmp(d, imm);
  asmjit::x86::CondCode cc;
  switch (o) {
    case op::kJeq: cc = ax::CondCode::kEqual; break;
    case op::kJne: cc = ax::CondCode::kNotEqual; break;
    case op::kJset: cc = ax::CondCode::kNotZero; break;
    case op::kJgt: cc = ax::CondCode::kUnsignedGT; break;
    case op::kJge: cc = ax::CondCode::kUnsignedGE; break;
    case op::kJlt: cc = ax::CondCode::kUnsignedLT; break;
    case op::kJle: cc = ax::CondCode::kUnsignedLE; break;
    case op::kJsgt: cc = ax::CondCode::kSignedGT; break;
    case op::kJsge: cc = ax::CondCode::kSignedGE; break;
    case op::kJslt: cc = ax::CondCode::kSignedLT; break;
    default: cc = ax::CondCode::kSignedLE; break;
  }
  jump_to(
      i, [this, cc](Label l) { a_.j(cc, l); },
      [this, cc](Label l) { a_.j(ax::negateCond(cc), l); });
}

void Emitter::call(size_t i, const Insn& n) {
  if (s_.proof && n.code == op::kCallxOp) {
    const int32_t id = s_.proof->callx[i];
    const uint64_t fn = id >= 0 && static_cast<uint64_t>(id) < s_.helper_count ? s_.helpers[id] : 0;
    if (!fn) {
      failed = true;
      error = make_error(Errc::not_found, fmt::format("insn {}: the proof names no helper for this callx", i));
      return;
    }
    call_abs(fn);
    return;
  }
  if (s_.proof && n.src == op::kCallLocal) {
    for (const ax::Gp& r : {ax::rbp, ax::rbx, ax::r13, ax::r14, ax::r15}) a_.push(r);
    a_.lea(ax::rbp, ax::ptr(ax::rbp, -static_cast<int32_t>(ebpf::kStackSize)));
    a_.call(L_[static_cast<size_t>(static_cast<int64_t>(i) + 1 + n.imm)]);
    for (const ax::Gp& r : {ax::r15, ax::r14, ax::r13, ax::rbx, ax::rbp}) a_.pop(r);
    return;
  }
  if (n.code == op::kCallxOp) {
    // mov r11, DST; cmp r11, count; jae fault; mov r10, table; mov r10, [r10+r11*8];
    // test r10, r10; jz fault; call r10
    Label bad = fault(FaultKind::unknown_helper, i, true);
    a_.mov(ax::r11, R(n.dst));
    a_.mov(ax::r10, Imm(s_.helper_count));
    a_.cmp(ax::r11, ax::r10);
    a_.jae(bad);
    a_.mov(ax::r10, Imm(reinterpret_cast<uint64_t>(s_.helpers)));
    a_.mov(ax::r10, ax::ptr(ax::r10, ax::r11, 3));
    a_.test(ax::r10, ax::r10);
    a_.jz(bad);
    a_.call(ax::r10);
    return;
  }
  if (n.src == op::kCallLocal) {
    a_.lea(ax::r11, ax::ptr(ax::rbp, -static_cast<int32_t>(ebpf::kStackSize)));
    a_.cmp(ax::r11, st(rs::kMinFp));
    a_.jb(fault(FaultKind::call_depth, i, false));
    for (const ax::Gp& r : {ax::rbp, ax::rbx, ax::r13, ax::r14, ax::r15}) a_.push(r);
    a_.mov(ax::rbp, ax::r11);
    a_.call(L_[static_cast<size_t>(static_cast<int64_t>(i) + 1 + n.imm)]);
    for (const ax::Gp& r : {ax::r15, ax::r14, ax::r13, ax::rbx, ax::rbp}) a_.pop(r);
    return;
  }
  const uint32_t id = static_cast<uint32_t>(n.imm);
  if (id == ebpf::kTailCallHelper) return tail_call(i);
  const uint64_t fn = id < s_.helper_count ? s_.helpers[id] : 0;
  if (!fn) {
    failed = true;
    error = make_error(Errc::not_found, fmt::format("insn {}: no address for helper {}", i, id));
    return;
  }
  call_abs(fn);
}

// The sequence in the file's comment. In the full layout a tail call from a local
// function (an unverified program only: the verifier takes them in main functions
// only) drops the local-call frames with the rest (mov rsp, r12), as the interpreter
// does.
void Emitter::tail_call(size_t i) {
  if (lean_ && !s_.ctx_size && !s_.no_ctx) {
    failed = true;
    error = make_error(Errc::unsupported,
                       fmt::format("insn {}: bpf_tail_call needs a context of a fixed size (the target's length)", i));
    return;
  }
  Label fall = a_.newLabel();
  a_.lea(ax::rcx, tail_count());
  a_.push(ax::rdi);
  a_.push(ax::rdi);
  a_.mov(ax::rdi, ax::rsi);
  a_.mov(ax::rsi, ax::rdx);
  a_.mov(ax::rdx, ax::rcx);
  call_abs(reinterpret_cast<uint64_t>(&ebpf::utramp_ebpf_tail_entry));
  a_.pop(ax::rdi);
  a_.pop(ax::rdi);
  a_.test(ax::rax, ax::rax);
  a_.jz(fall);
  a_.mov(ax::r10, ax::rax);
  a_.mov(ax::rax, tail_count());
  if (lean_) {
    if (s_.ctx_size) a_.mov(ax::rsi, Imm(s_.ctx_size));
    else a_.xor_(ax::esi, ax::esi);
    a_.xor_(ax::edx, ax::edx);
  } else {
    a_.mov(ax::rsi, st(rs::kCtxLen));
    a_.mov(ax::rdx, st(rs::kStatus));
    a_.mov(ax::rsp, kState);
  }
  unwind_frame();
  a_.jmp(ax::r10);
  a_.bind(fall);
}

void Emitter::check_inline(uint8_t base, int16_t off, unsigned size, bool ctx_ok, Label direct,
                           Label slow) {
  a_.lea(ax::r11, ax::ptr(R(base), off));
  a_.lea(ax::r10, ax::ptr(ax::r11, -kStateBytes));
  a_.sub(ax::r10, kState);
  a_.cmp(ax::r10, Imm(kBpfStack - static_cast<int32_t>(size)));
  a_.jbe(direct);
  if (ctx_ok) {
    a_.mov(ax::r10, ax::r11);
    a_.sub(ax::r10, st(rs::kCtxLo));
    if (s_.ctx_size) {
      if (s_.ctx_size >= size && s_.ctx_size - size <= INT32_MAX) {
        a_.cmp(ax::r10, Imm(static_cast<int64_t>(s_.ctx_size - size)));
        a_.jbe(direct);
      }
    } else {
      // r9 = len - size (none fits when that borrows); inside when r11-ctx_lo <= r9.
      a_.mov(ax::r9, st(rs::kCtxLen));
      a_.sub(ax::r9, Imm(size));
      a_.jb(slow);
      a_.cmp(ax::r10, ax::r9);
      a_.jbe(direct);
    }
  }
  a_.jmp(slow);
}

void Emitter::load(size_t i, const Insn& n, const ax::Mem* at) {
  (void)i;
  const unsigned size = op::size_bytes(n.code);
  const bool sx = op::mode(n.code) == op::kMemSx;
  const ax::Gp d = R(n.dst);
  auto from = [&](const ax::Mem& m) {
    switch (size) {
      case 1: sx ? a_.movsx(d, m) : a_.movzx(d.r32(), m); break;
      case 2: sx ? a_.movsx(d, m) : a_.movzx(d.r32(), m); break;
      case 4: sx ? a_.movsxd(d, m) : a_.mov(d.r32(), m); break;
      default: a_.mov(d, m); break;
    }
  };
  if (s_.proof || (n.src == ebpf::kFp && in_frame(n.off, size))) {
    from(at ? *at : ax::ptr(R(n.src), n.off, size));
    return;
  }
  Label direct = a_.newLabel(), done = a_.newLabel();
  Label slow = defer([this, size, sx, d, done] {
    a_.mov(ax::r10d, Imm(size));
    a_.call(load_stub_);
    // The slow path returns the bytes zero-extended.
    if (sx && size == 1) a_.movsx(d, ax::r11b);
    else if (sx && size == 2) a_.movsx(d, ax::r11w);
    else if (sx && size == 4) a_.movsxd(d, ax::r11d);
    else a_.mov(d, ax::r11);
    a_.jmp(done);
  });
  check_inline(n.src, n.off, size, true, direct, slow);
  a_.bind(direct);
  from(ax::ptr(ax::r11, 0, size));
  a_.bind(done);
}

// The operation of a store or atomic on memory operand `m` (address in r11 or rbp+off).
//
// Fetching or/and/xor has no x86 instruction: a cmpxchg loop on rax (BPF r0, kept in r9):
//
//   mov r9, rax ; mov rax, [m]
//   again: mov r10, rax ; or r10, SRC ; lock cmpxchg [m], r10 ; jne again
//   mov SRC, rax ; mov rax, r9        (rax already holds the result when SRC is r0)
void Emitter::mem_op(const Insn& n, const ax::Mem& m) {
  const unsigned size = op::size_bytes(n.code);
  const bool w32 = size == 4;
  auto sized = [&](const ax::Gp& r) -> ax::Gp {
    switch (size) {
      case 1: return r.r8();
      case 2: return r.r16();
      case 4: return r.r32();
      default: return r.r64();
    }
  };
  if (op::cls(n.code) == op::kSt) {
    a_.mov(m, Imm(size == 8 ? static_cast<int64_t>(n.imm) : n.imm));
    return;
  }
  const ax::Gp s = sized(R(n.src));
  if (op::mode(n.code) == op::kMem) {
    a_.mov(m, s);
    return;
  }
  switch (n.imm) {
    case op::kAtomicAdd: a_.lock().add(m, s); return;
    case op::kAtomicOr: a_.lock().or_(m, s); return;
    case op::kAtomicAnd: a_.lock().and_(m, s); return;
    case op::kAtomicXor: a_.lock().xor_(m, s); return;
    case op::kAtomicAdd | op::kFetch: a_.lock().xadd(m, s); return;
    case op::kXchg: a_.xchg(m, s); return;
    case op::kCmpxchg:
      a_.lock().cmpxchg(m, s);
      if (w32) a_.mov(ax::eax, ax::eax);  // r0 is the zero-extended old value either way
      return;
    default: break;
  }
  // fetch or/and/xor
  const bool src_is_r0 = n.src == 0;
  const ax::Gp operand = src_is_r0 ? sized(ax::r9) : s;
  const ax::Gp acc = w32 ? ax::Gp(ax::eax) : ax::Gp(ax::rax);
  const ax::Gp tmp = w32 ? ax::Gp(ax::r10d) : ax::Gp(ax::r10);
  Label again = a_.newLabel();
  a_.mov(ax::r9, ax::rax);
  a_.mov(acc, m);
  a_.bind(again);
  a_.mov(tmp, acc);
  switch (n.imm & ~op::kFetch) {
    case op::kAtomicOr: a_.or_(tmp, operand); break;
    case op::kAtomicAnd: a_.and_(tmp, operand); break;
    default: a_.xor_(tmp, operand); break;
  }
  a_.lock().cmpxchg(m, tmp);
  a_.jne(again);
  if (!src_is_r0) {
    a_.mov(s, acc);
    a_.mov(ax::rax, ax::r9);
  }
}

void Emitter::store(size_t i, const Insn& n, const ax::Mem* at) {
  const unsigned size = op::size_bytes(n.code);
  const bool atomic = op::mode(n.code) == op::kAtomic;
  if (s_.proof) {  // in bounds and, for atomics, aligned
    mem_op(n, at ? *at : ax::ptr(R(n.dst), n.off, size));
    return;
  }
  if (n.dst == ebpf::kFp && in_frame(n.off, size)) {
    // Frames are 16-byte aligned: alignment is known now.
    if (atomic && (n.off & static_cast<int16_t>(size - 1)) != 0) {
      a_.lea(ax::r11, ax::ptr(ax::rbp, n.off));
      a_.jmp(fault(FaultKind::misaligned_atomic, i, true));
      return;
    }
    mem_op(n, ax::ptr(ax::rbp, n.off, size));
    return;
  }
  Label direct = a_.newLabel();
  Label bad = fault(FaultKind::bad_store, i, true);
  Label slow = defer([this, size, direct, bad] {
    a_.mov(ax::r10d, Imm(size));
    a_.call(store_stub_);
    a_.test(ax::r10, ax::r10);
    a_.jz(bad);
    a_.jmp(direct);
  });
  if (atomic) {
    a_.lea(ax::r11, ax::ptr(R(n.dst), n.off));
    a_.test(ax::r11b, Imm(size - 1));
    a_.jnz(fault(FaultKind::misaligned_atomic, i, true));
  }
  check_inline(n.dst, n.off, size, s_.ctx_writable, direct, slow);
  a_.bind(direct);
  mem_op(n, ax::ptr(ax::r11, 0, size));
}

Result<BpfJitCode> emit_at(const BpfJitSpec& spec, uint64_t base, bool far) {
  BpfJitCode out;
  Error emit_error{};
  bool emit_failed = false;
  Label native, full, tail;
  auto bytes = x86::assemble(
      base, fmt::format("the code of a {}-instruction eBPF program", spec.insns.size()),
      [&](ax::Assembler& a) {
        native = a.newLabel();
        full = a.newLabel();
        tail = a.newLabel();
        Emitter e(a, spec, base, far);
        e.emit(native, full, tail);
        emit_failed = e.failed;
        if (e.failed) emit_error = e.error;
      },
      [&](asmjit::CodeHolder& code) {
        out.native_entry = static_cast<uint32_t>(code.labelOffset(native));
        out.full_entry = static_cast<uint32_t>(code.labelOffset(full));
        out.tail_entry = static_cast<uint32_t>(code.labelOffset(tail));
      });
  if (emit_failed) return emit_error;
  if (!bytes) return std::move(bytes).error();
  out.code = std::move(*bytes);
  return out;
}

}  // namespace

Result<BpfJitCode> emit_bpf(const BpfJitSpec& spec, uint64_t base) { return emit_at(spec, base, false); }

Result<size_t> bpf_size_bound(const BpfJitSpec& spec) {
  // Every call in its long form (mov r11, imm64; call r11) and forward jumps rel32: any
  // real base gives code no longer than this.
  // Loop heads are aligned (Emitter::analyse): their padding depends on the code before
  // them, so each may take up to kLoopAlign-1 bytes more than at base 0, and a backward
  // jump the padding pushes out of rel8 reach 4 more (jcc rel32).
  auto code = emit_at(spec, 0, true);
  if (!code) return std::move(code).error();
  size_t backward = 0;
  for (size_t i = 0; i < spec.insns.size(); ++i) {
    const ebpf::Insn& n = spec.insns[i];
    if (n.code == ebpf::op::kLddw) ++i;
    else if (ebpf::op::is_jmp(n.code) && n.code != ebpf::op::kCallOp && n.code != ebpf::op::kCallxOp && n.code != ebpf::op::kExitOp &&
             ebpf::jump_target(i, n) <= static_cast<int64_t>(i))
      ++backward;
  }
  // A byte fill (Emitter::vec_fill) adds one more aligned loop per backward jump at most.
  return code->code.size() + 2 * backward * (kLoopAlign - 1 + 4);
}

}  // namespace utramp::arch
