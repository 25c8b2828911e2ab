#include "verifier_gen.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace utramp::ebpf::testing {

namespace {

class Bytes {
 public:
  Bytes(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool done() const { return i_ >= n_; }
  uint8_t u8() { return i_ < n_ ? p_[i_++] : 0; }
  uint32_t below(uint32_t k) { return k ? u8() % k : 0; }
  int64_t imm() {
    static const int64_t edge[] = {0, 1, -1, 2, 7, 8, 15, 16, 31, 32, 63, 64, 255, 256, 511, 512, -8, -512,
                                   0x7fffffff, INT32_MIN};
    if (u8() & 1) return edge[below(std::size(edge))];
    return static_cast<int8_t>(u8()) * static_cast<int64_t>(1 + below(64));
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t i_ = 0;
};

// A register the body may write: not r6 (the context) nor r10.
int wreg(Bytes& b) {
  static const int r[] = {0, 1, 2, 3, 4, 5, 7, 8, 9};
  return r[b.below(std::size(r))];
}

}  // namespace

VerifierCase generate_case(const uint8_t* data, size_t size) {
  Bytes b(data, size);
  VerifierCase c;
  c.name = "generated";
  c.accept = true;
  c.max_insns = 200000;
  switch (b.below(3)) {
    case 0:
      c.ctx = {CtxKind::tracing, 8 * (1 + b.below(6)), false, "the tracing context"};
      break;
    case 1: c.ctx = {CtxKind::pt_regs, 168, false, "struct pt_regs"}; break;
    default: c.ctx = {CtxKind::memory, 8 * b.below(9), true, "memory"}; break;
  }
  const uint32_t ctx_size = c.ctx.size;
  MapSpec arr;
  arr.name = "arr";
  arr.type = 2;
  arr.key_size = 4;
  arr.value_size = 8 * (1 + b.below(16));
  arr.max_entries = 4;
  MapSpec hash;
  hash.name = "hash";
  hash.type = 1;
  hash.key_size = 8;
  hash.value_size = 16;
  hash.max_entries = 8;
  MapSpec ring;
  ring.name = "ring";
  ring.type = 27;
  ring.max_entries = 4096;
  c.maps = {arr, hash, ring};

  // Each item is either *tame* (built to be safe: registers and stack bytes written
  // before they are read, offsets inside their region, NULL checks made, records
  // submitted) or *wild* (any parameter, so most wild items are unsafe, many close to
  // the line). How often items are wild is the first choice: a quarter of the programs
  // have none, so that both outcomes stay common (a program of twenty items, each
  // possibly unsafe, would almost never be accepted).
  static const int wild_every[] = {0, 3, 8, 20};
  const int every = wild_every[b.below(std::size(wild_every))];
  // Tame items keep r7-r9 numbers (r6 is the context, r0 a number between items) and
  // fp-64..fp-1 written: the prologue writes them.
  std::string t = "mov %r6, %r1\nmov %r0, 0\n";
  t += fmt::format("mov %r7, {}\nmov %r8, {}\nmov %r9, {}\n", b.imm(), b.imm(), b.imm());
  for (int off = 8; off <= 64; off += 8) t += fmt::format("stdw [%r10-{}], {}\n", off, b.imm());
  auto scalar = [&] {
    static const int r[] = {0, 7, 8, 9};
    return r[b.below(std::size(r))];
  };
  const char* sizes[] = {"b", "h", "w", "dw"};
  auto pick_size = [&](uint32_t& bytes) {
    const uint32_t k = b.below(4);
    bytes = 1u << k;
    return sizes[k];
  };
  int label = 0;
  const int items = 4 + static_cast<int>(b.below(40));
  for (int k = 0; k < items && !b.done(); ++k) {
    const bool wild = every != 0 && b.below(static_cast<uint32_t>(every)) == 0;
    const uint32_t what = b.below(14);
    switch (what) {
      case 0:
      case 1: {  // ALU
        static const char* ops[] = {"add", "sub", "mul", "div", "or", "and", "lsh", "rsh", "mod", "xor", "mov",
                                    "arsh", "sdiv", "smod"};
        const uint32_t oi = b.below(std::size(ops));
        const char* o = ops[oi];
        const bool w32 = b.below(3) == 0;
        const char* w = w32 ? "32" : "";
        const bool shift = oi == 6 || oi == 7 || oi == 11;
        if (wild) {
          if (b.u8() & 1) t += fmt::format("{}{} %r{}, %r{}\n", o, w, wreg(b), b.below(11));
          else t += fmt::format("{}{} %r{}, {}\n", o, w, wreg(b), b.imm());
        } else if (b.u8() & 1) {
          t += fmt::format("{}{} %r{}, %r{}\n", o, w, scalar(), scalar());
        } else {
          const int64_t imm = shift ? b.below(w32 ? 32 : 64) : b.imm();
          t += fmt::format("{}{} %r{}, {}\n", o, w, scalar(), imm);
        }
        break;
      }
      case 2: {  // stack store
        uint32_t n = 0;
        const char* s = pick_size(n);
        int off = -static_cast<int>(1 + b.below(520));
        if (!wild) off = -static_cast<int>(n * (1 + b.below(512 / n)));
        if (b.u8() & 1) t += fmt::format("st{} [%r10{}], {}\n", s, off, b.imm());
        else t += fmt::format("stx{} [%r10{}], %r{}\n", s, off, wild ? static_cast<int>(b.below(11)) : scalar());
        break;
      }
      case 3: {  // stack load (tame: from the bytes the prologue wrote)
        uint32_t n = 0;
        const char* s = pick_size(n);
        const int off = wild ? -static_cast<int>(1 + b.below(520)) : -static_cast<int>(n * (1 + b.below(64 / n)));
        t += fmt::format("ldx{} %r{}, [%r10{}]\n", s, wild ? wreg(b) : scalar(), off);
        break;
      }
      case 4: {  // context load
        uint32_t n = 0;
        const char* s = pick_size(n);
        if (wild) t += fmt::format("ldx{} %r{}, [%r6+{}]\n", s, wreg(b), b.below(176));
        else if (ctx_size >= n) t += fmt::format("ldx{} %r{}, [%r6+{}]\n", s, scalar(), n * b.below(ctx_size / n));
        break;
      }
      case 5:
      case 6: {  // map lookup and an access to the value
        const bool use_hash = b.u8() & 1;
        const int key = use_hash ? 8 : 4;
        if (!wild || b.below(4)) t += fmt::format("st{} [%r10-{}], {}\n", use_hash ? "dw" : "w", key, b.below(4));
        t += fmt::format("mov %r2, %r10\nadd %r2, -{}\nlddw %r1, map:{}\ncall 1\n", key, use_hash ? "hash" : "arr");
        const int l = label++;
        if (!wild || b.below(5)) t += fmt::format("jeq %r0, 0, L{}\n", l);
        const uint32_t how = b.below(3);
        const uint32_t vsize = use_hash ? 16 : arr.value_size;
        uint32_t n = 0;
        const char* s = pick_size(n);
        if (how == 0) {
          const int off = wild ? static_cast<int>(b.below(vsize + 8)) - 2 : static_cast<int>(n * b.below(vsize / n));
          t += fmt::format("ldx{} %r7, [%r0{:+d}]\n", s, off);
        } else {
          // The variable offset: from the context when it has a word, else the stack.
          if (ctx_size >= 8 || wild) t += "ldxdw %r8, [%r6+0]\n";
          else t += "ldxdw %r8, [%r10-16]\n";
          const uint32_t bound = wild ? b.below(vsize + 16) : b.below(vsize - n + 1);
          if (how == 1) t += fmt::format("and %r8, {}\n", bound);
          else t += fmt::format("jgt %r8, {}, L{}\n", bound, l);
          t += "add %r0, %r8\n";
          if (b.u8() & 1) t += fmt::format("st{} [%r0+0], 1\n", s);
          else t += fmt::format("ldx{} %r7, [%r0+0]\n", s);
        }
        t += fmt::format("L{}:\nmov %r0, 0\n", l);
        break;
      }
      case 7: {  // forward branch over the next item
        static const char* ops[] = {"jeq", "jne", "jgt", "jge", "jlt", "jle", "jsgt", "jsge", "jslt", "jsle", "jset"};
        const int l = label++;
        const char* w = b.below(3) == 0 ? "32" : "";
        const int r = wild ? static_cast<int>(b.below(10)) : scalar();
        t += fmt::format("{}{} %r{}, {}, L{}\n", ops[b.below(std::size(ops))], w, r, b.imm(), l);
        t += fmt::format("mov %r{}, {}\nL{}:\n", wild ? wreg(b) : scalar(), b.imm(), l);
        break;
      }
      case 8: {  // a counted loop (r9 the counter; tame: r9 is a number again after it)
        const int l = label++;
        const uint32_t n = b.below(40);
        int dst = wild ? wreg(b) : scalar();
        if (dst == 9) dst = 8;
        t += fmt::format("mov %r9, 0\nL{}:\n", l);
        if (b.u8() & 1) {
          // A product of the counter (the JIT's strength reduction): T = (r9 + K) * R.
          int tr = wild ? wreg(b) : scalar(), r = scalar();
          if (tr == 9) tr = 7;
          t += fmt::format("mov %r{}, %r9\n", tr);
          if (b.u8() & 1) t += fmt::format("add %r{}, {}\n", tr, b.imm());
          if (r != tr && r != 9 && (b.u8() & 1)) t += fmt::format("mul %r{}, %r{}\n", tr, r);
          else t += fmt::format("mul %r{}, {}\n", tr, b.imm());
          if (tr != dst) t += fmt::format("xor %r{}, %r{}\n", dst, tr);
        } else {
          t += fmt::format("add %r{}, %r9\n", dst);
        }
        t += fmt::format("add %r9, {}\njlt %r9, {}, L{}\n", 1 + b.below(3), n, l);
        break;
      }
      case 9: {  // helpers without pointers, and probe_read into the stack
        static const int ids[] = {5, 7, 8, 14};
        if (b.u8() & 1) {
          t += fmt::format("call {}\n", ids[b.below(std::size(ids))]);
        } else {
          const uint32_t off = 8 * (1 + b.below(64));
          const uint32_t len = wild ? b.below(80) : b.below(std::min(off, 80u) + 1);
          t += fmt::format("mov %r1, %r10\nadd %r1, -{}\nmov %r2, {}\nmov %r3, %r6\ncall 4\n", off, len);
        }
        break;
      }
      case 10: {  // ring buffer reservation, submitted or not
        const int l = label++;
        const uint32_t sz = 8 * (1 + b.below(4));
        t += fmt::format("lddw %r1, map:ring\nmov %r2, {}\nmov %r3, 0\ncall 131\njeq %r0, 0, L{}\n", sz, l);
        t += fmt::format("stdw [%r0+{}], 1\n", 8 * b.below(wild ? sz / 8 + 1 : sz / 8));
        if (!wild || b.below(6)) t += fmt::format("mov %r1, %r0\nmov %r2, 0\ncall {}\n", b.u8() & 1 ? 132 : 133);
        t += fmt::format("L{}:\nmov %r0, 0\n", l);
        break;
      }
      case 11: {  // pointer arithmetic, then a load (and a store) through it
        uint32_t n = 0;
        const char* s = pick_size(n);
        const bool stack = b.u8() & 1;
        if (wild) {
          t += fmt::format("mov %r7, %r{}\nadd %r7, {}\n", stack ? 10 : 6, b.imm());
        } else if (stack) {
          t += fmt::format("mov %r7, %r10\nadd %r7, -{}\n", n * (1 + b.below(64 / n)));
        } else if (ctx_size >= n) {
          t += fmt::format("mov %r7, %r6\nadd %r7, {}\n", n * b.below(ctx_size / n));
        } else {
          break;
        }
        t += fmt::format("ldx{} %r8, [%r7+0]\n", s);
        // A store back through it (the JIT folds an address into the access when the
        // register is dead after it: here after the store, not the load).
        if (stack && (b.u8() & 1)) t += fmt::format("stx{} [%r7+0], %r8\n", s);
        if (!wild) t += fmt::format("mov %r7, {}\n", b.imm());
        break;
      }
      case 12: {  // atomic on the stack
        static const char* ops[] = {"add", "or", "xor", "fetch add", "xchg", "add32"};
        t += fmt::format("lock {} [%r10-{}], %r{}\n", ops[b.below(std::size(ops))], 8 * (1 + b.below(8)),
                         wild ? wreg(b) : scalar());
        break;
      }
      default: {  // a spill and fill of the context
        const uint32_t a = 8 * (1 + b.below(4)), f = 8 * (1 + b.below(4));
        t += fmt::format("stxdw [%r10-{}], %r6\nldxdw %r7, [%r10-{}]\n", a, f);
        // Tame: the slot holds a number again, r7 is one again.
        if (!wild) t += fmt::format("stdw [%r10-{}], {}\nmov %r7, 0\n", a, b.imm());
        break;
      }
    }
  }
  t += b.below(4) ? "mov %r0, 0\nexit\n" : "exit\n";
  c.text = t;
  return c;
}

}  // namespace utramp::ebpf::testing
