// The typed C++ API: signatures from function pointer types, typed programs, RAII links.
#include <gtest/gtest.h>
#include <utramp/utramp.hpp>

#include <memory>
#include <string>

#include "targets.h"
#include "tramp_test_util.hpp"

namespace {

using tramp_test::opaque;

TEST(CppApi, TypedFentryAndFexit) {
  int64_t seen_a = 0, seen_b = 0, seen_ret = 0;
  {
    auto l1 = utramp::fentry(&tt_add, [&](int64_t a, int64_t b) {
      seen_a = a;
      seen_b = b;
    });
    auto l2 = utramp::fexit(&tt_add, [&](int64_t, int64_t, int64_t r) { seen_ret = r; });
    EXPECT_EQ(opaque(&tt_add)(-5, 12), 7);
    EXPECT_EQ(seen_a, -5);
    EXPECT_EQ(seen_b, 12);
    EXPECT_EQ(seen_ret, 7);
  }
  seen_ret = 0;
  EXPECT_EQ(opaque(&tt_add)(1, 1), 2);
  EXPECT_EQ(seen_ret, 0) << "links detach when destroyed";
}

TEST(CppApi, FloatsAndDoublesArriveTyped) {
  double got_b = 0, got_ret = 0;
  float got_c = 0;
  int got_a = 0;
  long got_d = 0;
  auto l = utramp::fexit(&tt_mix, [&](int a, double b, float c, long d, double r) {
    got_a = a;
    got_b = b;
    got_c = c;
    got_d = d;
    got_ret = r;
  });
  const double r = opaque(&tt_mix)(-3, 0.25, 1.5f, 1000000000000L);
  EXPECT_EQ(got_a, -3);
  EXPECT_EQ(got_b, 0.25);
  EXPECT_EQ(got_c, 1.5f);
  EXPECT_EQ(got_d, 1000000000000L);
  EXPECT_EQ(got_ret, r);
}

TEST(CppApi, FmodRetAndFreplace) {
  {
    auto l = utramp::fmod_ret(&tt_check, [](int x) -> int { return x == 99 ? -7 : 0; });
    EXPECT_EQ(opaque(&tt_check)(99), -7);
    EXPECT_EQ(opaque(&tt_check)(1), 0);
  }
  {
    auto l = utramp::freplace(&tt_replace_me, &tt_replacement);
    EXPECT_EQ(opaque(&tt_replace_me)(2), 200);
  }
  EXPECT_EQ(opaque(&tt_replace_me)(2), 3);
}

TEST(CppApi, ErrorsThrow) {
  try {
    auto l = utramp::fmod_ret(reinterpret_cast<int (*)(int)>(&tt_replace_me), [](int) { return 1; });
    FAIL() << "fmod_ret on an unmarked function must throw";
  } catch (const utramp::error& e) {
    EXPECT_NE(std::string(e.what()).find("UTRAMP_ALLOW_ERROR_INJECTION"), std::string::npos) << e.what();
  }
}

// utramp_link_detach returns when no thread runs the program any more: the program
// object (and what it owns) goes at once, not kept for the process's lifetime.
TEST(CppApi, ProgramObjectIsDestroyedRightAfterDetach) {
  auto owned = std::make_shared<int>(5);
  std::weak_ptr<int> watch = owned;
  int seen = 0;
  {
    auto l = utramp::fentry(&tt_add, [owned = std::move(owned), &seen](int64_t, int64_t) { seen = *owned; });
    EXPECT_EQ(opaque(&tt_add)(1, 2), 3);
    EXPECT_EQ(seen, 5);
    EXPECT_FALSE(watch.expired());
  }
  EXPECT_TRUE(watch.expired()) << "the program object outlived its link";

  auto again = std::make_shared<int>(6);
  watch = again;
  auto l = utramp::fexit(&tt_add, [again = std::move(again)](int64_t, int64_t, int64_t) {});
  l.detach();
  EXPECT_FALSE(l);
  EXPECT_TRUE(watch.expired());
}

TEST(CppApi, LinkInfo) {
  auto l = utramp::fexit(&tt_check, [](int, int) {});
  const utramp_link_info i = l.info();
  EXPECT_EQ(i.type, uint64_t{UTRAMP_FEXIT});
  EXPECT_STREQ(i.func_name, "tt_check");
  EXPECT_NE(i.cookie, 0u) << "the typed layer's cookie is its program object";
  l.detach();
  EXPECT_THROW(l.info(), utramp::error);
}

// A Link destroyed where it cannot be detached (inside a program) is not dropped
// silently: the failure is reported, the link stays attached and its program object
// alive (it may still run).
utramp::Link g_victim;
TEST(CppApi, ALinkThatCannotDetachKeepsItsProgram) {
  auto owned = std::make_shared<int>(0);
  std::weak_ptr<int> watch = owned;
  g_victim = utramp::fentry(&tt_mix, [owned = std::move(owned)](int, double, float, long) { ++*owned; });
  auto killer = utramp::fentry(&tt_add, [](int64_t, int64_t) { g_victim = utramp::Link(); });
  testing::internal::CaptureStderr();
  EXPECT_EQ(opaque(&tt_add)(1, 1), 2);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(g_victim);
  EXPECT_NE(err.find("could not be detached"), std::string::npos) << err;
  EXPECT_NE(err.find("inside a program"), std::string::npos) << err;
  ASSERT_FALSE(watch.expired()) << "the program object of a still attached link was destroyed";
  opaque(&tt_mix)(1, 1.0, 1.0f, 1);
  EXPECT_EQ(*watch.lock(), 1) << "the link is still attached";
  killer.detach();
  // Clean up through the C API: the handle was lost on purpose.
  utramp_links_foreach(
      [](const utramp_link_info* i, void*) {
        if (i->func == reinterpret_cast<void*>(&tt_mix)) {
          EXPECT_EQ(utramp_link_detach(i->link), 0);
        }
        return 0;
      },
      nullptr);
}

}  // namespace
