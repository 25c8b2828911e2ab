// The typed C++ API: signatures from function pointer types, typed programs, RAII links.
#include <gtest/gtest.h>
#include <utramp/utramp.hpp>

#include <string>

extern "C" {
int64_t tt_add(int64_t, int64_t);
double tt_mix(int, double, float, long);
int tt_check(int);
int tt_replace_me(int);
int tt_replacement(int);
}

namespace {

template <class F>
F* opaque(F* f) {
  F* volatile p = f;
  return p;
}

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

}  // namespace
