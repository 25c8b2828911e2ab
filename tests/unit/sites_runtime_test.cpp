// Live site discovery and canonicalisation in this process: each test dlopens a fixture
// library of one flavour, lets the SiteTable find it, canonicalises its sites, patches a
// call to a counting stub in, runs the function, and restores the NOP.
//
// The SiteTable is a process singleton and canonicalisation is one-way, so every test
// uses libraries no other test touches.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "arch/arch.hpp"
#include "common/hex.hpp"
#include "fixture_matrix.hpp"
#include "os/exec_memory.hpp"
#include "os/text_writer.hpp"
#include "patch/patcher.hpp"
#include "sites/table.hpp"

using namespace utramp;
using sites::SiteKind;
using sites::SiteOp;
using sites::SiteTable;

namespace {

using AddFn = int (*)(int, int);
using FactFn = unsigned long (*)(unsigned);
using SwitchFn = int (*)(int, int, int);

std::string hex_at(uint64_t addr, size_t n) {
  return hex_bytes({reinterpret_cast<const uint8_t*>(addr), n});
}

uint64_t sym(void* handle, const char* name) {
  return reinterpret_cast<uint64_t>(dlsym(handle, name));
}

// Opens a fixture library for good: sites keep pointing into its code.
void* open_fixture(const test::Fixture& f, std::string* why) {
  void* h = dlopen(f.path().c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) *why = dlerror();
  return h;
}

size_t threads() {
  auto n = os::thread_count();
  return n ? *n : 0;
}

// A counting stub reachable by rel32 from `site`.
struct Stub {
  os::ExecBlock block;
  alignas(8) uint64_t counter = 0;
  uint64_t count() const { return __atomic_load_n(&counter, __ATOMIC_SEQ_CST); }
};

::testing::AssertionResult make_stub(uint64_t site, Stub* stub) {
  const auto w = arch::rel32_window(site);
  auto b = os::ExecArena::instance().allocate(64, w.lo, w.hi);
  if (!b) return ::testing::AssertionFailure() << b.error().message;
  auto code = arch::emit_counting_stub(b->addr, reinterpret_cast<uint64_t>(&stub->counter));
  if (!code) return ::testing::AssertionFailure() << code.error().message;
  if (auto r = os::ExecArena::instance().write(*b, 0, *code); !r)
    return ::testing::AssertionFailure() << r.error().message;
  stub->block = *b;
  return ::testing::AssertionSuccess();
}

std::string canonical_bytes(SiteKind k) {
  std::string s = "0f 1f 44 00 00";
  if (k == SiteKind::fentry_gotpcrel) s += " 90";  // the 6-byte call became nop5 + nop1
  if (k == SiteKind::xray_sled) s += " eb 04";     // nop5, then jmp over the rest of the sled
  return s;
}

struct Case {
  const char* file;
  SiteKind kind;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.file; }

class RuntimeSites : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(RuntimeSites, CanonicaliseCallAndRestore) {
  const test::Fixture* f = test::find_fixture(GetParam().file);
  ASSERT_NE(f, nullptr) << GetParam().file << " is not in the fixture matrix";
  if (!f->missing.empty()) GTEST_SKIP() << f->file << " was not built: " << f->missing;
  ASSERT_EQ(threads(), 1u) << "this test canonicalises live and needs to be the only thread";
  std::string why;
  void* h = open_fixture(*f, &why);
  ASSERT_NE(h, nullptr) << why;

  auto& table = SiteTable::instance();
  auto added = table.discover();
  ASSERT_TRUE(added.ok()) << added.error().message;
  EXPECT_GT(*added, 0u);
  auto again = table.discover();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0u) << "nothing new was loaded";

  const uint64_t add = sym(h, "fx_add");
  ASSERT_NE(add, 0u);
  sites::Site* site = table.find(add);
  ASSERT_NE(site, nullptr);
  EXPECT_EQ(site->object(), f->path());
  EXPECT_EQ(site->info.name, "fx_add");
  EXPECT_EQ(site->info.kind, GetParam().kind) << sites::site_kind_name(site->info.kind);
  EXPECT_EQ(site->addr(), add + (f->cet ? 4 : 0));
  EXPECT_EQ(table.find(site->addr()), site);
  EXPECT_FALSE(site->canonical);
  std::string not_yet;
  EXPECT_FALSE(site->usable(&not_yet));
  EXPECT_NE(not_yet.find("not canonicalised"), std::string::npos) << not_yet;

  // The compiler's site runs as it is (a call to __fentry__ returns at once while
  // profiling is off).
  EXPECT_EQ(reinterpret_cast<AddFn>(add)(2, 3), 5);

  auto left = table.canonicalize(sites::Quiescence::live);
  ASSERT_TRUE(left.ok()) << left.error().message;
  EXPECT_EQ(*left, 0u);
  for (std::string_view fn : test::kCompiledFunctions) {
    sites::Site* s = table.find(sym(h, std::string(fn).c_str()));
    ASSERT_NE(s, nullptr) << fn;
    EXPECT_TRUE(s->canonical) << fn;
    EXPECT_TRUE(s->usable()) << fn;
    EXPECT_EQ(hex_at(s->addr(), s->info.site_len).substr(0, canonical_bytes(s->info.kind).size()),
              canonical_bytes(s->info.kind))
        << fn;
  }
  // The functions still compute what they did.
  EXPECT_EQ(reinterpret_cast<AddFn>(add)(2, 3), 5);
  EXPECT_EQ(reinterpret_cast<FactFn>(sym(h, "fx_fact"))(5), 120u);
  EXPECT_EQ(reinterpret_cast<SwitchFn>(sym(h, "fx_switch"))(2, 6, 7), 42);

  // Call a counting stub from the site.
  Stub stub;
  ASSERT_TRUE(make_stub(site->addr(), &stub));
  ASSERT_TRUE(table.set_desired(site, {SiteOp::call, stub.block.addr}).ok());
  auto c = table.commit();
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(site->applied, (sites::SiteState{SiteOp::call, stub.block.addr}));
  auto call = arch::encode_call(site->addr(), stub.block.addr);
  ASSERT_TRUE(call.ok());
  EXPECT_EQ(hex_at(site->addr(), 5), hex_bytes(*call));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(reinterpret_cast<AddFn>(add)(i, 40), 40 + i);
  EXPECT_EQ(stub.count(), 3u);
  EXPECT_EQ(reinterpret_cast<FactFn>(sym(h, "fx_fact"))(4), 24u);
  EXPECT_EQ(stub.count(), 3u) << "only fx_add's site calls the stub";

  // Back to the NOP.
  ASSERT_TRUE(table.set_desired(site, {SiteOp::nop, 0}).ok());
  c = table.commit();
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(hex_at(site->addr(), site->info.site_len).substr(0, canonical_bytes(site->info.kind).size()),
            canonical_bytes(site->info.kind));
  EXPECT_EQ(reinterpret_cast<AddFn>(add)(7, 8), 15);
  EXPECT_EQ(stub.count(), 3u);
  os::ExecArena::instance().free(stub.block);
}

INSTANTIATE_TEST_SUITE_P(
    Flavours, RuntimeSites,
    ::testing::Values(Case{"fx_gcc_O2_pfe_pic.so", SiteKind::nop1x5},
                      Case{"fx_gcc_O2_pfe-cet_pic.so", SiteKind::nop1x5},
                      Case{"fx_gcc_O2_fentry_pic.so", SiteKind::fentry_gotpcrel},
                      Case{"fx_gcc_O2_fentry-cet_pic.so", SiteKind::fentry_gotpcrel},
                      Case{"fx_clang_O2_pfe_pic.so", SiteKind::nop5},
                      Case{"fx_clang_O2_pfe-cet_pic.so", SiteKind::nop5},
                      Case{"fx_clang_O2_fentry_pic.so", SiteKind::fentry_call},
                      Case{"fx_clang_O2_fentry-cet_pic.so", SiteKind::fentry_call},
                      Case{"fx_clang_O2_xray_pic.so", SiteKind::xray_sled},
                      Case{"fx_clang_O2_xray-cet_pic.so", SiteKind::xray_sled},
                      Case{"fx_clang_O0_xray_pic.so", SiteKind::xray_sled}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string n = info.param.file;
      for (char& ch : n)
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

TEST(RuntimeSitesThreads, FiveOneByteNopsWaitForQuiescence) {
  const test::Fixture* f = test::find_fixture("fx_gcc_O0_pfe_pic.so");
  ASSERT_NE(f, nullptr);
  if (!f->missing.empty()) GTEST_SKIP() << f->file << " was not built: " << f->missing;
  ASSERT_EQ(threads(), 1u);

  // A second thread that could be anywhere, including between two of the NOPs.
  struct Sleeper {
    std::mutex mu;
    std::condition_variable cv;
    bool stop = false;
    std::thread t{[this] {
      std::unique_lock lock(mu);
      cv.wait(lock, [this] { return stop; });
    }};
    void finish() {
      {
        std::lock_guard lock(mu);
        stop = true;
      }
      cv.notify_all();
      if (t.joinable()) t.join();
    }
    ~Sleeper() { finish(); }
  } other;
  ASSERT_GE(threads(), 2u);

  std::string why;
  void* h = open_fixture(*f, &why);
  ASSERT_NE(h, nullptr) << why;
  auto& table = SiteTable::instance();
  auto added = table.discover();
  ASSERT_TRUE(added.ok()) << added.error().message;
  const uint64_t add = sym(h, "fx_add");
  sites::Site* site = table.find(add);
  ASSERT_NE(site, nullptr);
  ASSERT_EQ(site->info.kind, SiteKind::nop1x5);

  auto left = table.canonicalize(sites::Quiescence::live);
  ASSERT_TRUE(left.ok()) << left.error().message;
  // Every compiled function of this library has five 1-byte NOPs and is left alone.
  EXPECT_GE(*left, std::size(test::kCompiledFunctions));
  EXPECT_FALSE(site->canonical);
  EXPECT_EQ(hex_at(site->addr(), 5), "90 90 90 90 90");
  auto r = table.set_desired(site, {SiteOp::call, site->addr() + 0x100});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::unsupported);
  EXPECT_NE(r.error().message.find("fx_add+0x0"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("not canonicalised"), std::string::npos) << r.error().message;
  EXPECT_EQ(site->desired, sites::SiteState{});

  // With int3 entries allowed, the NOPs stay and an int3 over the first diverts the
  // entry (here past the NOPs: the function runs as before, each call through a trap).
  sites::set_trap_entries(true);
  ASSERT_TRUE(table.set_desired(site, {SiteOp::jmp, site->addr() + 5}).ok());
  ASSERT_TRUE(table.commit().ok());
  EXPECT_TRUE(site->trap_entry);
  EXPECT_EQ(hex_at(site->addr(), 5), "cc 90 90 90 90");
  const auto traps = patch::stats().traps_emulated;
  EXPECT_EQ(reinterpret_cast<AddFn>(add)(20, 22), 42);
  EXPECT_EQ(patch::stats().traps_emulated - traps, 1u);
  ASSERT_TRUE(table.set_desired(site, {}).ok());
  ASSERT_TRUE(table.commit().ok());
  EXPECT_EQ(hex_at(site->addr(), 5), "90 90 90 90 90");
  EXPECT_FALSE(site->canonical);
  sites::set_trap_entries(false, "a test");
  r = table.set_desired(site, {SiteOp::call, site->addr() + 0x100});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("not diverted by an int3 either: a test"), std::string::npos)
      << r.error().message;
  sites::set_trap_entries(false);

  other.finish();
  // The thread is joined; its /proc/self/task entry goes when the kernel reaps it.
  for (int i = 0; i < 5000 && threads() != 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(threads(), 1u);
  left = table.canonicalize(sites::Quiescence::live);
  ASSERT_TRUE(left.ok()) << left.error().message;
  EXPECT_EQ(*left, 0u);
  EXPECT_TRUE(site->canonical);
  EXPECT_EQ(hex_at(site->addr(), 5), "0f 1f 44 00 00");
  EXPECT_EQ(reinterpret_cast<AddFn>(add)(20, 22), 42);
}

// ---- bad input ------------------------------------------------------------------

TEST(SitesBadInput, SetDesiredOnUnusableSiteSaysWhy) {
  const test::Fixture* f = test::find_fixture("fx_clang_O2_plain_pic.so");
  ASSERT_NE(f, nullptr);
  if (!f->missing.empty()) GTEST_SKIP() << f->file << " was not built: " << f->missing;
  // The plain flavour plants no compiler sites: the refusals come from the prologue.
  std::string why;
  void* h = open_fixture(*f, &why);
  ASSERT_NE(h, nullptr) << why;
  auto& table = SiteTable::instance();
  auto added = table.discover();
  ASSERT_TRUE(added.ok()) << added.error().message;
  const struct {
    const char* fn;
    const char* reason;
  } cases[] = {{"fx_zero", "too short"},
               {"fx_switch", "jump table"},
               {"fx_branch_entry", "inside the 5 bytes"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.fn);
    sites::Site* s = table.find(sym(h, c.fn));
    ASSERT_NE(s, nullptr);
    EXPECT_FALSE(s->info.attachable);
    auto r = table.set_desired(s, {SiteOp::jmp, s->addr() + 0x1000});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, Errc::unsupported);
    EXPECT_NE(r.error().message.find(c.fn), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find(c.reason), std::string::npos) << r.error().message;
    EXPECT_EQ(s->desired, sites::SiteState{});
  }
  // A relocated prologue is entered by a jump, never a call.
  sites::Site* mix = table.find(sym(h, "fx_mix"));
  ASSERT_NE(mix, nullptr);
  ASSERT_EQ(mix->info.kind, SiteKind::prologue);
  auto r = table.set_desired(mix, {SiteOp::call, mix->addr() + 0x1000});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("only jump"), std::string::npos) << r.error().message;
  auto c = table.commit();
  EXPECT_TRUE(c.ok()) << "nothing is pending";

  auto none = table.set_desired(nullptr, {SiteOp::call, 0x1000});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, Errc::invalid_argument);
}

TEST(SitesBadInput, TargetOutOfRel32Reach) {
  const test::Fixture* f = test::find_fixture("fx_clang_O0_pfe_pic.so");
  ASSERT_NE(f, nullptr);
  if (!f->missing.empty()) GTEST_SKIP() << f->file << " was not built: " << f->missing;
  ASSERT_EQ(threads(), 1u);
  std::string why;
  void* h = open_fixture(*f, &why);
  ASSERT_NE(h, nullptr) << why;
  auto& table = SiteTable::instance();
  ASSERT_TRUE(table.discover().ok());
  ASSERT_TRUE(table.canonicalize(sites::Quiescence::live).ok());
  sites::Site* s = table.find(sym(h, "fx_add"));
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->usable());
  const uint64_t far = s->addr() > (uint64_t{1} << 40) ? 0x10000 : (uint64_t{1} << 46);
  ASSERT_FALSE(arch::rel32_reaches(s->addr() + 5, far));
  auto r = table.set_desired(s, {SiteOp::call, far});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::out_of_range);
  EXPECT_NE(r.error().message.find("fx_add+0x0"), std::string::npos) << r.error().message;
  EXPECT_EQ(s->desired, sites::SiteState{});
  EXPECT_EQ(hex_at(s->addr(), 5), "0f 1f 44 00 00");
}

TEST(SitesBadInput, WrongExpectedBytesChangeNothing) {
  // Any canonical site will do; take one from a library no other test patches.
  const test::Fixture* f = test::find_fixture("fx_clang_O0_fentry_pic.so");
  ASSERT_NE(f, nullptr);
  if (!f->missing.empty()) GTEST_SKIP() << f->file << " was not built: " << f->missing;
  ASSERT_EQ(threads(), 1u);
  std::string why;
  void* h = open_fixture(*f, &why);
  ASSERT_NE(h, nullptr) << why;
  auto& table = SiteTable::instance();
  ASSERT_TRUE(table.discover().ok());
  ASSERT_TRUE(table.canonicalize(sites::Quiescence::live).ok());
  sites::Site* s = table.find(sym(h, "fx_add"));
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(hex_at(s->addr(), 5), "0f 1f 44 00 00");

  patch::PatchOp op;
  op.addr = s->addr();
  op.label = s->label();
  op.expected = {0xe8, 0x00, 0x00, 0x00, 0x00};  // a call that is not there
  op.replacement = {0x90, 0x90, 0x90, 0x90, 0x90};
  auto r = patch::apply({&op, 1});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::bytes_mismatch);
  EXPECT_NE(r.error().message.find("fx_add+0x0"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("bytes seen 0f 1f 44 00 00, expected e8 00 00 00 00"),
            std::string::npos)
      << r.error().message;
  EXPECT_EQ(hex_at(s->addr(), 5), "0f 1f 44 00 00");
  EXPECT_EQ(reinterpret_cast<AddFn>(sym(h, "fx_add"))(1, 1), 2);
}

TEST(SitesBadInput, NonExecutableAddressIsRefused) {
  static uint8_t data[16] = {0x0f, 0x1f, 0x44, 0x00, 0x00};
  patch::PatchOp op;
  op.addr = reinterpret_cast<uint64_t>(data);
  op.label = "data";
  op.expected = {0x0f, 0x1f, 0x44, 0x00, 0x00};
  op.replacement = {0xe8, 0x00, 0x00, 0x00, 0x00};
  auto r = patch::apply({&op, 1});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::not_executable);
  EXPECT_NE(r.error().message.find("not in executable memory"), std::string::npos)
      << r.error().message;
  EXPECT_EQ(hex_bytes({data, 5}), "0f 1f 44 00 00");
}
