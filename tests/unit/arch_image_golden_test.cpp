// Listing goldens of the trampolines' generated code: the per-site stub and an image of
// each shape, emitted at a fixed base with fixed fake addresses (function, programs,
// hooks, TLS offsets) so that the text is the same on every machine. Each golden
// (tests/unit/golden/codegen/NAME.txt) is the bytes with their disassembly beside them,
// under a header that names the spec and the offsets the emitter reported.
// UTRAMP_UPDATE_GOLDENS=1 rewrites them; a difference fails with a unified diff.
//
// The tracer's images use the real layout of the tracer's state (ftrace::detail::
// inline_layout, from the C++ types) with fixed TLS offsets: a change of that layout
// shows here as a change of the code that depends on it.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "abi/signature.hpp"
#include "arch/arch.hpp"
#include "arch/image.hpp"
#include "ftrace/graph_state.hpp"

#define UTRAMP_GOLDEN_DIR "tests/unit/golden/codegen"
#include "golden.hpp"

using namespace utramp;

namespace {

// Where everything is. The function and its stub are within rel32 reach of the images;
// the stats functions and the far freplace target are not (calls through r11, jumps
// through a literal).
constexpr uint64_t kFunc = 0x7f1200001000;     // the traced function (its site)
constexpr uint64_t kStub = 0x7f1200200000;     // its stub
constexpr uint64_t kImage = 0x7f1200300000;    // the image
constexpr uint64_t kProg = 0x7f1200401000;     // programs: kProg + 0x100 * i
constexpr uint64_t kMisses = 0x7f1200500000;   // their miss counters
constexpr uint64_t kStats = 0x7f1200600000;    // a stats record
constexpr uint64_t kRegister = 0x7f1200701000; // utramp_register_thread
constexpr uint64_t kGuardLeft = 0x7f1200702000;
constexpr uint64_t kHooks = 0x7f1200703000;    // the tracer's hooks: kHooks + 0x100 * i
constexpr uint64_t kFar = 0x7f5600000000;      // out of rel32 reach of everything above
constexpr uint32_t kSiteSlot = 3, kImageSlot = 4;

const arch::ThreadLayout kTls{-0x2000, 0, 0x2000};  // the block pointer; offsets in the block

std::string hexaddr(uint64_t a) { return fmt::format("{:#x}", a); }

utramp::abi::Signature sig(const char* text) {
  auto s = utramp::abi::parse_signature(text);
  EXPECT_TRUE(s.ok()) << text;
  return s.ok() ? *s : utramp::abi::Signature::fallback();
}

arch::StubSpec stub_spec() {
  arch::StubSpec s;
  s.site = kFunc;
  s.original = kFunc + arch::kSiteLen;
  s.counter_slot = kSiteSlot;
  s.tls = kTls;
  s.register_fn = kRegister;
  return s;
}

// How a CPU with AVX-512 (and AVX512BW, and XINUSE) keeps its extended state
// (arch::XStateSave), fixed here; `mode` varies between the goldens of images that keep
// every register. FXSAVE is a CPU whose OS enables no XSAVE: no AVX, moves only.
arch::XStateSave xstate(arch::XStateSave::Mode mode) {
  arch::XStateSave x;
  x.mode = mode;
  if (mode == arch::XStateSave::Mode::fxsave) return x;
  x.size = 2696;
  x.mask = 0xe7;
  x.xinuse = true;
  x.avx = true;
  x.avx512 = true;
  x.kreg64 = true;
  return x;
}

// A relocated-prologue site's stub that keeps every register.
arch::StubSpec kept_stub_spec(arch::XStateSave::Mode mode) {
  arch::StubSpec spec = stub_spec();
  // push rbp; mov rbp, rsp; mov rax, [rip+0x100]: the last one re-targeted.
  spec.prologue = {0x55, 0x48, 0x89, 0xe5, 0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00};
  spec.original = kFunc + spec.prologue.size();
  spec.preserve_all = true;
  spec.xstate = xstate(mode);
  return spec;
}

// The stub's offsets, as emit_stub() reports them for kStub.
arch::StubCode stub_at_base(const arch::StubSpec& spec = stub_spec()) {
  auto s = arch::emit_stub(spec, kStub);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return s.ok() ? *s : arch::StubCode{};
}

arch::ImageProg prog(uint32_t i, bool stats = false) {
  return arch::ImageProg{kProg + 0x100 * i, i, 0x1000 + i, kMisses + 8 * i, stats ? kStats : 0};
}

// An image spec for kFunc, `long f(long, double, int)`, that ends at its stub.
arch::ImageSpec image_spec(bool calls_original) {
  static const utramp::abi::Signature s = sig("i64,f64,i32 -> i64");
  const arch::StubCode stub = stub_at_base();
  arch::ImageSpec sp;
  sp.sig = &s;
  sp.func = kFunc;
  sp.original = kFunc + arch::kSiteLen;
  sp.pass = kStub + stub.pass;
  sp.calls_original = calls_original;
  sp.tls = kTls;
  sp.site_slot = kSiteSlot;
  sp.image_slot = kImageSlot;
  sp.exit_fn = kStub + stub.exit;
  sp.stats_begin = kFar + 0x100;
  sp.stats_end = kFar + 0x200;
  sp.guard_left = kGuardLeft;
  return sp;
}

// The function_graph tracer's hooks, the inline path described by the real layout.
arch::TracerHooks tracer(bool inline_path, uint32_t max_depth = 0) {
  arch::TracerHooks h;
  h.entry = kHooks;
  h.exit = kHooks + 0x100;
  h.entry_general = kHooks + 0x200;
  h.exit_general = kHooks + 0x300;
  h.inline_path = inline_path;
  if (inline_path) {
    h.fast = ftrace::detail::inline_layout(max_depth);
    h.fast.tls_state = -0x3000;  // this process's TLS offsets vary with the link
    h.fast.tls_in_tracer = -0x2ff8;
  }
  return h;
}

std::string listing_of(std::span<const uint8_t> code, uint64_t base) {
  return arch::disassemble(code, base);
}

void expect_image(const std::string& name, const std::string& what, const arch::ImageSpec& sp) {
  auto img = arch::emit_image(sp, kImage);
  ASSERT_TRUE(img.ok()) << name << ": " << img.error().message;
  EXPECT_LE(img->code.size(), arch::image_size_bound(sp)) << name;
  std::string head = fmt::format("# {}\n# signature {}; {} bytes at {}; exits at", what,
                                 sp.sig->describe(), img->code.size(), hexaddr(kImage));
  for (uint32_t e : img->exits) head += fmt::format(" +{:#x}", e);
  head += fmt::format(" ({} bytes each", img->exit_len);
  if (img->exit_push) head += fmt::format(", r11 pushed by +{}", img->exit_push);
  head += ")\n";
  test::expect_golden(name, head + listing_of(img->code, kImage));
}

}  // namespace

TEST(CodegenGolden, Stub) {
  auto s = arch::emit_stub(stub_spec(), kStub);
  ASSERT_TRUE(s.ok()) << s.error().message;
  test::expect_golden(
      "stub", fmt::format("# the stub of a compiler site at {}: counter slot {}\n"
                          "# hop +{:#x}, pass +{:#x}, exit +{:#x}\n",
                          hexaddr(kFunc), kSiteSlot, s->hop, s->pass, s->exit) +
                  listing_of(s->code, kStub));
}

TEST(CodegenGolden, StubRelocatedPrologue) {
  arch::StubSpec spec = stub_spec();
  // push rbp; mov rbp, rsp; mov rax, [rip+0x100]: the last one re-targeted.
  spec.prologue = {0x55, 0x48, 0x89, 0xe5, 0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00};
  spec.original = kFunc + spec.prologue.size();
  auto s = arch::emit_stub(spec, kStub);
  ASSERT_TRUE(s.ok()) << s.error().message;
  test::expect_golden(
      "stub_relocated",
      fmt::format("# the stub of a relocated-prologue site at {} ({} bytes moved)\n"
                  "# hop +{:#x}, pass +{:#x}, original +{:#x}, exit +{:#x}\n",
                  hexaddr(kFunc), spec.prologue.size(), s->hop, s->pass, s->original, s->exit) +
          listing_of(s->code, kStub));
}

TEST(CodegenGolden, FentryOnly) {
  arch::ImageSpec sp = image_spec(false);
  sp.fentry = {prog(0)};
  expect_image("image_fentry", "one fentry program: the image ends at the stub's pass", sp);
}

TEST(CodegenGolden, Fexit) {
  arch::ImageSpec sp = image_spec(true);
  sp.fexit = {prog(0)};
  expect_image("image_fexit", "one fexit program", sp);
}

TEST(CodegenGolden, FmodRet) {
  arch::ImageSpec sp = image_spec(true);
  sp.fmod_ret = {prog(0)};
  expect_image("image_fmod_ret", "one fmod_ret program", sp);
}

TEST(CodegenGolden, FentryFexitFmodRet) {
  arch::ImageSpec sp = image_spec(true);
  sp.fentry = {prog(0, /*stats=*/true)};
  sp.fmod_ret = {prog(1)};
  sp.fexit = {prog(2)};
  sp.store_caller = true;
  sp.store_frame = true;
  expect_image("image_all",
               "fentry (with run-time stats), fmod_ret and fexit; ctx[-4] and ctx[-5] stored", sp);
}

TEST(CodegenGolden, FreplaceThunk) {
  // The site jumps to the replacement directly when it reaches; from a thunk near the
  // site when not.
  auto near = arch::encode_jump_anywhere(kStub, kProg);
  auto far = arch::encode_jump_anywhere(kStub, kFar);
  ASSERT_TRUE(near.ok()) << near.error().message;
  ASSERT_TRUE(far.ok()) << far.error().message;
  test::expect_golden("freplace",
                      fmt::format("# freplace: a jump at {} to {} (in reach)\n", hexaddr(kStub),
                                  hexaddr(kProg)) +
                          listing_of(*near, kStub) +
                          fmt::format("# the thunk at {} to {} (out of reach)\n", hexaddr(kStub),
                                      hexaddr(kFar)) +
                          listing_of(*far, kStub));
}

TEST(CodegenGolden, TracerInline) {
  arch::ImageSpec sp = image_spec(true);
  sp.tracer = tracer(true);
  expect_image("image_tracer_inline", "function_graph tracer, the inline path on", sp);
}

TEST(CodegenGolden, TracerHooks) {
  arch::ImageSpec sp = image_spec(true);
  sp.tracer = tracer(false);
  expect_image("image_tracer_hooks", "function_graph tracer, the inline path off", sp);
}

TEST(CodegenGolden, TracerWithFentry) {
  arch::ImageSpec sp = image_spec(true);
  sp.tracer = tracer(true);
  sp.fentry = {prog(0)};
  expect_image("image_tracer_fentry",
               "function_graph tracer and an fentry program (a general image: hooks only)", sp);
}

// ---- keeping every register (relocated-prologue sites: arch/image.hpp, preserve_all) ----

// An image spec as image_spec()'s, for a relocated prologue whose stub keeps every
// register: the original is the stub's copy of the prologue.
arch::ImageSpec kept_image_spec(bool calls_original, arch::XStateSave::Mode mode) {
  arch::ImageSpec sp = image_spec(calls_original);
  const arch::StubCode stub = stub_at_base(kept_stub_spec(mode));
  sp.original = kStub + stub.original;
  sp.pass = kStub + stub.pass;
  sp.exit_fn = kStub + stub.exit;
  sp.preserve_all = true;
  sp.xstate = xstate(mode);
  return sp;
}

TEST(CodegenGolden, StubKeepingEverything) {
  const arch::StubSpec spec = kept_stub_spec(arch::XStateSave::Mode::xsavec);
  auto s = arch::emit_stub(spec, kStub);
  ASSERT_TRUE(s.ok()) << s.error().message;
  test::expect_golden(
      "stub_kept",
      fmt::format("# the stub of a relocated-prologue site at {} ({} bytes moved), keeping\n"
                  "# every register: moves, or XSAVEC ({} bytes, components {:#x}) when\n"
                  "# XINUSE shows state the moves do not keep\n"
                  "# hop +{:#x}, pass +{:#x}, original +{:#x}, exit +{:#x}\n",
                  hexaddr(kFunc), spec.prologue.size(), spec.xstate.size, spec.xstate.mask,
                  s->hop, s->pass, s->original, s->exit) +
          listing_of(s->code, kStub));
}

TEST(CodegenGolden, KeptFentryOnly) {
  arch::ImageSpec sp = kept_image_spec(false, arch::XStateSave::Mode::xsavec);
  sp.fentry = {prog(0)};
  expect_image("image_kept_fentry",
               "one fentry program, keeping every register (moves, or XSAVEC as XINUSE "
               "says): ends at the stub's pass", sp);
}

TEST(CodegenGolden, KeptLargeArea) {
  arch::ImageSpec sp = kept_image_spec(false, arch::XStateSave::Mode::xsave);
  sp.xstate.size = 11008;  // as a standard-form area with AMX tiles would be
  sp.fentry = {prog(0)};
  expect_image("image_kept_large_area",
               "one fentry program, keeping every register in an 11008-byte XSAVE area: "
               "the frame's drop touches each page on the way (a guard page is one page)",
               sp);
}

TEST(CodegenGolden, KeptFentryFexitFmodRet) {
  arch::ImageSpec sp = kept_image_spec(true, arch::XStateSave::Mode::xsave);
  sp.fentry = {prog(0, /*stats=*/true)};
  sp.fmod_ret = {prog(1)};
  sp.fexit = {prog(2)};
  expect_image("image_kept_all",
               "fentry (with run-time stats), fmod_ret and fexit, keeping every register "
               "(moves, or XSAVE in standard form as XINUSE says)",
               sp);
}

TEST(CodegenGolden, KeptFmodRetOnly) {
  arch::ImageSpec sp = kept_image_spec(true, arch::XStateSave::Mode::fxsave);
  sp.fmod_ret = {prog(0)};
  expect_image("image_kept_fmod_ret",
               "one fmod_ret program, keeping every register (no XSAVE: moves, which change "
               "no general register); nothing runs after the body, which leaves at once",
               sp);
}

TEST(CodegenGolden, KeptTracerInline) {
  arch::ImageSpec sp = kept_image_spec(true, arch::XStateSave::Mode::xsavec);
  sp.xstate.xinuse = false;  // a CPU that cannot say what is in use: XSAVEC always
  sp.tracer = tracer(true);
  expect_image("image_kept_tracer_inline",
               "function_graph tracer, the inline path on, keeping every register (XSAVEC, "
               "no XINUSE, around the general code only)",
               sp);
}

TEST(CodegenGolden, KeptTracerHooks) {
  arch::ImageSpec sp = kept_image_spec(true, arch::XStateSave::Mode::fxsave);
  sp.tracer = tracer(false);
  expect_image("image_kept_tracer_hooks",
               "function_graph tracer, the inline path off, keeping every register (no "
               "XSAVE: moves around the general code only)",
               sp);
}
