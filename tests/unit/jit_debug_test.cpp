// Generated images seen by the C++ unwinder, perf and gdb (src/arch/jit_debug.hpp).
//
// Each test builds a real image with asmjit in executable memory next to this binary's
// functions, the layout every utramp image has:
//
//   one exit:                 two exits (arg != 0 takes the first):
//     push rbp                  push rbp
//     mov  rbp, rsp             mov  rbp, rsp
//     call a                    test edi, edi
//     leave                     jz   .second
//     ret                       call a
//                               leave              <- exit 1, body goes on after its ret
//                               ret
//                             .second:
//                               call b
//                               leave              <- exit 2
//                               ret
//
// The image takes an int in edi and returns the callee's eax: rsp is 16-aligned after
// push rbp, so the calls need no padding.
#include <asmjit/x86.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>
#include <unwind.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "arch/arch.hpp"
#include "arch/jit_debug.hpp"
#include "common/hex.hpp"
#include "os/exec_memory.hpp"

using namespace utramp;

// GDB's JIT descriptor (GDB manual, "JIT Compilation Interface"), defined by libutramp.
// Looked up with dlsym in the runtime library itself, never declared extern: a reference from
// this PIE would copy-relocate it into the executable, and gdb, which prefers the main
// program's copy of a data symbol, would then read a copy libutramp (linked
// -Bsymbolic) never writes.
extern "C" {
struct jit_code_entry {
  jit_code_entry* next_entry;
  jit_code_entry* prev_entry;
  const char* symfile_addr;
  uint64_t symfile_size;
};
struct jit_descriptor {
  uint32_t version;
  uint32_t action_flag;
  jit_code_entry* relevant_entry;
  jit_code_entry* first_entry;
};

// libgcc_s: the FDE covering `pc`, or null (unwind-dw2-fde.h, not installed).
struct dwarf_eh_bases {
  void* tbase;
  void* dbase;
  void* func;
};
const void* _Unwind_Find_FDE(void* pc, dwarf_eh_bases* bases);
}

namespace {
jit_descriptor& gdb_descriptor() {
  static jit_descriptor* d = [] {
    void* lib = dlopen("libutramp-internal.so", RTLD_NOW | RTLD_NOLOAD);
    void* sym = lib ? dlsym(lib, "__jit_debug_descriptor") : nullptr;
    if (!sym) std::abort();
    return static_cast<jit_descriptor*>(sym);
  }();
  return *d;
}
}  // namespace

// Functions the images call and are called from. Exported (the binary links with
// -rdynamic) so that dladdr() and gdb name them; noinline and kept out of tail calls so
// that each is a frame of its own.
extern "C" {

__attribute__((noinline)) int utramp_jd_call_through(int (*image)(int), int arg) {
  int r = image(arg);
  asm volatile("" : "+r"(r));  // no tail call: this frame must stay on the stack
  return r;
}

__attribute__((noinline)) int utramp_jd_leaf(int x) {
  asm volatile("" ::: "memory");
  return x + 1;
}

__attribute__((noinline)) int utramp_jd_throw(int x) {
  throw std::runtime_error(fmt::format("thrown with {}", x));
}

constexpr int kMaxFrames = 64;
void* g_bt[kMaxFrames];
int g_bt_n = 0;

__attribute__((noinline)) int utramp_jd_backtrace(int x) {
  g_bt_n = backtrace(g_bt, kMaxFrames);
  asm volatile("" ::: "memory");
  return x + 3;
}

__attribute__((noinline)) int utramp_jd_gdb_stop(int x) {
  asm volatile("" ::: "memory");
  return x + 2;
}

}  // extern "C"

namespace {

uint64_t addr_of(int (*f)(int)) { return reinterpret_cast<uint64_t>(f); }

struct TestImage {
  os::ExecBlock block;
  arch::ImageFrame frame;
  std::vector<uint32_t> insn_offsets;  // every instruction start
  int (*fn)(int) = nullptr;
  uint64_t end() const { return frame.start + frame.size; }
  bool contains(uint64_t pc) const { return pc >= frame.start && pc < end(); }
};

// Builds the image of the file comment: `b` == 0 gives the one-exit form.
TestImage make_image(int (*a)(int), int (*b)(int) = nullptr) {
  namespace x86 = asmjit::x86;
  TestImage img;
  const auto w = arch::rel32_window(addr_of(a));
  auto block = os::ExecArena::instance().allocate(64, w.lo, w.hi);
  EXPECT_TRUE(block.ok()) << block.error().message;
  if (!block) return img;
  img.block = *block;

  asmjit::CodeHolder code;
  code.init(asmjit::Environment::host(), img.block.addr);
  x86::Assembler as(&code);
  auto mark = [&] { img.insn_offsets.push_back(static_cast<uint32_t>(as.offset())); };
  auto exit = [&] {
    mark();
    img.frame.exit_offsets.push_back(static_cast<uint32_t>(as.offset()));
    as.leave();
    mark();
    as.ret();
  };
  mark();
  as.push(x86::rbp);
  mark();
  as.mov(x86::rbp, x86::rsp);
  asmjit::Label second = as.newLabel();
  if (b) {
    mark();
    as.test(x86::edi, x86::edi);
    mark();
    as.jz(second);
  }
  mark();
  as.call(asmjit::Imm(addr_of(a)));
  exit();
  if (b) {
    as.bind(second);
    mark();
    as.call(asmjit::Imm(addr_of(b)));
    exit();
  }
  EXPECT_EQ(code.flatten(), asmjit::kErrorOk);
  EXPECT_EQ(code.resolveUnresolvedLinks(), asmjit::kErrorOk);
  EXPECT_EQ(code.relocateToBase(img.block.addr), asmjit::kErrorOk);
  std::vector<uint8_t> bytes(code.codeSize());
  EXPECT_EQ(code.copyFlattenedData(bytes.data(), bytes.size()), asmjit::kErrorOk);
  EXPECT_LE(bytes.size(), img.block.size);
  auto wr = os::ExecArena::instance().write(img.block, 0, bytes);
  EXPECT_TRUE(wr.ok()) << wr.error().message;
  img.frame.start = img.block.addr;
  img.frame.size = bytes.size();
  img.fn = reinterpret_cast<int (*)(int)>(img.block.addr);
  return img;
}

void free_image(TestImage& img) {
  if (img.block) os::ExecArena::instance().free(img.block);
  img.block = {};
}

arch::DebugHandle* must_register(const TestImage& img, std::string_view name,
                                 void* personality = nullptr) {
  auto h = arch::register_image(img.frame, name, personality);
  EXPECT_TRUE(h.ok()) << h.error().message;
  return h.ok() ? *h : nullptr;
}

std::string symbol_at(uint64_t pc) {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(pc), &info) || !info.dli_sname) return "?";
  return info.dli_sname;
}

// --- The unwind program, as bytes ---------------------------------------------------

// Two exits at +13 and +29 of a 31-byte image at 0x1000.
TEST(JitDebugEhFrame, GoldenTwoExits) {
  arch::ImageFrame f{0x1000, 31, {29, 13}};
  auto eh = arch::build_eh_frame(f, nullptr);
  ASSERT_TRUE(eh.ok()) << eh.error().message;
  const std::string want =
      // CIE: length 0x14, id 0, version 1, "zR", code_align 1, data_align -8, ra r16,
      // aug length 1, R = absptr; def_cfa rsp+8; offset r16 at cfa-8; same_value rbp
      "14 00 00 00 00 00 00 00 01 7a 52 00 01 78 10 01 00 0c 07 08 90 01 08 06 "
      // FDE: length 0x2c, CIE pointer 0x1c, pc_begin 0x1000, pc_range 31, aug length 0
      "2c 00 00 00 1c 00 00 00 00 10 00 00 00 00 00 00 1f 00 00 00 00 00 00 00 00 "
      // advance 1; def_cfa_offset 16; offset rbp at cfa-16
      "41 0e 10 86 02 "
      // advance 3; def_cfa_register rbp
      "43 0d 06 "
      // advance to 14 (after leave); remember; def_cfa rsp+8; restore rbp
      "4a 0a 0c 07 08 c6 "
      // advance to 15 (after ret, body goes on); restore_state
      "41 0b "
      // advance to 30; remember; def_cfa rsp+8; restore rbp (nothing follows the ret)
      "4f 0a 0c 07 08 c6 "
      // nop pad to 8; terminator
      "00 00 00 00 00";
  EXPECT_EQ(hex_bytes(*eh), want);
}

TEST(JitDebugEhFrame, GoldenPersonality) {
  arch::ImageFrame f{0x1000, 6, {4}};
  auto eh = arch::build_eh_frame(f, reinterpret_cast<void*>(uint64_t{0x1122334455667788}));
  ASSERT_TRUE(eh.ok()) << eh.error().message;
  const std::string want =
      // CIE: "zPR", aug length 10: P = absptr 0x1122334455667788, R = absptr; the
      // same instructions as above, nop pad
      "24 00 00 00 00 00 00 00 01 7a 50 52 00 01 78 10 0a 00 88 77 66 55 44 33 22 11 00 "
      "0c 07 08 90 01 08 06 00 00 00 00 00 00 "
      // FDE: CIE pointer 0x2c, pc_begin 0x1000, pc_range 6; prologue; the exit at +4
      // ends the image (no restore_state); nop pad
      "24 00 00 00 2c 00 00 00 00 10 00 00 00 00 00 00 06 00 00 00 00 00 00 00 00 "
      "41 0e 10 86 02 43 0d 06 41 0a 0c 07 08 c6 00 "
      // terminator
      "00 00 00 00";
  EXPECT_EQ(hex_bytes(*eh), want);
}

TEST(JitDebugEhFrame, RefusesFramesThatBreakTheLayout) {
  auto code_of = [](const auto& r) { return r.ok() ? "ok" : errc_name(r.error().code); };
  // Exit inside the prologue, overlapping exits, exit past the end, too small.
  EXPECT_EQ(code_of(arch::build_eh_frame({0x1000, 16, {2}}, nullptr)), "invalid_argument");
  EXPECT_EQ(code_of(arch::build_eh_frame({0x1000, 16, {8, 9}}, nullptr)), "invalid_argument");
  EXPECT_EQ(code_of(arch::build_eh_frame({0x1000, 16, {15}}, nullptr)), "invalid_argument");
  EXPECT_EQ(code_of(arch::build_eh_frame({0x1000, 3, {}}, nullptr)), "invalid_argument");
  EXPECT_EQ(code_of(arch::build_eh_frame({0, 16, {14}}, nullptr)), "invalid_argument");
}

TEST(JitDebug, RegisterChecksTheImageBytes) {
  TestImage img = make_image(&utramp_jd_leaf);
  ASSERT_TRUE(img.fn);
  // Exit offset that is not a leave: the call's last byte.
  arch::ImageFrame wrong = img.frame;
  wrong.exit_offsets = {wrong.exit_offsets[0] - 1};
  auto r = arch::register_image(wrong, "utramp_jd_wrong", nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::bytes_mismatch) << r.error().message;
  // Not the start of the image: the prologue does not match.
  wrong = img.frame;
  wrong.start += 1;
  wrong.size -= 1;
  wrong.exit_offsets = {wrong.exit_offsets[0] - 1};
  r = arch::register_image(wrong, "utramp_jd_wrong", nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::bytes_mismatch) << r.error().message;
  free_image(img);
}

// --- C++ exceptions -----------------------------------------------------------------

std::string throw_through(const TestImage& img, int arg) {
  try {
    utramp_jd_call_through(img.fn, arg);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "not thrown";
}

TEST(JitDebug, ExceptionPropagatesThroughImage) {
  TestImage img = make_image(&utramp_jd_throw);
  ASSERT_TRUE(img.fn);
  arch::DebugHandle* h = must_register(img, "utramp_jd_throw_image");
  ASSERT_TRUE(h);
  EXPECT_EQ(throw_through(img, 7), "thrown with 7");
  arch::unregister_image(h);
  free_image(img);
}

// The second exit's call lies after the first exit's ret: its rule comes back through
// DW_CFA_restore_state.
TEST(JitDebug, ExceptionPropagatesThroughEitherExit) {
  TestImage img = make_image(&utramp_jd_throw, &utramp_jd_throw);
  ASSERT_TRUE(img.fn);
  ASSERT_EQ(img.frame.exit_offsets.size(), 2u);
  arch::DebugHandle* h = must_register(img, "utramp_jd_two_exits");
  ASSERT_TRUE(h);
  EXPECT_EQ(throw_through(img, 1), "thrown with 1");
  EXPECT_EQ(throw_through(img, 0), "thrown with 0");
  arch::unregister_image(h);
  free_image(img);
}

// A batch (one registration of many images, as an attach of many functions makes):
// each image unwinds; one unregistered before the others is forgotten by the unwinder
// while the others still unwind, and its range may be registered again by a new image.
TEST(JitDebug, BatchUnwindsEachImageAndForgetsOneFreedEarly) {
  std::vector<TestImage> imgs;
  for (int i = 0; i < 3; ++i) {
    imgs.push_back(make_image(&utramp_jd_throw));
    ASSERT_TRUE(imgs.back().fn);
  }
  const arch::ImageFrame* frames[] = {&imgs[0].frame, &imgs[1].frame, &imgs[2].frame};
  const std::string_view names[] = {"utramp_jd_batch0", "utramp_jd_batch1", "utramp_jd_batch2"};
  auto hs = arch::register_images(frames, names, nullptr);
  ASSERT_EQ(hs.size(), 3u);
  for (auto& h : hs) ASSERT_TRUE(h.ok()) << h.error().message;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(throw_through(imgs[i], i), fmt::format("thrown with {}", i));
  dwarf_eh_bases bases{};
  arch::unregister_image(*hs[1]);
  EXPECT_EQ(_Unwind_Find_FDE(reinterpret_cast<void*>(imgs[1].frame.start + 4), &bases), nullptr)
      << "the unregistered image's FDE is still found";
  EXPECT_EQ(throw_through(imgs[0], 10), "thrown with 10");
  EXPECT_EQ(throw_through(imgs[2], 12), "thrown with 12");
  // The freed range taken by a new image, registered on its own.
  free_image(imgs[1]);
  TestImage again = make_image(&utramp_jd_throw);
  ASSERT_TRUE(again.fn);
  arch::DebugHandle* h = must_register(again, "utramp_jd_batch_again");
  ASSERT_TRUE(h);
  EXPECT_EQ(throw_through(again, 5), "thrown with 5");
  EXPECT_EQ(throw_through(imgs[2], 13), "thrown with 13");
  arch::unregister_image(h);
  arch::unregister_image(*hs[0]);
  arch::unregister_image(*hs[2]);
  for (const TestImage* img : {&imgs[0], &imgs[2]})
    EXPECT_EQ(_Unwind_Find_FDE(reinterpret_cast<void*>(img->frame.start + 4), &bases), nullptr);
  free_image(again);
  free_image(imgs[0]);
  free_image(imgs[2]);
}

// More images than one ELF's section numbering holds (4,096 a record): split into more
// records, each image still found, and nothing left once all are unregistered.
TEST(JitDebug, BatchLargerThanOneRecord) {
  constexpr size_t kImages = 4100;
  std::vector<TestImage> imgs;
  imgs.reserve(kImages);
  for (size_t i = 0; i < kImages; ++i) {
    imgs.push_back(make_image(&utramp_jd_throw));
    ASSERT_TRUE(imgs.back().fn);
  }
  std::vector<const arch::ImageFrame*> frames;
  std::vector<std::string> names;
  for (size_t i = 0; i < kImages; ++i) {
    frames.push_back(&imgs[i].frame);
    names.push_back(fmt::format("utramp_jd_many{}", i));
  }
  const std::vector<std::string_view> views(names.begin(), names.end());
  jit_code_entry* const first_before = gdb_descriptor().first_entry;
  auto hs = arch::register_images(frames, views, nullptr);
  ASSERT_EQ(hs.size(), kImages);
  for (auto& h : hs) ASSERT_TRUE(h.ok()) << h.error().message;
  for (size_t i : {size_t{0}, size_t{4095}, size_t{4096}, kImages - 1})
    EXPECT_EQ(throw_through(imgs[i], static_cast<int>(i)), fmt::format("thrown with {}", i));
  dwarf_eh_bases bases{};
  for (auto& h : hs) arch::unregister_image(*h);
  for (size_t i : {size_t{0}, size_t{4096}, kImages - 1})
    EXPECT_EQ(_Unwind_Find_FDE(reinterpret_cast<void*>(imgs[i].frame.start + 4), &bases), nullptr);
  EXPECT_EQ(gdb_descriptor().first_entry, first_before);
  for (auto& img : imgs) free_image(img);
}

// A batch refuses its bad images with their reasons and registers the others.
TEST(JitDebug, BatchRefusesABadImageAlone) {
  TestImage good = make_image(&utramp_jd_throw);
  TestImage bad = make_image(&utramp_jd_throw);
  ASSERT_TRUE(good.fn && bad.fn);
  arch::ImageFrame wrong = bad.frame;
  wrong.start += 1;  // not the prologue
  wrong.size -= 1;
  for (uint32_t& e : wrong.exit_offsets) e -= 1;
  const arch::ImageFrame* frames[] = {&wrong, &good.frame};
  const std::string_view names[] = {"utramp_jd_bad", "utramp_jd_good"};
  auto hs = arch::register_images(frames, names, nullptr);
  ASSERT_EQ(hs.size(), 2u);
  ASSERT_FALSE(hs[0].ok());
  EXPECT_EQ(hs[0].error().code, Errc::bytes_mismatch) << hs[0].error().message;
  ASSERT_TRUE(hs[1].ok()) << hs[1].error().message;
  EXPECT_EQ(throw_through(good, 3), "thrown with 3");
  arch::unregister_image(*hs[1]);
  free_image(good);
  free_image(bad);
}

// Without registration the unwinder finds no FDE for the image, stops, and
// __cxa_throw calls std::terminate: what the registration is for.
TEST(JitDebug, ExceptionWithoutUnwindInfoTerminates) {
  TestImage img = make_image(&utramp_jd_throw);
  ASSERT_TRUE(img.fn);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDERR_FILENO);  // "terminate called after ..."
    try {
      utramp_jd_call_through(img.fn, 1);
    } catch (...) {
      _exit(0);
    }
    _exit(1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status)
                                   << " (0: the exception was caught)";
  EXPECT_EQ(WTERMSIG(status), SIGABRT);
  free_image(img);
}

struct PersonalityLog {
  std::atomic<int> search{0}, cleanup{0}, outside{0};
  uint64_t lo = 0, hi = 0;
};
PersonalityLog g_pers;

_Unwind_Reason_Code test_personality(int version, _Unwind_Action actions, _Unwind_Exception_Class,
                                     _Unwind_Exception*, _Unwind_Context* ctx) {
  const uint64_t ip = _Unwind_GetIP(ctx);
  if (version != 1 || ip <= g_pers.lo || ip > g_pers.hi) {
    g_pers.outside++;
  } else {
    if (actions & _UA_SEARCH_PHASE) g_pers.search++;
    if (actions & _UA_CLEANUP_PHASE) g_pers.cleanup++;
  }
  return _URC_CONTINUE_UNWIND;
}

TEST(JitDebug, PersonalityRunsForTheImageFrame) {
  TestImage img = make_image(&utramp_jd_throw);
  ASSERT_TRUE(img.fn);
  g_pers.lo = img.frame.start;
  g_pers.hi = img.end();
  g_pers.search = g_pers.cleanup = g_pers.outside = 0;
  arch::DebugHandle* h =
      must_register(img, "utramp_jd_pers_image", reinterpret_cast<void*>(&test_personality));
  ASSERT_TRUE(h);
  EXPECT_EQ(throw_through(img, 3), "thrown with 3");
  // Once per phase: phase 1 finds the handler above the image, phase 2 unwinds it.
  EXPECT_EQ(g_pers.search.load(), 1);
  EXPECT_EQ(g_pers.cleanup.load(), 1);
  EXPECT_EQ(g_pers.outside.load(), 0) << "called for a frame outside the image";
  arch::unregister_image(h);
  free_image(img);
}

// --- Backtraces -----------------------------------------------------------------------

TEST(JitDebug, BacktraceWalksThroughImage) {
  TestImage img = make_image(&utramp_jd_backtrace);
  ASSERT_TRUE(img.fn);
  arch::DebugHandle* h = must_register(img, "utramp_jd_bt_image");
  ASSERT_TRUE(h);
  g_bt_n = 0;
  EXPECT_EQ(utramp_jd_call_through(img.fn, 1), 4);
  arch::unregister_image(h);

  std::string chain;
  int at = -1;
  for (int i = 0; i < g_bt_n; ++i) {
    const uint64_t pc = reinterpret_cast<uint64_t>(g_bt[i]);
    const bool in_image = img.contains(pc);
    if (in_image && at < 0) at = i;
    chain += fmt::format("  #{} {:#x} {}\n", i, pc, in_image ? "<image>" : symbol_at(pc));
  }
  ASSERT_GE(at, 1) << "no frame in the image:\n" << chain;
  ASSERT_LT(at + 1, g_bt_n) << chain;
  EXPECT_EQ(symbol_at(reinterpret_cast<uint64_t>(g_bt[at - 1])), "utramp_jd_backtrace") << chain;
  EXPECT_EQ(symbol_at(reinterpret_cast<uint64_t>(g_bt[at + 1])), "utramp_jd_call_through")
      << chain;
  free_image(img);
}

// The unwind rule must hold at every instruction of the image, not only at call sites:
// a sampling profiler or a signal handler may unwind from any of them. The trap flag
// stops the thread after every instruction; at each stop inside the image the SIGTRAP
// handler unwinds from the interrupted pc (a signal frame: the exact pc is looked up)
// and must reach utramp_jd_call_through with the image frame's CFA unchanged.
struct Step {
  uint64_t pc = 0, sp = 0, rbp = 0, ret = 0;  // at the trap; ret only at image+0
  int n = 0;
  uint64_t ip[16] = {}, cfa[16] = {}, frame_rbp[16] = {};
};
constexpr int kMaxSteps = 64;
Step g_steps[kMaxSteps];
std::atomic<int> g_nsteps{0};
uint64_t g_step_lo = 0, g_step_hi = 0;
constexpr int kDwarfRbp = 6;

_Unwind_Reason_Code collect_frame(_Unwind_Context* ctx, void* arg) {
  auto* s = static_cast<Step*>(arg);
  if (s->n == 16) return _URC_END_OF_STACK;
  int before = 0;
  s->ip[s->n] = _Unwind_GetIPInfo(ctx, &before);
  s->cfa[s->n] = _Unwind_GetCFA(ctx);
  s->frame_rbp[s->n] = _Unwind_GetGR(ctx, kDwarfRbp);
  s->n++;
  return _URC_NO_REASON;
}

void on_trap(int, siginfo_t*, void* uc_void) {
  auto* uc = static_cast<ucontext_t*>(uc_void);
  const uint64_t pc = arch::ctx_ip(uc);
  if (pc < g_step_lo || pc >= g_step_hi) return;
  const int i = g_nsteps.load(std::memory_order_relaxed);
  if (i == kMaxSteps) return;
  Step& s = g_steps[i];
  s = Step{};
  s.pc = pc;
  s.sp = arch::ctx_sp(uc);
  s.rbp = static_cast<uint64_t>(uc->uc_mcontext.gregs[REG_RBP]);
  if (pc == g_step_lo) s.ret = *reinterpret_cast<const uint64_t*>(s.sp);
  _Unwind_Backtrace(&collect_frame, &s);
  g_nsteps.store(i + 1, std::memory_order_relaxed);
}

// The asm moves rsp below the red zone before pushing: the caller may keep data there.
__attribute__((noinline)) int single_step_call(int (*image)(int), int arg) {
  asm volatile("lea -128(%%rsp), %%rsp\n\tpushfq\n\torq $0x100, (%%rsp)\n\tpopfq\n\t"
               "lea 128(%%rsp), %%rsp" ::: "memory", "cc");
  int r = utramp_jd_call_through(image, arg);
  asm volatile("lea -128(%%rsp), %%rsp\n\tpushfq\n\tandq $~0x100, (%%rsp)\n\tpopfq\n\t"
               "lea 128(%%rsp), %%rsp" ::: "memory", "cc");
  return r;
}

TEST(JitDebug, UnwindRuleHoldsAtEveryInstruction) {
  TestImage img = make_image(&utramp_jd_leaf, &utramp_jd_leaf);
  ASSERT_TRUE(img.fn);
  arch::DebugHandle* h = must_register(img, "utramp_jd_step_image");
  ASSERT_TRUE(h);

  struct sigaction sa {}, old {};
  sa.sa_sigaction = &on_trap;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGTRAP, &sa, &old), 0);
  g_step_lo = img.frame.start;
  g_step_hi = img.end();

  std::set<uint32_t> seen;
  for (int arg : {1, 0}) {  // first exit, then the second
    g_nsteps = 0;
    EXPECT_EQ(single_step_call(img.fn, arg), arg + 1);
    const int n = g_nsteps.load();
    ASSERT_GT(n, 0) << "no single-step trap inside the image";
    ASSERT_LT(n, kMaxSteps);
    // At image+0 the return address is at [rsp] and rbp is still the caller's. From
    // every instruction the unwinder must rebuild the caller's frame identically: its
    // pc (the return address), its rbp, and the image's CFA (rsp+8 at image+0), which
    // libgcc reports as the CFA of the caller's context (a context carries the CFA of
    // the frame just unwound).
    ASSERT_EQ(g_steps[0].pc, img.frame.start);
    const uint64_t cfa = g_steps[0].sp + 8;
    const uint64_t ret_pc = g_steps[0].ret;
    const uint64_t caller_rbp = g_steps[0].rbp;
    ASSERT_EQ(symbol_at(ret_pc), "utramp_jd_call_through");
    for (int i = 0; i < n; ++i) {
      const Step& s = g_steps[i];
      const uint32_t off = static_cast<uint32_t>(s.pc - img.frame.start);
      seen.insert(off);
      std::string chain;
      int at = -1;
      for (int k = 0; k < s.n; ++k) {
        if (s.ip[k] == s.pc && at < 0) at = k;
        chain += fmt::format("  {:#x} cfa {:#x} rbp {:#x} {}\n", s.ip[k], s.cfa[k],
                             s.frame_rbp[k],
                             img.contains(s.ip[k]) ? "<image>" : symbol_at(s.ip[k]));
      }
      SCOPED_TRACE(fmt::format("arg {} image+{} (rsp {:#x} rbp {:#x}):\n{}", arg, off, s.sp,
                               s.rbp, chain));
      ASSERT_GE(at, 0) << "the unwinder did not reach the interrupted image frame";
      ASSERT_LT(at + 1, s.n);
      EXPECT_EQ(s.ip[at + 1], ret_pc);
      EXPECT_EQ(s.cfa[at + 1], cfa);
      EXPECT_EQ(s.frame_rbp[at + 1], caller_rbp);
    }
  }
  sigaction(SIGTRAP, &old, nullptr);
  arch::unregister_image(h);
  EXPECT_EQ(seen, std::set<uint32_t>(img.insn_offsets.begin(), img.insn_offsets.end()))
      << "every instruction of both paths is stepped";
  free_image(img);
}

// --- gdb ------------------------------------------------------------------------------

// This binary doubles as gdb's inferior: with UTRAMP_JD_GDB_TARGET set it registers an
// image, calls through it into utramp_jd_gdb_stop (where gdb breaks) and exits before
// any test runs.
constexpr const char* kGdbTargetEnv = "UTRAMP_JD_GDB_TARGET";

// With the value "batch": a batch of three images, the first unregistered, freed and its
// range taken by a new image of its own; gdb stops through the new image, then through
// the batch's second.
[[maybe_unused]] const bool g_gdb_target_ran = [] {
  const char* mode = std::getenv(kGdbTargetEnv);
  if (!mode) return false;
  if (std::string_view(mode) == "batch") {
    TestImage imgs[3] = {make_image(&utramp_jd_gdb_stop), make_image(&utramp_jd_gdb_stop),
                         make_image(&utramp_jd_gdb_stop)};
    for (const TestImage& img : imgs)
      if (!img.fn) _exit(2);
    const arch::ImageFrame* frames[] = {&imgs[0].frame, &imgs[1].frame, &imgs[2].frame};
    const std::string_view names[] = {"utramp_jd_gdb_batch0", "utramp_jd_gdb_batch1",
                                      "utramp_jd_gdb_batch2"};
    auto hs = arch::register_images(frames, names, nullptr);
    for (auto& h : hs)
      if (!h) _exit(3);
    arch::unregister_image(*hs[0]);
    const uint64_t gone = imgs[0].frame.start;
    free_image(imgs[0]);
    TestImage reused = make_image(&utramp_jd_gdb_stop);
    if (!reused.fn || reused.frame.start != gone) _exit(5);  // the range must be reused
    if (!arch::register_image(reused.frame, "utramp_jd_gdb_reused", nullptr)) _exit(3);
    if (utramp_jd_call_through(reused.fn, 1) != 3) _exit(4);
    const int r = utramp_jd_call_through(imgs[1].fn, 1);
    _exit(r == 3 ? 0 : 4);
  }
  TestImage img = make_image(&utramp_jd_gdb_stop);
  if (!img.fn) _exit(2);
  auto h = arch::register_image(img.frame, "utramp_jd_gdb_image", nullptr);
  if (!h) _exit(3);
  const int r = utramp_jd_call_through(img.fn, 1);
  _exit(r == 3 ? 0 : 4);
}();

bool have_program(const char* name) {
  return std::system(fmt::format("command -v {} >/dev/null 2>&1", name).c_str()) == 0;
}

// gdb's backtrace at utramp_jd_gdb_stop, this binary run as the target in `mode`; empty
// (the test skipped) when gdb cannot run it.
std::string gdb_backtrace(const char* mode, int stops = 1) {
  if (!have_program("gdb")) {
    ADD_FAILURE() << "requires gdb (scripts/install-deps.sh installs it)";
    return {};
  }
  char exe[4096] = {};
  EXPECT_GT(readlink("/proc/self/exe", exe, sizeof exe - 1), 0);
  const std::string cmd = fmt::format(
      "{}={} timeout 120 gdb -nx -batch -ex 'set debuginfod enabled off' "
      "-ex 'set startup-with-shell off' -ex 'break utramp_jd_gdb_stop' -ex run -ex bt {}"
      "-ex kill --args '{}' 2>&1",
      kGdbTargetEnv, mode, stops > 1 ? "-ex continue -ex bt " : "", exe);
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_TRUE(p);
  if (!p) return {};
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  pclose(p);
  return out;
}

TEST(JitDebug, GdbBacktraceShowsImageName) {
  if (!have_program("gdb")) GTEST_SKIP() << "requires gdb (scripts/install-deps.sh installs it)";
  const std::string out = gdb_backtrace("1");
  if (out.find("ptrace: Operation not permitted") != std::string::npos)
    GTEST_SKIP() << "requires ptrace (gdb could not trace its child):\n" << out;
  // #0  utramp_jd_gdb_stop (x=1) at ...
  // #1  0x00007f... in utramp_jd_gdb_image ()
  // #2  0x000055... in utramp_jd_call_through (image=..., arg=1) at ...
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(#0 .*utramp_jd_gdb_stop)"))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(#1 +0x[0-9a-f]+ in utramp_jd_gdb_image \(\))")))
      << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(#2 +0x[0-9a-f]+ in utramp_jd_call_through)")))
      << out;
}

// An image of a batch whose first image was unregistered (and its range reused): gdb,
// which read the batch's symbol file again, names it, and nothing names the one gone.
TEST(JitDebug, GdbNamesAnImageOfABatchAfterAnotherLeft) {
  if (!have_program("gdb")) GTEST_SKIP() << "requires gdb (scripts/install-deps.sh installs it)";
  const std::string out = gdb_backtrace("batch", 2);
  if (out.find("ptrace: Operation not permitted") != std::string::npos)
    GTEST_SKIP() << "requires ptrace (gdb could not trace its child):\n" << out;
  // The first stop through the image in the range the batch's first image left, the
  // second through the batch's second.
  EXPECT_TRUE(std::regex_search(
      out, std::regex(R"(#1 +0x[0-9a-f]+ in utramp_jd_gdb_reused \(\)[^]*#1 +0x[0-9a-f]+ in utramp_jd_gdb_batch1 \(\))")))
      << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(#2 +0x[0-9a-f]+ in utramp_jd_call_through)")))
      << out;
  EXPECT_EQ(out.find("utramp_jd_gdb_batch0"), std::string::npos) << out;
}

// --- lifetime -------------------------------------------------------------------------

TEST(JitDebug, RegisterUnregisterChurnLeavesNothingBehind) {
  TestImage img = make_image(&utramp_jd_leaf);
  ASSERT_TRUE(img.fn);
  jit_code_entry* const first_before = gdb_descriptor().first_entry;
  void* const probe = reinterpret_cast<void*>(img.frame.start + 4);
  dwarf_eh_bases bases{};
  ASSERT_EQ(_Unwind_Find_FDE(probe, &bases), nullptr);

  // Warm up whatever libgcc and the allocator keep around, then measure.
  for (int i = 0; i < 100; ++i) arch::unregister_image(must_register(img, "utramp_jd_churn"));
  const size_t heap_before = mallinfo2().uordblks;
  int found = 0, gone = 0;
  for (int i = 0; i < 10000; ++i) {
    arch::DebugHandle* h = must_register(img, "utramp_jd_churn");
    ASSERT_TRUE(h);
    bases = {};
    if (_Unwind_Find_FDE(probe, &bases) && bases.func == reinterpret_cast<void*>(img.frame.start))
      found++;
    arch::unregister_image(h);
    if (!_Unwind_Find_FDE(probe, &bases)) gone++;
  }
  const size_t heap_after = mallinfo2().uordblks;
  EXPECT_EQ(found, 10000) << "FDE not found (or wrong pc_begin) while registered";
  EXPECT_EQ(gone, 10000) << "FDE still found after unregister";
  EXPECT_EQ(gdb_descriptor().first_entry, first_before);
  EXPECT_LT(heap_after, heap_before + 64 * 1024)
      << "heap grew from " << heap_before << " to " << heap_after;
  free_image(img);
}

TEST(JitDebug, RefusesOverlappingRegistration) {
  TestImage img = make_image(&utramp_jd_leaf);
  ASSERT_TRUE(img.fn);
  arch::DebugHandle* h = must_register(img, "utramp_jd_first");
  ASSERT_TRUE(h);
  auto again = arch::register_image(img.frame, "utramp_jd_again", nullptr);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, Errc::busy) << again.error().message;
  arch::unregister_image(h);
  h = must_register(img, "utramp_jd_after");  // free again once unregistered
  arch::unregister_image(h);
  free_image(img);
}

TEST(JitDebug, ConcurrentRegistrationKeepsGdbListConsistent) {
  constexpr int kThreads = 4;
  std::vector<TestImage> imgs;
  for (int t = 0; t < kThreads; ++t) {
    imgs.push_back(make_image(&utramp_jd_leaf));
    ASSERT_TRUE(imgs.back().fn);
  }
  jit_code_entry* const first_before = gdb_descriptor().first_entry;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const TestImage& img = imgs[t];
      for (int i = 0; i < 500; ++i) {
        auto h = arch::register_image(img.frame, fmt::format("utramp_jd_mt{}", t), nullptr);
        if (!h) {
          failures++;
          continue;
        }
        if (img.fn(i) != i + 1) failures++;
        arch::unregister_image(*h);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(gdb_descriptor().first_entry, first_before);
  EXPECT_EQ(gdb_descriptor().version, 1u);
  for (auto& img : imgs) free_image(img);
}

}  // namespace
