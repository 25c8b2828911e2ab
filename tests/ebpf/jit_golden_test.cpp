// The JIT's code for a few small programs as golden listings (tests/ebpf/golden/*.txt):
// offset, bytes and disassembly of every instruction. What depends on where the code and
// the library landed (absolute addresses, rel32 calls out of the block) is masked: the
// operand becomes ADDR and the line's bytes "..". UTRAMP_UPDATE_GOLDENS=1 rewrites the
// goldens; a mismatch fails with a unified diff.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>

#include "arch/arch.hpp"
#include "ebpf/asm.hpp"
#include "ebpf/jit.hpp"
#include "ebpf/verifier.hpp"

namespace {

using namespace utramp;
using namespace utramp::ebpf;

std::string masked_listing(std::span<const uint8_t> code) {
  // Disassembled at base 0: branch targets inside the block read as offsets; any other
  // number too large to be one is an address.
  static const std::regex line_re(R"(^0x([0-9a-fA-F]+): (.{30}) (.*)$)");
  static const std::regex hex(R"(0x([0-9a-fA-F]+))");
  std::istringstream in(arch::disassemble(code, 0));
  std::string out, line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, line_re)) {
      out += line + "\n";
      continue;
    }
    std::string bytes = m[2].str(), text = m[3].str(), masked;
    bool has_addr = false;
    size_t pos = 0;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), hex); it != std::sregex_iterator(); ++it) {
      const uint64_t v = std::stoull((*it)[1].str(), nullptr, 16);
      masked.append(text, pos, static_cast<size_t>(it->position(0)) - pos);
      if (v >= 0x10000 && v > code.size()) {
        masked += "ADDR";
        has_addr = true;
      } else {
        char buf[32];
        std::snprintf(buf, sizeof buf, "0x%lx", static_cast<unsigned long>(v));
        masked += buf;
      }
      pos = static_cast<size_t>(it->position(0) + it->length(0));
    }
    masked.append(text, pos, std::string::npos);
    if (has_addr) bytes = "..";
    char head[64];
    std::snprintf(head, sizeof head, "%4lx: %-30s ", std::stoul(m[1].str(), nullptr, 16), bytes.c_str());
    out += head + masked + "\n";
  }
  return out;
}

void expect_golden(const std::string& name, const std::string& actual) {
  const std::string path = std::string(UTRAMP_EBPF_TEST_DIR) + "/golden/" + name + ".txt";
  const char* upd = std::getenv("UTRAMP_UPDATE_GOLDENS");
  if (upd && *upd && std::string(upd) != "0") {
    std::ofstream f(path, std::ios::trunc);
    f << actual;
    ASSERT_TRUE(f.good()) << "cannot write " << path;
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << "no golden " << path << " (UTRAMP_UPDATE_GOLDENS=1 creates it):\n" << actual;
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str() == actual) return;
  char tmpl[] = "/tmp/utramp-ebpf-golden-XXXXXX";
  const int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(tmpl) << actual;
  std::string diff;
  if (FILE* p = popen(("diff -u '" + path + "' '" + tmpl + "'").c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) diff.append(buf, n);
    pclose(p);
  }
  unlink(tmpl);
  ADD_FAILURE() << "JIT code differs from " << path << " (UTRAMP_UPDATE_GOLDENS=1 rewrites it):\n" << diff;
}

// `proven`: the program is verified first and compiled with the proof.
std::string jit_listing(std::string_view text, ExecOptions o, bool proven = false) {
  auto p = assemble(text);
  EXPECT_TRUE(p) << p.error().message;
  if (!p) return {};
  std::optional<Verified> v;
  if (proven) {
    auto r = verify(*p, verify_env(o));
    EXPECT_TRUE(r) << r.error().message;
    if (!r) return {};
    v = std::move(*r);
  }
  auto j = JitProgram::compile(Program{"golden", "", *p}, o, v ? &v->proof : nullptr);
  EXPECT_TRUE(j) << j.error().message;
  if (!j) return {};
  return std::string("# ") + std::string(text.substr(0, text.size() - 1)) + "\n" + masked_listing((*j)->code());
}

TEST(EbpfJitGolden, ContextLoad) {
  // Prologue, the inline stack and fixed-size context checks, the out-of-line slow
  // path, the epilogue, the fault exit and the two stubs.
  ExecOptions o;
  o.ctx_size = 16;
  o.loop_budget = 0;
  expect_golden("jit_ctx_load", jit_listing("ldxdw %r0, [%r1+8]\nadd %r0, 1\nexit\n", o));
}

TEST(EbpfJitGolden, StackAtomicsAndLocalCall) {
  // A frame access needs no check; fetch-or is a cmpxchg loop; a local call saves
  // r6-r9/r10 around a native call; exit returns from a callee by ret.
  ExecOptions o;
  o.loop_budget = 0;
  o.unverified = true;  // compiled without a proof: r1 and r2 are the caller's
  expect_golden("jit_atomic_call",
                jit_listing("stdw [%r10-8], 0\nlock fetch or [%r10-8], %r1\ncall local f\nexit\nf: mov %r0, 1\nexit\n", o));
}

TEST(EbpfJitGolden, DivisionShiftsAndBudget) {
  // Division with its zero and -1 cases, a shift by a register other than rcx, and a
  // backward jump spending the loop budget.
  ExecOptions o;
  o.loop_budget = 1000;
  o.unverified = true;  // compiled without a proof: r1 and r2 are the caller's
  expect_golden("jit_div_shift_loop",
                jit_listing("l: sdiv %r3, %r1\nlsh32 %r2, %r5\njne %r2, 0, l\nexit\n", o));
}

TEST(EbpfJitGolden, LeanPrograms) {
  // A program that cannot fault and calls nothing gets no run state: an empty one is
  // xor and ret; one using r6 and its frame saves rbx and rbp only, keeps r10 16-byte
  // aligned and exits through one epilogue.
  ExecOptions o;
  o.ctx_size = 8;
  expect_golden("jit_lean",
                jit_listing("mov %r0, 0\nexit\n", o) +
                    jit_listing("mov %r6, %r1\nstxdw [%r10-8], %r6\nldxdw %r0, [%r10-8]\njeq %r0, 0, +1\nexit\nmov %r0, 1\nexit\n", o));
}

TEST(EbpfJitGolden, ProvenProgram) {
  // The same kinds of instructions as above, verified first: the context loads are
  // bare movs (no bounds test, no slow path), the loop spends no budget, the division
  // by r3 | 1 is a bare div (no zero test), and with nothing left to fail the code
  // has no fault exit and no run state.
  ExecOptions o;
  o.ctx_kind = CtxKind::tracing;
  o.ctx_size = 16;
  expect_golden("jit_proven",
                jit_listing("ldxdw %r2, [%r1+0]\nldxdw %r3, [%r1+8]\nor %r3, 1\nmov %r0, 0\nmov %r4, 0\n"
                            "l: add %r0, %r2\ndiv %r0, %r3\nadd %r4, 1\njlt %r4, 8, l\nexit\n",
                            o, true));
}

TEST(EbpfJitGolden, ProvenLoopsFused) {
  // bench_ebpf_engines' fnv: each loop head 16-byte aligned; the fill's chunks of 16
  // bytes in 16-bit lanes before its head (psrlw 8: no mask); `mov r4, r3; add r4, 1` is
  // one lea; `mov r5, r10; add r5, -256; add r5, r3` and the store or load through r5
  // after it (r5 dead there) are one access [rbp+rdx-0x100]; mov 0 is an xor; the exit,
  // last, falls into the epilogue.
  ExecOptions o;
  o.ctx_size = 8;
  expect_golden("jit_fused",
                jit_listing("ldxdw %r2, [%r1+0]\nmov %r3, 0\n"
                            "fill: mov %r4, %r3\nadd %r4, 1\nmul %r4, %r2\nrsh %r4, 8\nmov %r5, %r10\n"
                            "add %r5, -256\nadd %r5, %r3\nstxb [%r5+0], %r4\nadd %r3, 1\njlt %r3, 256, fill\n"
                            "lddw %r0, 0xcbf29ce484222325\nlddw %r6, 0x100000001b3\nmov %r3, 0\n"
                            "hash: mov %r5, %r10\nadd %r5, -256\nadd %r5, %r3\nldxb %r4, [%r5+0]\nxor %r0, %r4\n"
                            "mul %r0, %r6\nadd %r3, 1\njlt %r3, 256, hash\nexit\n",
                            o, true));
}

TEST(EbpfJitGolden, ByteFill) {
  // A byte fill with R a constant (its low 16 bits from r11d), K negative, S = 3 (the
  // lanes masked to their low byte before packuswb), the base in r6 and a store offset,
  // closed by jne.
  ExecOptions o;
  o.ctx_size = 8;
  expect_golden("jit_byte_fill",
                jit_listing("mov %r6, %r10\nadd %r6, -512\nmov %r3, 2\n"
                            "l: mov %r4, %r3\nadd %r4, -5\nmul %r4, 0x12345\nrsh %r4, 3\nmov %r5, %r6\n"
                            "add %r5, %r3\nstxb [%r5+7], %r4\nadd %r3, 1\njne %r3, 300, l\nmov %r0, 0\nexit\n",
                            o, true));
}

TEST(EbpfJitGolden, InductionProducts) {
  // (I + K) * R in a loop kept in r9, set before the loop head and stepped where I
  // steps: by R when I steps by 1, by r10 = 4 * R, by a constant beyond 32 bits from
  // r10, by -R counting down; not when a jump also enters the loop at its head. The
  // entry sets no register the program writes before reading.
  ExecOptions o;
  o.ctx_size = 8;
  expect_golden("jit_induction",
                jit_listing("ldxdw %r2, [%r1+0]\nmov %r0, 0\nmov %r3, 5\n"
                            "l: mov %r4, %r3\nadd %r4, 3\nmul %r4, %r2\nadd %r0, %r4\nadd %r3, 4\njlt %r3, 100, l\n"
                            "exit\n",
                            o, true) +
                    jit_listing("mov %r0, 0\nmov %r3, 7\nl: mov %r4, %r3\nmul %r4, 0x7fffffff\nxor %r0, %r4\n"
                                "add %r3, 3\njlt %r3, 300, l\nexit\n",
                                o, true) +
                    jit_listing("ldxdw %r2, [%r1+0]\nmov %r0, 0\nmov %r3, 50\nl: mov %r4, %r3\nadd %r4, -1\n"
                                "mul %r4, %r2\nadd %r3, -1\nxor %r0, %r4\njne %r3, 0, l\nexit\n",
                                o, true) +
                    jit_listing("ldxdw %r1, [%r1+0]\nmov %r0, 0\nmov %r3, 10\njeq %r1, 0, l\nmov %r3, 0\n"
                                "l: mov %r4, %r3\nmul %r4, 5\nadd %r0, %r4\nadd %r3, 1\njlt %r3, 16, l\nexit\n",
                                o, true));
}

TEST(EbpfJitGolden, ProvenDivisionLoop) {
  // The conformance case prime (bench_ebpf_engines' prime): `mov r3, r1; div r3, r2;
  // mul r3, r2; mov r4, r1; sub r4, r3` with r3 dead after it is r4 = r1 % r2, the
  // remainder taken from rdx; r0 is dead at the division (written again before any
  // read), so rax is not saved around it.
  expect_golden("jit_prime",
                jit_listing("mov %r1, 67\nmov %r0, 0x1\nmov %r2, 0x2\njgt %r1, 0x2, +4\nja +10\n"
                            "add %r2, 0x1\nmov %r0, 0x1\njge %r2, %r1, +7\nmov %r3, %r1\ndiv %r3, %r2\n"
                            "mul %r3, %r2\nmov %r4, %r1\nsub %r4, %r3\nmov %r0, 0x0\njne %r4, 0x0, -10\nexit\n",
                            {}, true));
}

}  // namespace
