// Stubs and the tracer's images made from a template (src/arch/x86_64/image.cpp,
// "Templates") are byte for byte what asmjit emits for the same spec at the same base:
// for every shape the tracer uses, over functions whose addresses, counter slots, stubs
// and bases vary (counter slots small enough for a disp8, functions below 4 GiB and
// targets out of rel32 reach among them, where the template does not apply).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "abi/signature.hpp"
#include "arch/arch.hpp"
#include "arch/image.hpp"
#include "arch/x86_64/asm_util.hpp"
#include "ftrace/graph_state.hpp"

using namespace utramp;
namespace testing_hooks = utramp::arch::x86::testing;

namespace {

const arch::ThreadLayout kTls{-0x2000, 0, 0x2000};
constexpr uint64_t kRegister = 0x7f1200701000;
constexpr uint64_t kHooks = 0x7f1200703000;
constexpr uint64_t kFar = 0x7f5600000000;  // out of rel32 reach of the code below

// Function i of a program: where it, its stub and its image are, and its slots. Every
// seventh is below 4 GiB (a non-PIE program's), every eleventh has its image's code
// out of reach of the hooks, the first ones have counter slots that fit in a disp8.
struct Fn {
  uint64_t func, stub, image;
  uint32_t site_slot, image_slot;
};
Fn fn(uint32_t i) {
  const uint64_t program = i % 7 == 0 ? 0x401000 : 0x7f1200001000;
  const uint64_t code = i % 11 == 0 ? kFar - 0x100000 : 0x7f1200300000;
  return {program + 0x40 * i, code + 0x100 * i, code + 0x80000 + 0x400 * i, i, 1000 + 3 * i};
}

arch::StubSpec stub_spec(const Fn& f, bool keep_all) {
  arch::StubSpec s;
  s.site = f.func;
  s.original = f.func + arch::kSiteLen;
  s.counter_slot = f.site_slot;
  s.tls = kTls;
  s.register_fn = kRegister;
  s.preserve_all = keep_all;
  if (keep_all) {
    s.xstate.mode = arch::XStateSave::Mode::xsavec;
    s.xstate.size = 2696;
    s.xstate.mask = 0xe7;
    s.xstate.xinuse = s.xstate.avx = s.xstate.avx512 = s.xstate.kreg64 = true;
  }
  return s;
}

arch::TracerHooks hooks(bool inline_path, bool exit) {
  arch::TracerHooks h;
  h.entry = kHooks;
  h.exit = exit ? kHooks + 0x100 : 0;
  h.entry_general = kHooks + 0x200;
  h.exit_general = exit ? kHooks + 0x300 : 0;
  h.inline_path = inline_path;
  if (inline_path) {
    h.fast = ftrace::detail::inline_layout(0);
    h.fast.tls_state = -0x3000;
    h.fast.tls_in_tracer = -0x2ff8;
  }
  return h;
}

const utramp::abi::Signature& signature(const char* text) {
  static std::vector<std::unique_ptr<utramp::abi::Signature>> kept;
  auto s = utramp::abi::parse_signature(text);
  EXPECT_TRUE(s.ok()) << text;
  kept.push_back(std::make_unique<utramp::abi::Signature>(s.ok() ? *s : utramp::abi::Signature::fallback()));
  return *kept.back();
}

arch::ImageSpec image_spec(const Fn& f, const utramp::abi::Signature& sig, const arch::TracerHooks& h,
                           bool keep_all) {
  const arch::StubSpec ss = stub_spec(f, keep_all);
  testing_hooks::set_no_templates(true);
  auto stub = arch::emit_stub(ss, f.stub);
  testing_hooks::set_no_templates(false);
  EXPECT_TRUE(stub.ok());
  arch::ImageSpec sp;
  sp.sig = &sig;
  sp.func = f.func;
  sp.original = f.func + arch::kSiteLen;
  sp.pass = f.stub + (stub.ok() ? stub->pass : 0);
  sp.exit_fn = f.stub + (stub.ok() ? stub->exit : 0);
  sp.calls_original = h.exit != 0;
  sp.tls = kTls;
  sp.site_slot = f.site_slot;
  sp.image_slot = sp.calls_original ? f.image_slot : UINT32_MAX;
  sp.tracer = h;
  sp.preserve_all = keep_all;
  sp.xstate = ss.xstate;
  return sp;
}

constexpr uint32_t kFunctions = 120;

}  // namespace

TEST(Templates, StubsAreAsmjits) {
  for (bool keep_all : {false, true}) {
    const uint32_t before = testing_hooks::from_template();
    for (uint32_t i = 0; i < kFunctions; ++i) {
      const Fn f = fn(i);
      const arch::StubSpec spec = stub_spec(f, keep_all);
      auto made = arch::emit_stub(spec, f.stub);
      testing_hooks::set_no_templates(true);
      auto emitted = arch::emit_stub(spec, f.stub);
      testing_hooks::set_no_templates(false);
      ASSERT_TRUE(made.ok() && emitted.ok()) << i;
      EXPECT_EQ(made->code, emitted->code) << "stub " << i << (keep_all ? " keeping every register" : "");
      EXPECT_EQ(made->hop, emitted->hop);
      EXPECT_EQ(made->pass, emitted->pass);
      EXPECT_EQ(made->exit, emitted->exit);
      EXPECT_EQ(made->original, emitted->original);
    }
    // Most came from the template (not the ones with small slots, far code or low addresses).
    EXPECT_GT(testing_hooks::from_template() - before, kFunctions / 2);
  }
}

TEST(Templates, TracerImagesAreAsmjits) {
  struct Case {
    const char* sig;
    bool inline_path, exit, keep_all;
  };
  const Case cases[] = {
      {"i32 -> i32", true, true, false},        // function_graph, the inline path
      {"i64,f64,i32 -> i64", true, true, false},
      {"i64,i64,i64,i64,i64,i64,i64,i64 -> void", true, true, false},  // stack arguments copied
      {"i32 -> i32", false, true, false},       // the hooks only
      {"i32 -> i32", true, false, false},       // the function tracer: entries only
      {"i32 -> i32", true, true, true},         // keeping every register
      {"i64,i64,i64,i64,i64,i64,i64 -> i64", false, true, true},
  };
  for (const Case& c : cases) {
    const utramp::abi::Signature& sig = signature(c.sig);
    const arch::TracerHooks h = hooks(c.inline_path, c.exit);
    const uint32_t before = testing_hooks::from_template();
    for (uint32_t i = 0; i < kFunctions; ++i) {
      const Fn f = fn(i);
      const arch::ImageSpec sp = image_spec(f, sig, h, c.keep_all);
      auto made = arch::emit_image(sp, f.image);
      testing_hooks::set_no_templates(true);
      auto emitted = arch::emit_image(sp, f.image);
      testing_hooks::set_no_templates(false);
      ASSERT_TRUE(made.ok() && emitted.ok()) << c.sig << " " << i;
      EXPECT_EQ(made->code, emitted->code) << c.sig << (c.inline_path ? " inline" : " hooks")
                                           << (c.exit ? "" : " entry only") << (c.keep_all ? " kept" : "")
                                           << ": image " << i;
      EXPECT_EQ(made->exits, emitted->exits);
      EXPECT_EQ(made->exit_len, emitted->exit_len);
      EXPECT_EQ(made->exit_push, emitted->exit_push);
    }
    EXPECT_GT(testing_hooks::from_template() - before, kFunctions / 2)
        << c.sig << (c.inline_path ? " inline" : " hooks") << (c.exit ? "" : " entry only") << (c.keep_all ? " kept" : "");
  }
}

// The test hook that fails the n-th emitted instruction still finds every instruction
// of a stub emitted, after a template of its shape exists.
TEST(Templates, FailingEmissionIsStillEmitted) {
  for (uint32_t i = 40; i < 44; ++i) (void)arch::emit_stub(stub_spec(fn(i), false), fn(i).stub);
  testing_hooks::t_fail_emit_at = 1;
  auto s = arch::emit_stub(stub_spec(fn(45), false), fn(45).stub);
  EXPECT_FALSE(s.ok());
  testing_hooks::t_fail_emit_at = 0;
}
