// Differential test: the interpreter and the JIT on generated programs must agree on r0,
// on every byte of memory the programs write, and on every fault (kind and instruction).
//
// Programs are generated from a seed (UTRAMP_EBPF_SEED overrides the default; a failure
// prints the seed, the program's number and its listing) as assembler text:
//
//   prologue  mov r9, r1 (the memory page: r9 is never a destination); the top 256
//             bytes of the frame and r0-r8 set to random values
//   body      random items: ALU32/ALU64 with K and X forms and edge-case immediates,
//             byte swaps, movsx, signed and unsigned division by anything (zero, -1,
//             INT_MIN), lddw, loads/stores/atomics on the page and the initialised
//             frame (now and then misaligned or out of bounds: faults and zero loads),
//             forward conditional jumps (JMP and JMP32), counted loops, helper calls,
//             local calls into generated functions
//   epilogue  r0-r8 stored to the page, folded into r0, exit
//
// The page sits between two PROT_NONE pages, so an out-of-bounds load reads a guard page
// (0 on both engines) and never memory whose contents differ between the two runs.
// Bounded in time: stops after kPrograms programs or kSeconds seconds.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include "ebpf/asm.hpp"
#include "ebpf/engine.hpp"

namespace {

using namespace utramp;
using namespace utramp::ebpf;

constexpr int kPrograms = 10000;
constexpr double kSeconds = 6.0;
constexpr int kPage = 4096;

uint64_t helper_mix(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e) {
  return (a * 0x9e3779b97f4a7c15ull) ^ (b << 7) ^ (c >> 3) ^ (d * 31) ^ ~e;
}

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}

  std::string program(bool& small_budget);

 private:
  uint64_t u(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }
  bool chance(int percent) { return static_cast<int>(u(100)) < percent; }
  std::string reg() { return fmt::format("%r{}", u(9)); }  // r0..r8
  int64_t imm32() {
    static const int64_t edge[] = {0, 1, -1, 2, 7, 8, 31, 32, 33, 63, 64, 65, 0x7fffffff, INT32_MIN,
                                   0xff, 0xffff, -0x80, 16, 1000, -1000};
    if (chance(40)) return edge[u(std::size(edge))];
    return static_cast<int32_t>(rng_());
  }
  std::string alu();
  std::string mem_item(bool stack_ok);
  std::string atomic_item(bool stack_ok);
  std::string helper_item();
  std::string loop_item();
  // Items for a function body; `calls` may name local functions fN with N > `self`.
  std::vector<std::string> items(int count, int self, int nfuncs, bool main);

  std::mt19937_64 rng_;
};

std::string Gen::alu() {
  static const char* ops[] = {"add", "sub", "mul", "div", "sdiv", "or", "and", "lsh", "rsh",
                              "mod", "smod", "xor", "mov", "arsh"};
  const int kind = static_cast<int>(u(100));
  const std::string d = reg();
  if (kind < 6) {
    static const char* un[] = {"neg", "neg32", "le16", "le32", "le64", "be16", "be32", "be64", "bswap16", "bswap32", "bswap64"};
    return fmt::format("{} {}\n", un[u(std::size(un))], d);
  }
  if (kind < 10) {
    static const char* sx[] = {"movsx864", "movsx1664", "movsx3264", "movsx832", "movsx1632"};
    return fmt::format("{} {}, {}\n", sx[u(std::size(sx))], d, reg());
  }
  if (kind < 13) return fmt::format("lddw {}, {:#x}\n", d, rng_());
  const std::string w = chance(50) ? "32" : "";
  const char* o = ops[u(std::size(ops))];
  if (chance(50)) return fmt::format("{}{} {}, {}\n", o, w, d, reg());
  return fmt::format("{}{} {}, {}\n", o, w, d, imm32());
}

// A load or store on the page (r9) or the initialised top of the main frame (r10;
// functions' frames are not initialised, so they use the page only).
std::string Gen::mem_item(bool stack_ok) {
  static const char* sz[] = {"b", "h", "w", "dw"};
  const int s = static_cast<int>(u(4));
  const int bytes = 1 << s;
  const bool stack = stack_ok && chance(40);
  int64_t off;
  if (stack) off = -static_cast<int64_t>(1 + u(256 / bytes)) * bytes + (chance(10) ? static_cast<int64_t>(u(bytes)) : 0);
  else if (chance(3)) off = static_cast<int64_t>(u(kPage + 128)) - 64;  // maybe out of bounds
  else off = static_cast<int64_t>(u(kPage - 72 - bytes));  // the page's end holds the epilogue's stores
  if (stack && off + bytes > 0) off = -bytes;
  const std::string base = stack ? "%r10" : "%r9";
  const std::string m = fmt::format("[{}{:+d}]", base, off);
  switch (u(4)) {
    case 0: return fmt::format("ldx{} {}, {}\n", sz[s], reg(), m);
    case 1: return s < 3 ? fmt::format("ldxs{} {}, {}\n", sz[s], reg(), m) : fmt::format("ldxdw {}, {}\n", reg(), m);
    case 2:
      return fmt::format("st{} {}, {}\n", sz[s], m, imm32());
    default: return fmt::format("stx{} {}, {}\n", sz[s], m, reg());
  }
}

std::string Gen::atomic_item(bool stack_ok) {
  static const char* ops[] = {"add", "or", "and", "xor", "fetch add", "fetch or", "fetch and",
                              "fetch xor", "xchg", "cmpxchg"};
  const bool w64 = chance(50);
  const int bytes = w64 ? 8 : 4;
  const bool stack = stack_ok && chance(50);
  int64_t off = stack ? -static_cast<int64_t>(1 + u(256 / bytes)) * bytes
                      : static_cast<int64_t>(u((kPage - 72) / bytes)) * bytes;
  if (chance(5)) off += 2;  // misaligned: a fault on both
  return fmt::format("lock {}{} [{}{:+d}], {}\n", ops[u(std::size(ops))], w64 ? "" : "32",
                     stack ? "%r10" : "%r9", off, reg());
}

// A helper call leaves r1-r5 undefined (the JIT's are the C function's leftovers):
// they are set again right after.
std::string Gen::helper_item() {
  std::string s = "call 1\n";
  for (int r = 1; r <= 5; ++r) s += fmt::format("lddw %r{}, {:#x}\n", r, rng_());
  return s;
}

// mov rC, N; L: <items not writing rC>; sub rC, 1; jne rC, 0, L
std::string Gen::loop_item() {
  static int next = 0;
  const int c = static_cast<int>(u(9));
  std::string s = fmt::format("mov %r{}, {}\nLOOP{}:\n", c, 1 + u(6), next);
  const int n = 1 + static_cast<int>(u(4));
  for (int k = 0; k < n; ++k) {
    const std::string a = chance(70) ? alu() : mem_item(true);
    // Nothing in the body may write the counter: drop items whose destination it is.
    const size_t sp = a.find(' ');
    const std::string first = a.substr(sp + 1, a.find_first_of(",\n", sp) - sp - 1);
    if (first != fmt::format("%r{}", c)) s += a;
  }
  s += fmt::format("sub %r{}, 1\njne %r{}, 0, LOOP{}\n", c, c, next);
  ++next;
  return s;
}

std::vector<std::string> Gen::items(int count, int self, int nfuncs, bool main) {
  std::vector<std::string> out;
  for (int k = 0; k < count; ++k) {
    const int kind = static_cast<int>(u(100));
    if (kind < 50) out.push_back(alu());
    else if (kind < 70) out.push_back(mem_item(main));
    else if (kind < 78) out.push_back(atomic_item(main));
    else if (kind < 82) out.push_back(helper_item());
    else if (kind < 86 && main) out.push_back(loop_item());
    else if (kind < 90 && self + 1 < nfuncs) out.push_back(fmt::format("call local F{}\n", self + 1 + u(nfuncs - self - 1)));
    else out.push_back("JUMP");  // a forward conditional jump, resolved below
  }
  return out;
}

std::string Gen::program(bool& small_budget) {
  static const char* jops[] = {"jeq", "jne", "jgt", "jge", "jlt", "jle", "jset", "jsgt", "jsge", "jslt", "jsle"};
  const int nfuncs = static_cast<int>(u(4));  // F0..F(n-1), called from main as "self = -1"
  small_budget = chance(10);
  std::string text = "mov %r9, %r1\n";
  for (int k = 1; k <= 32; ++k) text += fmt::format("stdw [%r10-{}], {}\n", 8 * k, imm32());
  for (int r = 0; r <= 8; ++r) text += fmt::format("lddw %r{}, {:#x}\n", r, rng_());
  auto render = [&](const std::vector<std::string>& body, const std::string& prefix, const std::string& end) {
    std::string s;
    // Each JUMP goes forward to a later item or to the end.
    std::vector<std::vector<std::string>> labels_before(body.size() + 1);
    std::vector<std::string> jumps(body.size());
    for (size_t k = 0; k < body.size(); ++k) {
      if (body[k] != "JUMP") continue;
      const size_t t = k + 1 + u(body.size() - k);
      const std::string name = fmt::format("{}J{}", prefix, k);
      labels_before[t].push_back(name);
      const std::string w = chance(40) ? "32" : "";
      const std::string rhs = chance(50) ? reg() : fmt::format("{}", imm32());
      jumps[k] = fmt::format("{}{} {}, {}, {}\n", jops[u(std::size(jops))], w, reg(), rhs, name);
    }
    for (size_t k = 0; k <= body.size(); ++k) {
      for (const auto& l : labels_before[k]) s += l + ":\n";
      if (k == body.size()) break;
      s += body[k] == "JUMP" ? jumps[k] : body[k];
    }
    return s + end;
  };
  text += render(items(10 + static_cast<int>(u(60)), -1, nfuncs, true), "M", "");
  for (int r = 0; r <= 8; ++r) text += fmt::format("stxdw [%r9+{}], %r{}\n", kPage - 72 + 8 * r, r);
  for (int r = 1; r <= 8; ++r) text += fmt::format("xor %r0, %r{}\n", r);
  text += "exit\n";
  for (int f = 0; f < nfuncs; ++f)
    text += fmt::format("F{}:\n", f) + render(items(3 + static_cast<int>(u(15)), f, nfuncs, false),
                                              fmt::format("F{}_", f), "exit\n");
  return text;
}

struct Page {
  Page() {
    base = static_cast<uint8_t*>(mmap(nullptr, 3 * kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    mprotect(base + kPage, kPage, PROT_READ | PROT_WRITE);
  }
  ~Page() { munmap(base, 3 * kPage); }
  uint8_t* mem() { return base + kPage; }
  uint8_t* base;
};

uint64_t seed_from_env() {
  if (const char* s = std::getenv("UTRAMP_EBPF_SEED")) return std::strtoull(s, nullptr, 0);
  return 0x5eed2024;
}

TEST(EbpfDifferential, InterpreterAndJitAgree) {
  HelperTable helpers;
  ASSERT_TRUE(helpers.add(1, "mix", &helper_mix));
  const uint64_t seed = seed_from_env();
  Gen gen(seed);
  Page a, b;
  std::mt19937_64 fill(seed ^ 0xf111);
  const auto start = std::chrono::steady_clock::now();
  int n = 0, faulted = 0, budget_faults = 0;
  for (; n < kPrograms; ++n) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > kSeconds) break;
    bool small_budget = false;
    const std::string text = gen.program(small_budget);
    auto prog = assemble(text);
    ASSERT_TRUE(prog) << "seed " << seed << " program " << n << ": " << prog.error().message << "\n" << text;
    ExecOptions o;
    o.helpers = &helpers;
    o.ctx_writable = true;  // the page is the context
    // The programs fault on purpose (out of bounds, misaligned, loops over budget):
    // this compares the engines' run-time checks (verifier_fuzz.cpp tests proven code).
    o.unverified = true;
    o.loop_budget = small_budget ? 1 + (n % 16) : kDefaultLoopBudget;
    auto ie = load(Program{"gen", "", *prog}, o, EngineKind::interpreter);
    ASSERT_TRUE(ie) << "seed " << seed << " program " << n << ": " << ie.error().message << "\n" << text;
    auto je = load(Program{"gen", "", *prog}, o, EngineKind::jit);
    ASSERT_TRUE(je) << je.error().message;
    for (int k = 0; k < kPage; k += 8) {
      const uint64_t v = fill();
      std::memcpy(a.mem() + k, &v, 8);
    }
    std::memcpy(b.mem(), a.mem(), kPage);
    RunStatus si, sj;
    const uint64_t ri = (*ie)->run(a.mem(), kPage, &si);
    const uint64_t rj = (*je)->run(b.mem(), kPage, &sj);
    const std::string where = fmt::format("seed {:#x} program {} (UTRAMP_EBPF_SEED={:#x})\n{}", seed, n, seed,
                                          disassemble(*prog));
    ASSERT_EQ(si.faults.load(), sj.faults.load()) << where << "interpreter: "
                                                  << describe_fault(*prog, si.kind(), si.insn(), si.addr())
                                                  << "\njit: " << describe_fault(*prog, sj.kind(), sj.insn(), sj.addr());
    if (si.faults.load()) {
      if (std::getenv("UTRAMP_EBPF_VERBOSE"))
        std::printf("program %d: %s\n", n, describe_fault(*prog, si.kind(), si.insn(), si.addr()).c_str());
      ++faulted;
      budget_faults += si.kind() == FaultKind::loop_budget;
      ASSERT_EQ(si.kind(), sj.kind()) << where;
      ASSERT_EQ(si.insn(), sj.insn()) << where;
    }
    ASSERT_EQ(ri, rj) << where;
    for (int k = 0; k < kPage; ++k)
      ASSERT_EQ(a.mem()[k], b.mem()[k]) << "memory differs at offset " << k << "\n" << where;
  }
  std::printf("[ differential ] %d programs agree (%d faulted on both, %d of them on the loop budget)\n", n,
              faulted, budget_faults);
  EXPECT_GE(n, 200) << "too few programs in the time given";
}

}  // namespace
