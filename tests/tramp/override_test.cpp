// UTRAMP_OVERRIDABLE (utramp.h): with both compilers at -O2, what fmod_ret and freplace
// make a function return is what its callers see, even callers in its own file.
#include <gtest/gtest.h>
#include <utramp/utramp.h>

#include <cerrno>
#include <ostream>
#include <string>

extern "C" {
#define DECLARE(P)                          \
  int P##echo(int) __attribute__((weak));   \
  int P##is_big(int) __attribute__((weak)); \
  extern int (*P##twice_ptr)(int) __attribute__((weak)); \
  int P##call_echo(int) __attribute__((weak)); \
  int P##call_is_big_twice(int) __attribute__((weak)); \
  int P##call_twice(int) __attribute__((weak));
DECLARE(ovr_gcc_)
DECLARE(ovr_clang_)
}

namespace {

struct Build {
  const char* name;
  int (*echo)(int);
  int (*is_big)(int);
  int (**twice)(int);
  int (*call_echo)(int);
  int (*call_is_big_twice)(int);
  int (*call_twice)(int);
};

const Build kBuilds[] = {
    {"gcc", ovr_gcc_echo, ovr_gcc_is_big, &ovr_gcc_twice_ptr, ovr_gcc_call_echo,
     ovr_gcc_call_is_big_twice, ovr_gcc_call_twice},
    {"clang", ovr_clang_echo, ovr_clang_is_big, &ovr_clang_twice_ptr, ovr_clang_call_echo,
     ovr_clang_call_is_big_twice, ovr_clang_call_twice},
};

void PrintTo(const Build& b, std::ostream* os) { *os << b.name; }

uint64_t inject_minus_5(uint64_t*) { return static_cast<uint64_t>(-5); }
int thrice(int x) { return 3 * x; }

class Override : public testing::TestWithParam<Build> {
 protected:
  void SetUp() override {
    if (!GetParam().echo) GTEST_SKIP() << GetParam().name << " not found: its build is missing";
  }
};

TEST_P(Override, FmodRetResultReachesTheCaller) {
  const Build& b = GetParam();
  ASSERT_EQ(b.call_echo(41), 42);
  utramp_link* l = utramp_attach(reinterpret_cast<void*>(b.echo), UTRAMP_FMOD_RET,
                                 &inject_minus_5, nullptr);
  ASSERT_NE(l, nullptr) << utramp_last_error();
  EXPECT_EQ(b.call_echo(41), -5);
  ASSERT_EQ(utramp_link_detach(l), 0);
  EXPECT_EQ(b.call_echo(41), 42);
}

TEST_P(Override, EveryCallOfAPureFunctionRuns) {
  const Build& b = GetParam();
  ASSERT_EQ(b.call_is_big_twice(5), 0);
  utramp_link* l = utramp_attach(reinterpret_cast<void*>(b.is_big), UTRAMP_FMOD_RET,
                                 &inject_minus_5, nullptr);
  ASSERT_NE(l, nullptr) << utramp_last_error();
  EXPECT_EQ(b.call_is_big_twice(5), -10);  // both calls made, neither folded
  ASSERT_EQ(utramp_link_detach(l), 0);
}

TEST_P(Override, FreplaceOfAStaticFunctionReachesTheCaller) {
  const Build& b = GetParam();
  ASSERT_EQ(b.call_twice(10), 21);
  utramp_link* l = utramp_attach_replace(reinterpret_cast<void*>(*b.twice),
                                         reinterpret_cast<void*>(&thrice), nullptr);
  ASSERT_NE(l, nullptr) << utramp_last_error();
  EXPECT_EQ(b.call_twice(10), 31);
  ASSERT_EQ(utramp_link_detach(l), 0);
  EXPECT_EQ(b.call_twice(10), 21);
}

INSTANTIATE_TEST_SUITE_P(Compilers, Override, testing::ValuesIn(kBuilds),
                         [](const testing::TestParamInfo<Build>& i) { return std::string(i.param.name); });

}  // namespace
