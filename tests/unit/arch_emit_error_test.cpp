// Encoding failures in generated code are reported, never dropped: asmjit's first error
// is kept (x86::StickyError) and assemble() returns it, naming what was being emitted
// and the instruction. Checked on the handler itself, on real operands asmjit cannot
// encode (a TLS offset beyond ±2 GiB), and, through the test hook that fails the n-th
// instruction, at every instruction of every emitter family: sites, jumps, the counting
// stub, the trampoline stub and images of each shape, probe detours and the eBPF JIT.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "abi/signature.hpp"
#include "arch/arch.hpp"
#include "arch/bpf_jit.hpp"
#include "arch/image.hpp"
#include "arch/probe.hpp"
#include "arch/x86_64/asm_util.hpp"
#include "arch_test_util.hpp"
#include "ebpf/asm.hpp"
#include "ftrace/graph_state.hpp"

using namespace utramp;
namespace ax = asmjit::x86;

namespace {

constexpr uint64_t kFunc = 0x7f1200001000;
constexpr uint64_t kStub = 0x7f1200200000;
constexpr uint64_t kImage = 0x7f1200300000;
constexpr uint64_t kFar = 0x7f5600000000;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(EmitError, FirstErrorIsReportedWithWhatAndInstruction) {
  auto code = arch::x86::assemble(0x401000, "a test sequence", [](ax::Assembler& a) {
    a.nop();
    a.mov(ax::eax, ax::rcx);  // no such form: operand sizes differ
    a.nop();
    a.add(ax::ax, ax::rdx);  // a second error: not the one reported
    a.ret();
  });
  ASSERT_FALSE(code.ok());
  const std::string& m = code.error().message;
  EXPECT_TRUE(has(m, "cannot emit a test sequence: asmjit: ")) << m;
  EXPECT_TRUE(has(m, "mov eax, rcx")) << m;  // the instruction, as asmjit formats it
  EXPECT_FALSE(has(m, "add")) << m;
  EXPECT_EQ(code.error().code, Errc::unsupported);
}

TEST(EmitError, NoErrorNoChange) {
  auto code = arch::x86::assemble(0x401000, "a test sequence", [](ax::Assembler& a) {
    a.nop();
    a.ret();
  });
  ASSERT_TRUE(code.ok()) << code.error().message;
  EXPECT_EQ(code->size(), 2u);
}

TEST(EmitError, LabelErrorsAreReported) {
  auto code = arch::x86::assemble(0x401000, "a test sequence", [](ax::Assembler& a) {
    asmjit::Label l = a.newLabel();
    a.bind(l);
    a.nop();
    a.bind(l);  // bound twice
  });
  ASSERT_FALSE(code.ok());
  EXPECT_TRUE(has(code.error().message, "cannot emit a test sequence")) << code.error().message;
}

arch::StubSpec stub_spec(arch::ThreadLayout tls) {
  arch::StubSpec s;
  s.site = kFunc;
  s.original = kFunc + arch::kSiteLen;
  s.counter_slot = 3;
  s.tls = tls;
  s.register_fn = kStub + 0x10000;
  return s;
}

// A TLS offset no fs-relative operand can hold (disp32): asmjit refuses the
// instruction, and the stub and the image say so instead of leaving it out.
TEST(EmitError, TlsOffsetOutOfRange) {
  const arch::ThreadLayout huge{int64_t{1} << 40, 0, 0x2000};
  auto stub = arch::emit_stub(stub_spec(huge), kStub);
  ASSERT_FALSE(stub.ok());
  EXPECT_TRUE(has(stub.error().message, "cannot emit the stub of the site at 0x7f1200001000"))
      << stub.error().message;
  EXPECT_TRUE(has(stub.error().message, "mov")) << stub.error().message;

  const utramp::abi::Signature sig = utramp::abi::Signature::fallback();
  arch::ImageSpec sp;
  sp.sig = &sig;
  sp.func = kFunc;
  sp.original = kFunc + arch::kSiteLen;
  sp.pass = kStub + 0x20;
  sp.calls_original = true;
  sp.tls = huge;
  sp.exit_fn = kStub + 0x40;
  sp.fexit = {arch::ImageProg{kStub + 0x30000, 0, 0, kStub + 0x40000, 0}};
  auto img = arch::emit_image(sp, kImage);
  ASSERT_FALSE(img.ok());
  EXPECT_TRUE(has(img.error().message, "cannot emit the image of 0x7f1200001000"))
      << img.error().message;
}

// Fails each instruction of `emit` in turn (the hook), expecting a reported error that
// names `what`, until the emitter runs out of instructions and succeeds (the hook not
// reached). Returns the number of instructions seen.
uint32_t fail_each(const std::string& what, const std::function<Result<size_t>()>& emit) {
  uint32_t n = 1;
  for (;; ++n) {
    arch::x86::testing::t_fail_emit_at = n;
    Result<size_t> r = emit();
    const uint32_t left = arch::x86::testing::t_fail_emit_at;
    arch::x86::testing::t_fail_emit_at = 0;
    if (r.ok()) {
      EXPECT_NE(left, 0u) << what << ": instruction " << n << " failed and was not reported";
      break;
    }
    EXPECT_EQ(left, 0u) << what << ": failed before instruction " << n << ": " << r.error().message;
    const std::string& m = r.error().message;
    EXPECT_TRUE(has(m, "cannot emit " + what)) << "instruction " << n << ": " << m;
    EXPECT_TRUE(has(m, "failed by a test")) << "instruction " << n << ": " << m;
    if (n > 5000) {
      ADD_FAILURE() << what << ": never succeeds";
      break;
    }
  }
  EXPECT_GT(n, 1u) << what << ": emitted nothing";
  return n - 1;
}

TEST(EmitError, EverySiteAndJumpInstruction) {
  fail_each("call at 0x7f1200001000", [] {
    auto r = arch::encode_call(kFunc, kStub);
    if (!r) return Result<size_t>(std::move(r).error());
    return Result<size_t>(r->size());
  });
  fail_each("jmp at 0x7f1200001000", [] {
    auto r = arch::encode_jmp(kFunc, kStub);
    if (!r) return Result<size_t>(std::move(r).error());
    return Result<size_t>(r->size());
  });
  fail_each("an absolute jmp at 0x7f1200001000", [] {
    auto r = arch::encode_jump_anywhere(kFunc, kFar);
    if (!r) return Result<size_t>(std::move(r).error());
    return Result<size_t>(r->size());
  });
  for (uint64_t counter : {kStub + 0x1000, kFar}) {
    fail_each("the counting stub at 0x7f1200200000", [counter] {
      auto r = arch::emit_counting_stub(kStub, counter);
      if (!r) return Result<size_t>(std::move(r).error());
      return Result<size_t>(r->size());
    });
  }
}

TEST(EmitError, EveryStubInstruction) {
  const arch::ThreadLayout tls{-0x2000, 0, 0x2000};
  arch::StubSpec plain = stub_spec(tls);
  arch::StubSpec relocated = stub_spec(tls);
  relocated.prologue = {0x55, 0x48, 0x89, 0xe5, 0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00};
  for (const arch::StubSpec* spec : {&plain, &relocated}) {
    const uint32_t n = fail_each("the stub of the site at 0x7f1200001000", [spec] {
      auto r = arch::emit_stub(*spec, kStub);
      if (!r) return Result<size_t>(std::move(r).error());
      return Result<size_t>(r->code.size());
    });
    EXPECT_GT(n, 20u);
  }
}

TEST(EmitError, EveryImageInstruction) {
  const utramp::abi::Signature sigs[] = {*utramp::abi::parse_signature("i64,f64,i32 -> i64"),
                                 utramp::abi::Signature::fallback(),
                                 *utramp::abi::parse_signature("m24,f80,... -> f80")};
  for (const utramp::abi::Signature& sig : sigs) {
    for (int shape = 0; shape < 5; ++shape) {
      SCOPED_TRACE(sig.describe() + " shape " + std::to_string(shape));
      arch::ImageSpec sp;
      sp.sig = &sig;
      sp.func = kFunc;
      sp.original = kFunc + arch::kSiteLen;
      sp.pass = kStub + 0x20;
      sp.tls = {-0x2000, -0x1f00, -0x1800};
      sp.exit_fn = kStub + 0x40;
      sp.stats_begin = kFar;
      sp.stats_end = kFar + 0x100;
      sp.guard_left = kStub + 0x50000;
      const arch::ImageProg p{kStub + 0x30000, 1, 0x1234, kStub + 0x40000, kStub + 0x48000};
      arch::TracerHooks tracer;
      tracer.entry = kStub + 0x60000;
      tracer.exit = kStub + 0x60100;
      tracer.entry_general = kStub + 0x60200;
      tracer.exit_general = kStub + 0x60300;
      switch (shape) {
        case 0: sp.fentry = {p}; break;
        case 1: sp.calls_original = true; sp.fentry = sp.fmod_ret = sp.fexit = {p}; break;
        case 2: sp.calls_original = true; sp.tracer = tracer; break;
        case 3:
          sp.calls_original = true;
          sp.tracer = tracer;
          sp.tracer.inline_path = true;
          sp.tracer.fast = ftrace::detail::inline_layout(0);
          break;
        case 4:
          sp.calls_original = true;
          sp.tracer = tracer;
          sp.fexit = {p};
          break;
      }
      const std::string what =
          shape == 2 || shape == 3 ? "the tracer's image of 0x7f1200001000" : "the image of 0x7f1200001000";
      fail_each(what, [&sp] {
        auto r = arch::emit_image(sp, kImage);
        if (!r) return Result<size_t>(std::move(r).error());
        return Result<size_t>(r->code.size());
      });
    }
  }
}

TEST(EmitError, EveryDetourInstruction) {
  constexpr uint64_t kAt = 0x40000000;
  for (const char* window : {"69 c7 39 30 00 00 83 c0 07 c3", "e8 00 10 00 00 c3 90 90 90 90"}) {
    SCOPED_TRACE(window);
    auto w = arch::plan_jump_window(arch::test::unhex(window), kAt);
    ASSERT_TRUE(w.ok()) << w.error().message;
    arch::DetourSpec spec;
    spec.addr = kAt;
    spec.window = *w;
    spec.site = 0x1111222233334444;
    spec.dispatch = kAt + 0x200000;
    spec.redirect_trap = 0x7f0000001000;
    fail_each("the detour of the probe at 0x40000000", [&spec] {
      auto r = arch::emit_detour(spec, kAt + 0x100000);
      if (!r) return Result<size_t>(std::move(r).error());
      return Result<size_t>(r->size());
    });
  }
}

TEST(EmitError, EveryBpfJitInstruction) {
  // A lean program, and one with checked memory accesses, a helper call and a local call.
  const char* programs[] = {
      "mov %r0, 1\nadd %r0, %r1\nexit",
      "ldxdw %r2, [%r1+8]\nstxdw [%r10-8], %r2\nmov %r1, %r10\ncall 1\ncall local local1\nexit\n"
      "local1:\nmov %r0, 2\nexit",
  };
  static const uint64_t helpers[2] = {0, 0x7f1200900000};
  for (const char* text : programs) {
    SCOPED_TRACE(text);
    auto insns = ebpf::assemble(text);
    ASSERT_TRUE(insns.ok()) << insns.error().message;
    arch::BpfJitSpec spec;
    spec.insns = *insns;
    spec.helpers = helpers;
    spec.helper_count = 2;
    spec.ctx_size = 16;
    const std::string what = "the code of a " + std::to_string(insns->size()) + "-instruction eBPF program";
    fail_each(what, [&spec] {
      auto r = arch::emit_bpf(spec, 0x7f1200800000);
      if (!r) return Result<size_t>(std::move(r).error());
      return Result<size_t>(r->code.size());
    });
  }
}

}  // namespace
