// The C API's boundary: every pointer argument checked, option structs that grow,
// bpf_get_func_ret's refusal in fentry, freplace's own call, the read side (link info,
// the list of links) and the batch attach.
#include <gtest/gtest.h>
#include <utramp/utramp.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "targets.h"
#include "tramp_test_util.hpp"

namespace {

using tramp_test::opaque;

bool says(const char* what) { return std::strstr(utramp_last_error(), what) != nullptr; }

uint64_t nop_prog(uint64_t*) { return 0; }

// ---- pointer arguments -----------------------------------------------------------

int nop_handler(utramp_regs*, uint64_t) { return 0; }

TEST(CApi, NullArgumentsOfThreadFunctionsAreRefused) {
  const auto refused_null = [](auto* r, const char* arg) {
    EXPECT_EQ(r, nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_TRUE(says(arg)) << utramp_last_error();
  };
  const auto refused = [](int r, const char* arg) {
    EXPECT_EQ(r, -EINVAL);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_TRUE(says(arg)) << utramp_last_error();
  };
  auto* f = reinterpret_cast<void*>(&tt_add);
  refused(utramp_sites_foreach(nullptr, nullptr, nullptr), "fn is NULL");
  refused_null(utramp_attach(nullptr, UTRAMP_FENTRY, &nop_prog, nullptr), "func is NULL");
  refused_null(utramp_attach(f, UTRAMP_FENTRY, nullptr, nullptr), "prog is NULL");
  refused_null(utramp_attach_name(nullptr, UTRAMP_FENTRY, &nop_prog, nullptr), "symbol is NULL");
  refused_null(utramp_attach_replace(nullptr, f, nullptr), "func is NULL");
  refused_null(utramp_attach_replace(f, nullptr, nullptr), "replacement is NULL");
  refused_null(utramp_attach_replace_name(nullptr, f, nullptr), "symbol is NULL");
  refused(utramp_attach_batch(nullptr, 1), "reqs is NULL");
  EXPECT_EQ(utramp_attach_batch(nullptr, 0), 0);
  refused(utramp_link_detach(nullptr), "link is NULL");
  UTRAMP_OPTS(utramp_link_info, info);
  refused(utramp_link_get_info(nullptr, &info), "link is NULL");
  refused(utramp_link_get_info(reinterpret_cast<utramp_link*>(&info), nullptr), "info is NULL");
  refused(utramp_links_foreach(nullptr, nullptr), "fn is NULL");
  refused_null(utramp_probe_attach(nullptr, &nop_handler, nullptr, 0), "addr is NULL");
  refused_null(utramp_probe_attach_name(nullptr, 0, &nop_handler, nullptr, 0), "symbol is NULL");
  refused_null(utramp_retprobe_attach(nullptr, &nop_handler, nullptr, 0, 0), "func is NULL");
  refused(utramp_probe_detach(nullptr), "probe is NULL");
  // Not NULL but not a link: refused, not followed.
  EXPECT_EQ(utramp_link_detach(reinterpret_cast<utramp_link*>(&info)), -ENOENT);
  EXPECT_EQ(utramp_link_get_info(reinterpret_cast<utramp_link*>(&info), &info), -ENOENT);
}

// A probe handler may call the [any] functions only: the others are refused there.
std::atomic<int> g_handler_errno{-1};
int attaches_from_handler(utramp_regs*, uint64_t) {
  errno = 0;
  g_handler_errno = utramp_attach(reinterpret_cast<void*>(&tt_add), UTRAMP_FENTRY, &nop_prog, nullptr)
                        ? 0
                        : errno;
  return 0;
}

TEST(CApi, ThreadFunctionsAreRefusedInProbeHandlers) {
  // Probes start a thread: canonicalise every site first, while the process has one.
  // The probe goes after the site, whose bytes that changed.
  ASSERT_GT(utramp_sites_discover(), 0) << utramp_last_error();
  uint64_t site = 0;
  utramp_sites_foreach(
      "tt_mix2",
      [](const utramp_site_info* i, void* arg) {
        *static_cast<uint64_t*>(arg) = i->site;
        return 1;
      },
      &site);
  ASSERT_NE(site, 0u);
  auto* p = utramp_probe_attach(reinterpret_cast<void*>(site + 5), &attaches_from_handler, nullptr, 0);
  ASSERT_NE(p, nullptr) << utramp_last_error();
  EXPECT_EQ(opaque(&tt_mix2)(1, 1.0, 1.0f, 1), 1.0);
  EXPECT_EQ(g_handler_errno.load(), EBUSY);
  ASSERT_EQ(utramp_probe_detach(p), 0) << utramp_last_error();
  UTRAMP_OPTS(utramp_link_info, unused);
  EXPECT_EQ(utramp_links_foreach([](const utramp_link_info*, void*) { return 0; }, &unused), 0)
      << "nothing was attached";
}

// The ctx readers run inside programs: no errno change, -EINVAL (or 0), a message.
TEST(CApi, NullArgumentsOfCtxReadersAreRefusedWithoutErrno) {
  uint64_t ctx_mem[8] = {0, 0, 0, 1, 5};  // ctx[-1] = 1 argument, ctx[0] = 5
  const uint64_t* ctx = &ctx_mem[4];
  uint64_t v = 0;
  errno = 1234;
  EXPECT_EQ(utramp_get_func_arg(nullptr, 0, &v), -EINVAL);
  EXPECT_TRUE(says("ctx is NULL")) << utramp_last_error();
  EXPECT_EQ(utramp_get_func_arg(ctx, 0, nullptr), -EINVAL);
  EXPECT_TRUE(says("value is NULL")) << utramp_last_error();
  EXPECT_EQ(utramp_get_func_ret(nullptr, &v), -EINVAL);
  EXPECT_EQ(utramp_get_func_ret(ctx, nullptr), -EINVAL);
  EXPECT_EQ(utramp_get_func_ip(nullptr), 0u);
  EXPECT_EQ(utramp_get_func_arg_cnt(nullptr), 0u);
  EXPECT_EQ(utramp_get_attach_cookie(nullptr), 0u);
  EXPECT_TRUE(says("utramp_get_attach_cookie: ctx is NULL")) << utramp_last_error();
  EXPECT_EQ(errno, 1234);
  EXPECT_EQ(utramp_get_func_arg(ctx, 0, &v), 0);
  EXPECT_EQ(v, 5u);
  EXPECT_EQ(utramp_get_func_arg(ctx, 1, &v), -EINVAL);
}

// ---- bpf_get_func_ret's contract -----------------------------------------------------

int g_entry_rc, g_exit_rc, g_fmod_rc;
uint64_t g_entry_val, g_exit_val, g_fmod_val;

uint64_t ret_in_entry(uint64_t* ctx) {
  g_entry_val = 0x5a5a;
  g_entry_rc = utramp_get_func_ret(ctx, &g_entry_val);
  return 0;
}
uint64_t ret_in_exit(uint64_t* ctx) {
  g_exit_rc = utramp_get_func_ret(ctx, &g_exit_val);
  return 0;
}
uint64_t ret_in_fmod(uint64_t* ctx) {
  g_fmod_rc = utramp_get_func_ret(ctx, &g_fmod_val);
  return 0;
}

// Leaves a pattern where the image's frame will be, so that a slot nobody stored shows.
__attribute__((noinline)) void dirty_stack() {
  volatile uint64_t junk[512];
  for (auto& j : junk) j = 0xabababababababab;
}

TEST(CApi, GetFuncRetIsRefusedInFentryAndZeroForTheFirstFmodRet) {
  auto* e = utramp_attach(reinterpret_cast<void*>(&tt_check), UTRAMP_FENTRY, &ret_in_entry, nullptr);
  ASSERT_NE(e, nullptr) << utramp_last_error();
  auto* m = utramp_attach(reinterpret_cast<void*>(&tt_check), UTRAMP_FMOD_RET, &ret_in_fmod, nullptr);
  ASSERT_NE(m, nullptr) << utramp_last_error();
  auto* x = utramp_attach(reinterpret_cast<void*>(&tt_check), UTRAMP_FEXIT, &ret_in_exit, nullptr);
  ASSERT_NE(x, nullptr) << utramp_last_error();
  g_fmod_val = 0x77;
  dirty_stack();
  EXPECT_EQ(opaque(&tt_check)(-1), -22);
  EXPECT_EQ(g_entry_rc, -EOPNOTSUPP) << "fentry: no return value yet, as the kernel says";
  EXPECT_EQ(g_entry_val, 0x5a5au) << "left unchanged";
  EXPECT_EQ(g_fmod_rc, 0);
  EXPECT_EQ(g_fmod_val, 0u) << "the first fmod_ret program finds 0";
  EXPECT_EQ(g_exit_rc, 0);
  EXPECT_EQ(static_cast<int>(g_exit_val), -22);
  for (auto* l : {e, m, x}) ASSERT_EQ(utramp_link_detach(l), 0) << utramp_last_error();
}

// ---- option structs ------------------------------------------------------------------

uint64_t g_cookie_seen;
uint64_t cookie_prog(uint64_t* ctx) {
  g_cookie_seen = utramp_get_attach_cookie(ctx);
  return 0;
}

TEST(CApi, OptionStructsGrowCompatibly) {
  auto* f = reinterpret_cast<void*>(&tt_add);
  // UTRAMP_OPTS: sz set, the other fields zero.
  UTRAMP_OPTS(utramp_attach_opts, o, .cookie = 7);
  EXPECT_EQ(o.sz, sizeof(utramp_attach_opts));
  EXPECT_EQ(o.signature, nullptr);

  // An older caller's struct, without `signature`: the default is used.
  utramp_attach_opts older = o;
  older.signature = "this is not read";
  older.sz = offsetof(utramp_attach_opts, signature);
  auto* l = utramp_attach(f, UTRAMP_FENTRY, &cookie_prog, &older);
  ASSERT_NE(l, nullptr) << utramp_last_error();
  EXPECT_EQ(opaque(&tt_add)(1, 2), 3);
  EXPECT_EQ(g_cookie_seen, 7u);
  ASSERT_EQ(utramp_link_detach(l), 0);

  // A newer caller's struct: zero bytes beyond what the library knows are fine...
  struct {
    utramp_attach_opts known;
    uint64_t newer_field;
  } newer{};
  newer.known = o;
  newer.known.sz = sizeof newer;
  l = utramp_attach(f, UTRAMP_FENTRY, &cookie_prog, &newer.known);
  ASSERT_NE(l, nullptr) << utramp_last_error();
  ASSERT_EQ(utramp_link_detach(l), 0);
  // ... a field set there is refused: this library cannot honour it.
  newer.newer_field = 1;
  EXPECT_EQ(utramp_attach(f, UTRAMP_FENTRY, &cookie_prog, &newer.known), nullptr);
  EXPECT_EQ(errno, E2BIG);
  EXPECT_TRUE(says("byte 24")) << utramp_last_error();
  // sz must at least cover itself.
  o.sz = 0;
  EXPECT_EQ(utramp_attach(f, UTRAMP_FENTRY, &cookie_prog, &o), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_TRUE(says("utramp_attach_opts.sz is 0")) << utramp_last_error();
}

// ---- freplace ------------------------------------------------------------------------

TEST(CApi, FreplaceHasItsOwnCall) {
  auto* f = reinterpret_cast<void*>(&tt_replace_me);
  EXPECT_EQ(utramp_attach(f, UTRAMP_FREPLACE, &nop_prog, nullptr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_TRUE(says("utramp_attach_replace")) << utramp_last_error();
  UTRAMP_OPTS(utramp_attach_opts, o, .cookie = 3);
  auto* l = utramp_attach_replace_name("tt_replace_me", reinterpret_cast<void*>(&tt_replacement), &o);
  ASSERT_NE(l, nullptr) << utramp_last_error();
  EXPECT_EQ(opaque(&tt_replace_me)(2), 200);
  UTRAMP_OPTS(utramp_link_info, info);
  ASSERT_EQ(utramp_link_get_info(l, &info), 0) << utramp_last_error();
  EXPECT_EQ(info.type, uint64_t{UTRAMP_FREPLACE});
  EXPECT_EQ(info.prog, nullptr);
  EXPECT_EQ(info.replacement, reinterpret_cast<void*>(&tt_replacement));
  EXPECT_EQ(info.cookie, 3u);
  ASSERT_EQ(utramp_link_detach(l), 0);
  EXPECT_EQ(opaque(&tt_replace_me)(2), 3);
}

// ---- the read side -------------------------------------------------------------------

uint64_t counted(uint64_t*) { return 0; }

TEST(CApi, LinkInfoReportsWhatTheLinkIsAndDid) {
  UTRAMP_OPTS(utramp_attach_opts, o, .cookie = 0xc0ffee, .signature = "i64,i64 -> i64");
  auto* l = utramp_attach(reinterpret_cast<void*>(&tt_add), UTRAMP_FEXIT, &counted, &o);
  ASSERT_NE(l, nullptr) << utramp_last_error();
  utramp_set_stats(1);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(opaque(&tt_add)(i, 1), i + 1);
  utramp_set_stats(0);
  UTRAMP_OPTS(utramp_link_info, info);
  ASSERT_EQ(utramp_link_get_info(l, &info), 0) << utramp_last_error();
  EXPECT_NE(info.id, 0u);
  EXPECT_EQ(info.type, uint64_t{UTRAMP_FEXIT});
  EXPECT_EQ(info.func, reinterpret_cast<void*>(&tt_add));
  EXPECT_STREQ(info.func_name, "tt_add");
  EXPECT_EQ(info.prog, &counted);
  EXPECT_EQ(info.replacement, nullptr);
  EXPECT_EQ(info.cookie, 0xc0ffeeu);
  EXPECT_EQ(info.run_cnt, 5u);
  EXPECT_GT(info.run_time_ns, 0u);
  EXPECT_EQ(info.misses, 0u);
  EXPECT_EQ(info.link, l);

  // An older caller knows fewer fields: those beyond its sz are not written.
  utramp_link_info older;
  std::memset(&older, 0xee, sizeof older);
  older.sz = offsetof(utramp_link_info, func);
  ASSERT_EQ(utramp_link_get_info(l, &older), 0);
  EXPECT_EQ(older.sz, offsetof(utramp_link_info, func));
  EXPECT_EQ(older.type, uint64_t{UTRAMP_FEXIT});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(older.func), 0xeeeeeeeeeeeeeeeeu);
  // A newer one knows more: what this library does not know reads as zero.
  struct {
    utramp_link_info known;
    uint64_t later;
  } newer;
  std::memset(&newer, 0xee, sizeof newer);
  newer.known.sz = sizeof newer;
  ASSERT_EQ(utramp_link_get_info(l, &newer.known), 0);
  EXPECT_EQ(newer.known.cookie, 0xc0ffeeu);
  EXPECT_EQ(newer.later, 0u);
  older.sz = 4;
  EXPECT_EQ(utramp_link_get_info(l, &older), -EINVAL);

  ASSERT_EQ(utramp_link_detach(l), 0);
  EXPECT_EQ(utramp_link_get_info(l, &info), -ENOENT);
}

TEST(CApi, LinksAreListedInAttachOrder) {
  std::vector<utramp_link*> mine;
  UTRAMP_OPTS(utramp_attach_opts, o, .signature = "i64,i64 -> i64");
  for (utramp_attach_type t : {UTRAMP_FENTRY, UTRAMP_FEXIT, UTRAMP_FENTRY}) {
    mine.push_back(utramp_attach(reinterpret_cast<void*>(&tt_add), t, &nop_prog, &o));
    ASSERT_NE(mine.back(), nullptr) << utramp_last_error();
  }
  std::vector<utramp_link*> listed;
  const int n = utramp_links_foreach(
      [](const utramp_link_info* i, void* arg) {
        static_cast<std::vector<utramp_link*>*>(arg)->push_back(i->link);
        return 0;
      },
      &listed);
  EXPECT_EQ(n, 3);
  EXPECT_EQ(listed, mine);
  // Stopping early, and detaching from the callback (a snapshot is listed).
  const int first = utramp_links_foreach(
      [](const utramp_link_info* i, void*) { return utramp_link_detach(i->link) == 0 ? 1 : -1; },
      nullptr);
  EXPECT_EQ(first, 1);
  EXPECT_EQ(utramp_links_foreach([](const utramp_link_info*, void*) { return 0; }, nullptr), 2);
  for (size_t i = 1; i < mine.size(); ++i) ASSERT_EQ(utramp_link_detach(mine[i]), 0);
}

int g_batch_runs;
uint64_t batch_prog(uint64_t*) {
  ++g_batch_runs;
  return 0;
}

TEST(CApi, BatchAttachesEachRequestOnItsOwn) {
  UTRAMP_OPTS(utramp_attach_opts, add, .signature = "i64,i64 -> i64");
  UTRAMP_OPTS(utramp_attach_opts, mix, .signature = "i32,f64,f32,i64 -> f64");
  utramp_attach_req reqs[] = {
      {reinterpret_cast<void*>(&tt_add), UTRAMP_FENTRY, &batch_prog, &add, nullptr, 0},
      {reinterpret_cast<void*>(&tt_unmarked), UTRAMP_FMOD_RET, &batch_prog, nullptr, nullptr, 0},
      {reinterpret_cast<void*>(&tt_mix), UTRAMP_FEXIT, &batch_prog, &mix, nullptr, 0},
      {reinterpret_cast<void*>(&tt_add), UTRAMP_FEXIT, nullptr, &add, nullptr, 0},
      {reinterpret_cast<void*>(&tt_add), UTRAMP_FREPLACE, &batch_prog, &add, nullptr, 0},
      {reinterpret_cast<void*>(&tt_add), UTRAMP_FEXIT, &batch_prog, &add, nullptr, 0},
  };
  errno = 0;
  EXPECT_EQ(utramp_attach_batch(reqs, std::size(reqs)), 3);
  EXPECT_TRUE(says("request 1")) << utramp_last_error();
  EXPECT_TRUE(says("UTRAMP_ALLOW_ERROR_INJECTION")) << utramp_last_error();
  EXPECT_EQ(errno, EINVAL);
  const int want_err[] = {0, -EINVAL, 0, -EINVAL, -EINVAL, 0};
  for (size_t i = 0; i < std::size(reqs); ++i) {
    EXPECT_EQ(reqs[i].err, want_err[i]) << "request " << i;
    EXPECT_EQ(reqs[i].link != nullptr, want_err[i] == 0) << "request " << i;
  }
  g_batch_runs = 0;
  EXPECT_EQ(opaque(&tt_add)(2, 3), 5);
  EXPECT_EQ(g_batch_runs, 2);
  EXPECT_EQ(opaque(&tt_mix)(1, 1.0, 1.0f, 1), 1 + 2.0 + 3.0 + 4.0);
  EXPECT_EQ(g_batch_runs, 3);
  for (auto& r : reqs) {
    if (r.link) {
      ASSERT_EQ(utramp_link_detach(r.link), 0) << utramp_last_error();
    }
  }
}

}  // namespace
