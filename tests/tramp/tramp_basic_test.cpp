// The trampoline through the C API: what programs see, what the function returns, and
// the refusals.
#include <gtest/gtest.h>
#include <utramp/utramp.h>

#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <cstring>
#include <string>
#include <vector>

#include "targets.h"
#include "os/perf_map.hpp"
#include "tramp/trampoline.hpp"

namespace {

template <class F>
int64_t call(F* f, auto... args) {
  // Through a volatile pointer: the compiler must not inline or fold the call.
  F* volatile p = f;
  return static_cast<int64_t>(p(args...));
}

uint64_t g_seen[16];
uint64_t g_nargs, g_ip, g_cookie, g_ret, g_runs;

uint64_t record_entry(uint64_t* ctx) {
  g_nargs = utramp_get_func_arg_cnt(ctx);
  g_ip = utramp_get_func_ip(ctx);
  g_cookie = utramp_get_attach_cookie(ctx);
  for (uint64_t i = 0; i < g_nargs && i < 16; ++i) utramp_get_func_arg(ctx, uint32_t(i), &g_seen[i]);
  ++g_runs;
  return 0;
}

uint64_t record_exit(uint64_t* ctx) {
  utramp_get_func_ret(ctx, &g_ret);
  ++g_runs;
  return 0;
}

uint64_t inject_einval(uint64_t* ctx) { return ctx[0] == 7 ? uint64_t(-22) : 0; }

TEST(Tramp, FentrySeesArgumentsAndCookie) {
  utramp_attach_opts o{sizeof o, 0x1234, "i64,i64 -> i64"};
  auto* l = utramp_attach(reinterpret_cast<void*>(&tt_add), UTRAMP_FENTRY,
                          &record_entry, &o);
  ASSERT_NE(l, nullptr) << utramp_last_error();
  g_runs = 0;
  EXPECT_EQ(call(&tt_add, int64_t(40), int64_t(2)), 42);
  EXPECT_EQ(g_runs, 1u);
  EXPECT_EQ(g_nargs, 2u);
  EXPECT_EQ(g_seen[0], 40u);
  EXPECT_EQ(g_seen[1], 2u);
  EXPECT_EQ(g_ip, reinterpret_cast<uint64_t>(&tt_add));
  EXPECT_EQ(g_cookie, 0x1234u);
  ASSERT_EQ(utramp_link_detach(l), 0);
  EXPECT_EQ(call(&tt_add, int64_t(1), int64_t(2)), 3);
  EXPECT_EQ(g_runs, 1u) << "a detached program must not run";
}

TEST(Tramp, FexitSeesReturnValueMixedArgs) {
  utramp_attach_opts o{sizeof o, 0, "i32,f64,f32,i64 -> f64"};
  auto* l = utramp_attach(reinterpret_cast<void*>(&tt_mix), UTRAMP_FEXIT,
                          &record_exit, &o);
  ASSERT_NE(l, nullptr) << utramp_last_error();
  double (*volatile f)(int, double, float, long) = &tt_mix;
  const double r = f(1, 2.5, 3.0f, 4);
  EXPECT_EQ(r, 1 + 5.0 + 9.0 + 16.0);
  double seen;
  std::memcpy(&seen, &g_ret, sizeof seen);
  EXPECT_EQ(seen, r);
  ASSERT_EQ(utramp_link_detach(l), 0);
}

TEST(Tramp, StackArgumentsReachTheOriginal) {
  auto* l1 = utramp_attach(reinterpret_cast<void*>(&tt_many), UTRAMP_FEXIT,
                           &record_exit, nullptr);
  ASSERT_NE(l1, nullptr) << utramp_last_error();
  auto* l2 = utramp_attach(reinterpret_cast<void*>(&tt_many), UTRAMP_FENTRY,
                           &record_entry, nullptr);
  ASSERT_NE(l2, nullptr) << utramp_last_error();
  int (*volatile f)(int, int, int, int, int, int, int, int) = &tt_many;
  EXPECT_EQ(f(1, 2, 3, 4, 5, 6, 7, 8), 1 + 4 + 9 + 16 + 25 + 36 + 49 + 64);
  EXPECT_EQ(g_ret, uint64_t(204));
  ASSERT_EQ(utramp_link_detach(l1), 0);
  ASSERT_EQ(utramp_link_detach(l2), 0);
}

TEST(Tramp, FmodRetOverridesOnlyMarkedFunctions) {
  auto* bad = utramp_attach(reinterpret_cast<void*>(&tt_unmarked), UTRAMP_FMOD_RET,
                            &inject_einval, nullptr);
  ASSERT_EQ(bad, nullptr);
  EXPECT_NE(std::string(utramp_last_error()).find("UTRAMP_ALLOW_ERROR_INJECTION"), std::string::npos)
      << utramp_last_error();
  auto* l = utramp_attach(reinterpret_cast<void*>(&tt_check), UTRAMP_FMOD_RET,
                          &inject_einval, nullptr);
  ASSERT_NE(l, nullptr) << utramp_last_error();
  EXPECT_EQ(call(&tt_check, 7), -22) << "a non-zero fmod_ret result replaces the body";
  EXPECT_EQ(call(&tt_check, 5), 0) << "zero runs the body";
  ASSERT_EQ(utramp_link_detach(l), 0);
  EXPECT_EQ(call(&tt_check, 7), 0);
}

TEST(Tramp, FreplaceExcludesOthers) {
  auto* l = utramp_attach_replace(reinterpret_cast<void*>(&tt_replace_me),
                                  reinterpret_cast<void*>(&tt_replacement), nullptr);
  ASSERT_NE(l, nullptr) << utramp_last_error();
  EXPECT_EQ(call(&tt_replace_me, 3), 300);
  auto* l2 = utramp_attach(reinterpret_cast<void*>(&tt_replace_me), UTRAMP_FENTRY,
                           &record_entry, nullptr);
  EXPECT_EQ(l2, nullptr);
  EXPECT_EQ(errno, EBUSY);
  ASSERT_EQ(utramp_link_detach(l), 0);
  EXPECT_EQ(call(&tt_replace_me, 3), 4);
}

uint64_t nop_prog(uint64_t*) { return 0; }

TEST(Tramp, ThirtyEightLinksAndNoMore) {
  std::vector<utramp_link*> links;
  for (int i = 0; i < 38; ++i) {
    auto* l = utramp_attach(reinterpret_cast<void*>(&tt_add), i % 2 ? UTRAMP_FEXIT : UTRAMP_FENTRY,
                            &nop_prog, nullptr);
    ASSERT_NE(l, nullptr) << i << ": " << utramp_last_error();
    links.push_back(l);
  }
  EXPECT_EQ(utramp_attach(reinterpret_cast<void*>(&tt_add), UTRAMP_FENTRY,
                          &nop_prog, nullptr),
            nullptr);
  EXPECT_NE(std::string(utramp_last_error()).find("38"), std::string::npos) << utramp_last_error();
  EXPECT_EQ(call(&tt_add, int64_t(2), int64_t(3)), 5);
  for (auto* l : links) ASSERT_EQ(utramp_link_detach(l), 0);
}

TEST(Tramp, BadInputIsRefused) {
  EXPECT_EQ(utramp_attach(reinterpret_cast<void*>(&tt_add), UTRAMP_FENTRY, nullptr, nullptr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(utramp_attach(reinterpret_cast<char*>(&tt_add) + 1, UTRAMP_FENTRY,
                          &nop_prog, nullptr),
            nullptr);
  EXPECT_NE(std::string(utramp_last_error()).find("tt_add+0x1"), std::string::npos) << utramp_last_error();
  utramp_attach_opts bad_sig{sizeof bad_sig, 0, "i32,zz -> i32"};
  EXPECT_EQ(utramp_attach(reinterpret_cast<void*>(&tt_add), UTRAMP_FENTRY,
                          &nop_prog, &bad_sig),
            nullptr);
  EXPECT_NE(std::string(utramp_last_error()).find("zz"), std::string::npos) << utramp_last_error();
  EXPECT_EQ(utramp_attach_name("no_such_function_anywhere", UTRAMP_FENTRY,
                               &nop_prog, nullptr),
            nullptr);
  EXPECT_EQ(errno, ENOENT);
}

}  // namespace

namespace {

TEST(Tramp, SignatureComesFromDwarfWithoutOptions) {
  auto* l = utramp_attach_name("tt_mix2", UTRAMP_FEXIT, &record_exit, nullptr);
  ASSERT_NE(l, nullptr) << utramp_last_error();
  bool found = false;
  for (const auto& t : utramp::tramp::Manager::instance().list()) {
    if (t.function != "tt_mix2") continue;
    found = true;
    EXPECT_EQ(t.signature_source, "DWARF");
    EXPECT_EQ(t.signature, "(i32, f64, f32, i64) -> f64");
  }
  EXPECT_TRUE(found);
  double (*volatile f)(int, double, float, long) = &tt_mix2;
  const double r = f(2, 0.5, 0.25f, 3);
  double seen;
  std::memcpy(&seen, &g_ret, sizeof seen);
  EXPECT_EQ(seen, r) << "the DWARF signature must make fexit read xmm0";
  ASSERT_EQ(utramp_link_detach(l), 0);
}

}  // namespace


namespace {

// With perf's map on (UTRAMP_PERF_MAP=1, os/perf_map.hpp), each image a change publishes
// gets its "START SIZE utramp_image:FUNCTION" line, so perf names samples in it.
TEST(Tramp, ImageIsNamedInPerfsMapWhenItIsOn) {
  const std::string path = "/tmp/perf-" + std::to_string(getpid()) + ".map";
  const bool existed = access(path.c_str(), F_OK) == 0;
  utramp::os::set_perf_map(true);
  auto* l = utramp_attach(reinterpret_cast<void*>(&tt_add), UTRAMP_FENTRY, &record_entry, nullptr);
  utramp::os::set_perf_map(false);
  ASSERT_NE(l, nullptr) << utramp_last_error();
  std::ifstream in(path);
  int found = 0;
  for (std::string line; std::getline(in, line);) {
    uint64_t start = 0, size = 0;
    char name[128] = {};
    if (std::sscanf(line.c_str(), "%" SCNx64 " %" SCNx64 " %127s", &start, &size, name) == 3 &&
        std::string(name) == "utramp_image:tt_add" && size > 0)
      ++found;
  }
  EXPECT_GE(found, 1) << "no line for tt_add's image in " << path;
  ASSERT_EQ(utramp_link_detach(l), 0);
  if (!existed) unlink(path.c_str());
}

}  // namespace
