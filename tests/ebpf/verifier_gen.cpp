#include "verifier_gen.hpp"

#include <fmt/format.h>

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

const char* size_suffix(uint32_t k) {
  static const char* s[] = {"b", "h", "w", "dw"};
  return s[k & 3];
}

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

  std::string t = "mov %r6, %r1\nmov %r0, 0\n";
  int label = 0;
  const int items = 4 + static_cast<int>(b.below(40));
  for (int k = 0; k < items && !b.done(); ++k) {
    const uint32_t what = b.below(14);
    switch (what) {
      case 0:
      case 1: {  // ALU
        static const char* ops[] = {"add", "sub", "mul", "div", "or", "and", "lsh", "rsh", "mod", "xor", "mov",
                                    "arsh", "sdiv", "smod"};
        const char* o = ops[b.below(std::size(ops))];
        const char* w = b.below(3) == 0 ? "32" : "";
        if (b.u8() & 1) t += fmt::format("{}{} %r{}, %r{}\n", o, w, wreg(b), b.below(11));
        else t += fmt::format("{}{} %r{}, {}\n", o, w, wreg(b), b.imm());
        break;
      }
      case 2: {  // stack store
        const int off = -static_cast<int>(1 + b.below(520));
        const char* s = size_suffix(b.u8());
        if (b.u8() & 1) t += fmt::format("st{} [%r10{}], {}\n", s, off, b.imm());
        else t += fmt::format("stx{} [%r10{}], %r{}\n", s, off, b.below(11));
        break;
      }
      case 3:  // stack load
        t += fmt::format("ldx{} %r{}, [%r10{}]\n", size_suffix(b.u8()), wreg(b), -static_cast<int>(1 + b.below(520)));
        break;
      case 4:  // context load
        t += fmt::format("ldx{} %r{}, [%r6+{}]\n", size_suffix(b.u8()), wreg(b), b.below(176));
        break;
      case 5:
      case 6: {  // map lookup and an access to the value
        const bool use_hash = b.u8() & 1;
        const int key = use_hash ? 8 : 4;
        if (b.below(4)) t += fmt::format("st{} [%r10-{}], {}\n", use_hash ? "dw" : "w", key, b.below(4));
        t += fmt::format("mov %r2, %r10\nadd %r2, -{}\nlddw %r1, map:{}\ncall 1\n", key, use_hash ? "hash" : "arr");
        const int l = label++;
        if (b.below(5)) t += fmt::format("jeq %r0, 0, L{}\n", l);
        const uint32_t how = b.below(3);
        const int vsize = static_cast<int>(use_hash ? 16 : arr.value_size);
        if (how == 0) {
          t += fmt::format("ldx{} %r7, [%r0{:+d}]\n", size_suffix(b.u8()), static_cast<int>(b.below(static_cast<uint32_t>(vsize) + 8)) - 2);
        } else {
          t += fmt::format("ldxdw %r8, [%r6+0]\n");
          if (how == 1) t += fmt::format("and %r8, {}\n", b.below(static_cast<uint32_t>(vsize) + 16));
          else t += fmt::format("jgt %r8, {}, L{}\n", b.below(static_cast<uint32_t>(vsize) + 16), l);
          t += "add %r0, %r8\n";
          if (b.u8() & 1) t += fmt::format("st{} [%r0+0], 1\n", size_suffix(b.u8()));
          else t += fmt::format("ldx{} %r7, [%r0+0]\n", size_suffix(b.u8()));
        }
        t += fmt::format("L{}:\nmov %r0, 0\n", l);
        break;
      }
      case 7: {  // forward branch over the next item
        static const char* ops[] = {"jeq", "jne", "jgt", "jge", "jlt", "jle", "jsgt", "jsge", "jslt", "jsle", "jset"};
        const int l = label++;
        const char* w = b.below(3) == 0 ? "32" : "";
        t += fmt::format("{}{} %r{}, {}, L{}\n", ops[b.below(std::size(ops))], w, b.below(10), b.imm(), l);
        t += fmt::format("mov %r{}, {}\nL{}:\n", wreg(b), b.imm(), l);
        break;
      }
      case 8: {  // a counted loop
        const int l = label++;
        const uint32_t n = b.below(40);
        t += fmt::format("mov %r9, 0\nL{}:\nadd %r{}, %r9\nadd %r9, {}\njlt %r9, {}, L{}\n", l, wreg(b),
                         1 + b.below(3), n, l);
        break;
      }
      case 9: {  // helpers without pointers, and probe_read into the stack
        static const int ids[] = {5, 7, 8, 14};
        if (b.u8() & 1) {
          t += fmt::format("call {}\n", ids[b.below(std::size(ids))]);
        } else {
          const int off = 8 * static_cast<int>(1 + b.below(64));
          t += fmt::format("mov %r1, %r10\nadd %r1, -{}\nmov %r2, {}\nmov %r3, %r6\ncall 4\n", off, b.below(80));
        }
        break;
      }
      case 10: {  // ring buffer reservation, submitted or not
        const int l = label++;
        const uint32_t sz = 8 * (1 + b.below(4));
        t += fmt::format("lddw %r1, map:ring\nmov %r2, {}\nmov %r3, 0\ncall 131\njeq %r0, 0, L{}\n", sz, l);
        t += fmt::format("stdw [%r0+{}], 1\n", 8 * b.below(sz / 8 + 1));
        if (b.below(6)) t += fmt::format("mov %r1, %r0\nmov %r2, 0\ncall {}\n", b.u8() & 1 ? 132 : 133);
        t += fmt::format("L{}:\nmov %r0, 0\n", l);
        break;
      }
      case 11:  // pointer arithmetic
        t += fmt::format("mov %r{}, %r{}\nadd %r7, {}\n", 7, b.u8() & 1 ? 10 : 6, b.imm());
        t += fmt::format("ldx{} %r8, [%r7+0]\n", size_suffix(b.u8()));
        break;
      case 12: {  // atomic on the stack
        static const char* ops[] = {"add", "or", "xor", "fetch add", "xchg", "add32"};
        t += fmt::format("lock {} [%r10-{}], %r{}\n", ops[b.below(std::size(ops))], 8 * (1 + b.below(8)), wreg(b));
        break;
      }
      default:  // a spill and fill of the context
        t += fmt::format("stxdw [%r10-{}], %r6\nldxdw %r7, [%r10-{}]\n", 8 * (1 + b.below(4)), 8 * (1 + b.below(4)));
        break;
    }
  }
  t += b.below(4) ? "mov %r0, 0\nexit\n" : "exit\n";
  c.text = t;
  return c;
}

}  // namespace utramp::ebpf::testing
