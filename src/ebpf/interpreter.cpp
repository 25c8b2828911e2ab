#include "ebpf/interpreter.hpp"

#include <cstring>

#include "ebpf/alu.hpp"
#include "ebpf/maps.hpp"

namespace utramp::ebpf {

namespace {

using namespace op;
using isa::alu32;
using isa::alu64;
using isa::byte_swap;
using isa::cond;
using isa::sign_extend;

inline uint64_t load_direct(uint64_t addr, unsigned n) {
  switch (n) {
    case 1: return *reinterpret_cast<const uint8_t*>(addr);
    case 2: { uint16_t v; std::memcpy(&v, reinterpret_cast<const void*>(addr), 2); return v; }
    case 4: { uint32_t v; std::memcpy(&v, reinterpret_cast<const void*>(addr), 4); return v; }
    default: { uint64_t v; std::memcpy(&v, reinterpret_cast<const void*>(addr), 8); return v; }
  }
}

inline void store_direct(uint64_t addr, unsigned n, uint64_t v) {
  switch (n) {
    case 1: *reinterpret_cast<uint8_t*>(addr) = uint8_t(v); break;
    case 2: { uint16_t x = uint16_t(v); std::memcpy(reinterpret_cast<void*>(addr), &x, 2); break; }
    case 4: { uint32_t x = uint32_t(v); std::memcpy(reinterpret_cast<void*>(addr), &x, 4); break; }
    default: std::memcpy(reinterpret_cast<void*>(addr), &v, 8); break;
  }
}

template <class T>
inline T atomic_op(T* p, int32_t imm, T v, T* r0) {
  switch (imm & ~kFetch) {
    case kAtomicAdd: return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
    case kAtomicOr: return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST);
    case kAtomicAnd: return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST);
    case kAtomicXor: return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST);
    case kXchg & ~kFetch: return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
    case kCmpxchg & ~kFetch: {
      T expected = *r0;
      __atomic_compare_exchange_n(p, &expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
      *r0 = expected;  // the old value, whether or not it matched
      return expected;
    }
  }
  return 0;
}

struct Frame {
  size_t ret;
  uint64_t saved[5];  // r6..r9, r10
};

}  // namespace

Result<std::unique_ptr<Interpreter>> Interpreter::create(Program program, const ExecOptions& options) {
  RunEnv env = make_env(options, program.insns);
  return std::unique_ptr<Interpreter>(new Interpreter(std::move(program), std::move(env)));
}

uint64_t Interpreter::run(void* ctx, uint64_t len, RunStatus* status) const {
  // Frames are 16-byte aligned as the JIT's are, so both see the same atomics aligned.
  alignas(16) uint8_t stack[kStackBytes];
  // The running program: this one, then each a tail call jumps to.
  const Insn* p = program_.insns.data();
  const Program* prog = &program_;
  const RunEnv* env = &env_;
  uint64_t tail_calls = 0;
  if (env_.no_ctx) ctx = nullptr, len = 0;  // as the proof assumed (RunEnv::no_ctx)
  const uint64_t ctx_len = env_.ctx_size ? env_.ctx_size : len;
  RunState rs{};
  rs.ctx_lo = reinterpret_cast<uint64_t>(ctx);
  rs.ctx_len = ctx_len;
  rs.stack_lo = reinterpret_cast<uint64_t>(stack);
  rs.stack_hi = rs.stack_lo + kStackBytes;
  rs.min_fp = rs.stack_lo + kStackSize;
  rs.budget = env->loop_budget;
  rs.env = env;
  rs.status = status;
  if (env->publish_run) enter_run(&rs);

  uint64_t r[kNumRegs] = {};
  r[1] = rs.ctx_lo;
  r[2] = ctx_len;
  r[kFp] = rs.stack_hi;
  Frame frames[kMaxFrames];
  unsigned depth = 0;
  size_t pc = 0;

  auto fault = [&](FaultKind k, size_t at, uint64_t addr) {
    rs.fault_kind = static_cast<uint32_t>(k);
    rs.fault_insn = static_cast<uint32_t>(at);
    rs.fault_addr = addr;
    utramp_ebpf_report(&rs);
    if (env->publish_run) leave_run(&rs);
    return uint64_t(0);
  };
  // Direct inside the stack or the context (the common cases, checked inline), else the
  // shared slow path over the static regions and the fault-safe copy.
  auto load = [&](uint64_t addr, unsigned n) -> uint64_t {
    if (addr - rs.stack_lo <= kStackBytes - n || (rs.ctx_len >= n && addr - rs.ctx_lo <= rs.ctx_len - n))
      return load_direct(addr, n);
    return utramp_ebpf_load(&rs, addr, n);
  };
  // Strict runs (RunEnv::strict_memory): the checks above see the stack as one region of
  // kMaxFrames frames; a program may reach only its own frame and its callers' (which
  // pointers passed down reach), one frame per access. Frames are 512-byte slices down
  // from stack_hi, so [r10 - 512, stack_hi) is the live chain and an access crosses a
  // boundary when its first and last byte fall in different slices.
  auto in_frame = [&](uint64_t addr, unsigned n) {
    if (addr - rs.stack_lo > kStackBytes - n) return true;  // not the stack: the regions decide
    const uint64_t lo = r[kFp] - kStackSize;
    return addr >= lo && (addr - lo) / kStackSize == (addr + n - 1 - lo) / kStackSize;
  };

  for (;;) {
    const size_t at = pc;
    const Insn& i = p[pc++];
    const uint8_t c = i.code;
    switch (cls(c)) {
      case kAlu64: {
        const uint8_t o = alu_op(c);
        uint64_t& d = r[i.dst];
        if (o == kEnd) {
          d = byte_swap(d, i.imm, true);
          break;
        }
        const uint64_t s = src_bit(c) == kX ? r[i.src] : static_cast<uint64_t>(static_cast<int64_t>(i.imm));
        if (o == kMov && i.off != 0) d = sign_extend(s, i.off);
        else d = alu64(o, i.off, d, s);
        break;
      }
      case kAlu: {
        const uint8_t o = alu_op(c);
        uint64_t& d = r[i.dst];
        if (o == kEnd) {
          d = byte_swap(d, i.imm, src_bit(c) == kToBe);
          break;
        }
        const uint32_t s = src_bit(c) == kX ? uint32_t(r[i.src]) : static_cast<uint32_t>(i.imm);
        if (o == kMov && i.off != 0) d = uint32_t(sign_extend(s, i.off));
        else d = alu32(o, i.off, uint32_t(d), s);
        break;
      }
      case kJmp:
      case kJmp32: {
        const uint8_t o = jmp_op(c);
        if (c == kExitOp) {
          if (depth == 0) {
            if (env->publish_run) leave_run(&rs);
            return r[0];
          }
          const Frame& f = frames[--depth];
          std::memcpy(&r[6], f.saved, sizeof f.saved);
          pc = f.ret;
          break;
        }
        if (c == kCallOp) {
          if (i.src == kCallLocal) {
            if (r[kFp] - kStackSize < rs.min_fp) return fault(FaultKind::call_depth, at, 0);
            Frame& f = frames[depth++];
            f.ret = pc;
            std::memcpy(f.saved, &r[6], sizeof f.saved);
            r[kFp] -= kStackSize;
            pc = at + 1 + static_cast<int64_t>(i.imm);
            break;
          }
          if (static_cast<uint32_t>(i.imm) == kTailCallHelper) {
            // The same context, a fresh top frame; the replaced program's local-call
            // frames go with it (the verifier allows tail calls in main functions only).
            const Executable* t = tail_call_target(r[2], r[3], &tail_calls);
            if (!t) break;  // falls through (r0-r5 as they are: the verifier makes them unusable)
            if (env->publish_run) leave_run(&rs);
            prog = &t->program();
            env = &t->env();
            p = prog->insns.data();
            rs.env = env;
            rs.budget = env->loop_budget;
            if (env->publish_run) enter_run(&rs);
            const uint64_t c = r[1];
            std::memset(r, 0, sizeof r);
            r[1] = c;
            r[2] = rs.ctx_len;
            r[kFp] = rs.stack_hi;
            depth = 0;
            pc = 0;
            break;
          }
          const auto fn = reinterpret_cast<HelperFn>(env->callx[static_cast<uint32_t>(i.imm)]);
          r[0] = fn(r[1], r[2], r[3], r[4], r[5]);
          break;
        }
        if (c == kCallxOp) {
          const uint64_t id = r[i.dst];
          if (id >= env->callx.size() || env->callx[id] == 0)
            return fault(FaultKind::unknown_helper, at, id);
          r[0] = reinterpret_cast<HelperFn>(env->callx[id])(r[1], r[2], r[3], r[4], r[5]);
          break;
        }
        if (o != kJa) {
          bool taken;
          if (cls(c) == kJmp) {
            const uint64_t s = src_bit(c) == kX ? r[i.src] : static_cast<uint64_t>(static_cast<int64_t>(i.imm));
            taken = cond<uint64_t, int64_t>(o, r[i.dst], s);
          } else {
            const uint32_t s = src_bit(c) == kX ? uint32_t(r[i.src]) : static_cast<uint32_t>(i.imm);
            taken = cond<uint32_t, int32_t>(o, uint32_t(r[i.dst]), s);
          }
          if (!taken) break;
        }
        const int64_t target = jump_target(at, i);
        if (target <= static_cast<int64_t>(at) && env->loop_budget != 0) {  // backward
          if (rs.budget == 0) return fault(FaultKind::loop_budget, at, 0);
          --rs.budget;
        }
        pc = static_cast<size_t>(target);
        break;
      }
      case kLd:  // lddw (the only LD the checker lets through)
        r[i.dst] = imm64({p, prog->insns.size()}, at);
        ++pc;
        break;
      case kLdx: {
        const unsigned n = size_bytes(c);
        const uint64_t addr = r[i.src] + static_cast<int64_t>(i.off);
        if (env->strict_memory && (!run_allows(&rs, addr, n, false) || !in_frame(addr, n)))
          return fault(FaultKind::wild_load, at, addr);
        const uint64_t v = load(addr, n);
        r[i.dst] = mode(c) == kMemSx ? sign_extend(v, int(n * 8)) : v;
        break;
      }
      case kSt:
      case kStx: {
        const unsigned n = size_bytes(c);
        const uint64_t addr = r[i.dst] + static_cast<int64_t>(i.off);
        if (mode(c) == kAtomic && (addr & (n - 1)) != 0)
          return fault(FaultKind::misaligned_atomic, at, addr);
        if (!(addr - rs.stack_lo <= kStackBytes - n) && !utramp_ebpf_store_ok(&rs, addr, n))
          return fault(FaultKind::bad_store, at, addr);
        if (env->strict_memory && !in_frame(addr, n)) return fault(FaultKind::bad_store, at, addr);
        if (mode(c) != kAtomic) {
          store_direct(addr, n, cls(c) == kSt ? static_cast<uint64_t>(static_cast<int64_t>(i.imm)) : r[i.src]);
          break;
        }
        uint64_t& s = r[i.src];
        if (n == 8) {
          const uint64_t old = atomic_op<uint64_t>(reinterpret_cast<uint64_t*>(addr), i.imm, s, &r[0]);
          if ((i.imm & kFetch) && i.imm != kCmpxchg) s = old;
        } else {
          uint32_t r0 = uint32_t(r[0]);
          const uint32_t old = atomic_op<uint32_t>(reinterpret_cast<uint32_t*>(addr), i.imm, uint32_t(s), &r0);
          if (i.imm == kCmpxchg) r[0] = r0;
          else if (i.imm & kFetch) s = old;
        }
        break;
      }
    }
  }
}

}  // namespace utramp::ebpf
