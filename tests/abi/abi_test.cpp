// The System V ABI through the trampoline: every case of abi_cases.h, in every build of
// abi_targets.c (gcc and clang, -O0 and -O2), with each attach type.
//
// For each case the untraced result comes first (the traced build before any attach,
// and the reference build, which must agree); then, one attach type at a time:
//   fentry           the program sees ctx[0..n-1] as the documented layout encodes the
//                    arguments; the call returns exactly the untraced bytes
//   fexit            the same arguments, and ctx[n] (ctx[n+1]) encode the return value
//   fentry + fexit   both, on one image
//   fmod_ret         integer, pointer and void returns: 0 runs the body, non-zero skips
//                    it and is the result (which fexit sees); other returns are refused
//   freplace         the twin rep_<name> runs instead and its result is returned
// and, after all links are gone, the untraced result again.
//
// Two passes: `sig_*` gives each signature as utramp_attach_opts.signature; `dwarf_*`
// attaches without options to a build of its own (a trampoline keeps the signature of
// its first attach), so the signature comes from the fixture's DWARF, and must describe
// the same convention as the option string.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utramp/utramp.h>

#include <array>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "abi_cases.h"
#include "abi/signature.hpp"
#include "tramp/trampoline.hpp"

extern "C" {
// Weak: a build whose compiler this machine lacks is absent, and its test says so.
#define ABI_DECLARE(cc, opt)                                                  \
  extern const abi_build abi_##cc##_##opt##_build __attribute__((weak));      \
  extern const abi_build dwf_##cc##_##opt##_build __attribute__((weak));      \
  extern const abi_build ref_##cc##_##opt##_build __attribute__((weak));
ABI_DECLARE(gcc, O0)
ABI_DECLARE(gcc, O2)
ABI_DECLARE(clang, O0)
ABI_DECLARE(clang, O2)
#undef ABI_DECLARE
}

namespace {

using Bytes = std::vector<uint8_t>;

struct Flavour {
  const char* name;
  const abi_build* traced;  // -fpatchable-function-entry=5, attached with signatures
  const abi_build* dwarf;   // the same, attached without: signatures from DWARF
  const abi_build* ref;     // the same source, never traced
};

const Flavour kFlavours[] = {
    {"gcc_O0", &abi_gcc_O0_build, &dwf_gcc_O0_build, &ref_gcc_O0_build},
    {"gcc_O2", &abi_gcc_O2_build, &dwf_gcc_O2_build, &ref_gcc_O2_build},
    {"clang_O0", &abi_clang_O0_build, &dwf_clang_O0_build, &ref_clang_O0_build},
    {"clang_O2", &abi_clang_O2_build, &dwf_clang_O2_build, &ref_clang_O2_build},
};

// ---- What a case must look like to programs --------------------------------------

// One ctx argument slot: a value (the argument's bytes, zero-extended, eightbyte by
// eightbyte) or, for an argument passed in memory, the address of the caller's copy,
// whose bytes must be `bytes`.
struct SlotExp {
  bool memory = false;
  uint64_t value = 0;
  Bytes bytes;
};

enum class RetKind { none, reg, x87, memory };

struct Spec {
  std::string name;
  std::string sig;
  std::vector<SlotExp> args;
  RetKind ret = RetKind::reg;
  size_t ret_bytes = 0;   // bytes of the result the driver reports (the sink for void)
  bool fmod_ok = false;   // integer, pointer or void return
};

Bytes bytes_of(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  return Bytes(b, b + n);
}

// Eightbytes of `n` bytes, each zero-extended.
std::vector<uint64_t> eightbytes(const void* p, size_t n) {
  std::vector<uint64_t> out((n + 7) / 8, 0);
  std::memcpy(out.data(), p, n);
  return out;
}

template <class T>
void expect_arg(const T& v, std::vector<SlotExp>& out) {
  if constexpr (std::is_same_v<T, long double>) {
    out.push_back({true, 0, bytes_of(&v, 10)});  // x87: 10 value bytes, 6 of padding
  } else if constexpr (std::is_class_v<T> && (sizeof(T) > 16)) {
    out.push_back({true, 0, bytes_of(&v, sizeof v)});
  } else {
    static_assert(sizeof(T) <= 16);
    for (uint64_t e : eightbytes(&v, sizeof v)) out.push_back({false, e, {}});
  }
}

// The named arguments converted to the parameter types, as the call converts them.
template <class R, class... A>
std::vector<SlotExp> expected_args(R (*)(A...), std::type_identity_t<A>... a) {
  std::vector<SlotExp> v;
  (expect_arg(a, v), ...);
  return v;
}
template <class R, class... A>
std::vector<SlotExp> expected_args(R (*)(A..., ...), std::type_identity_t<A>... a) {
  std::vector<SlotExp> v;
  (expect_arg(a, v), ...);
  return v;
}

template <class Fn>
struct FnTraits;
template <class R, class... A>
struct FnTraits<R(A...)> {
  using Ret = R;
};
template <class R, class... A>
struct FnTraits<R(A..., ...)> {
  using Ret = R;
};

template <class Fn>
Spec make_spec(const char* name, const char* sig, std::vector<SlotExp> args) {
  using R = typename FnTraits<Fn>::Ret;
  Spec s{name, sig, std::move(args)};
  if constexpr (std::is_void_v<R>) {
    s.ret = RetKind::none;
    s.ret_bytes = sizeof(long);
    s.fmod_ok = true;
  } else {
    s.ret_bytes = sizeof(R);
    if constexpr (std::is_same_v<R, long double>) {
      s.ret = RetKind::x87;
      s.ret_bytes = 10;
    } else if constexpr (std::is_class_v<R> && (sizeof(R) > 16)) {
      s.ret = RetKind::memory;
    }
    s.fmod_ok = (std::is_integral_v<R> || std::is_pointer_v<R>) && sizeof(R) <= 8;
  }
  return s;
}

#define ABI_UNPAREN(...) __VA_ARGS__
#define ABI_SPEC(name, R, P, sig, named, all) \
  make_spec<R P>(#name, sig, expected_args(static_cast<R(*) P>(nullptr), ABI_UNPAREN named)),

const std::vector<Spec>& specs() {
  static const std::vector<Spec> v = {ABI_CASES(ABI_SPEC) ABI_VOID_CASES(ABI_SPEC)};
  return v;
}

std::string hex(const Bytes& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t x : b) {
    s += d[x >> 4];
    s += d[x & 15];
  }
  return s;
}
std::string hex64(uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof buf, "%#018llx", static_cast<unsigned long long>(v));
  return buf;
}

// ---- The programs: record what they see --------------------------------------------

constexpr int kMaxSlots = 32;
constexpr size_t kMaxMem = 64;

struct Record {
  int runs = 0;
  uint64_t n = 0, ip = 0;
  uint64_t slot[kMaxSlots + 2] = {};
  // Bytes at the address in a memory slot (and at ctx[n] for a hidden-pointer return),
  // copied while the program runs: the caller's copy lives only during the call.
  uint8_t mem[kMaxSlots + 1][kMaxMem] = {};
  bool mem_seen[kMaxSlots + 1] = {};
};

// What the programs copy, set before each call.
struct Armed {
  int nslots = 0;
  size_t mem_len[kMaxSlots + 1] = {};  // non-zero: slot holds an address of that many bytes
} g_arm;

Record g_entry, g_exit;
int g_fmod_runs;
uint64_t g_fmod_value;

void snapshot(Record& r, const uint64_t* ctx, int i) {
  if (!g_arm.mem_len[i]) return;
  // The caller's copy is on this thread's stack; refuse to read anything else.
  const auto frame = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  const uintptr_t p = ctx[i];
  if (p < frame || p - frame > (1u << 20)) return;
  std::memcpy(r.mem[i], reinterpret_cast<const void*>(p), g_arm.mem_len[i]);
  r.mem_seen[i] = true;
}

void record(Record& r, const uint64_t* ctx, int extra) {
  ++r.runs;
  r.n = utramp_get_func_arg_cnt(ctx);
  r.ip = utramp_get_func_ip(ctx);
  const int n = static_cast<int>(r.n < kMaxSlots ? r.n : kMaxSlots);
  for (int i = 0; i < n; ++i) {
    if (utramp_get_func_arg(ctx, uint32_t(i), &r.slot[i]) != 0) r.slot[i] = 0xbad;
    snapshot(r, ctx, i);
  }
  for (int i = 0; i < extra; ++i) r.slot[n + i] = ctx[n + i];
  if (extra) snapshot(r, ctx, n);
}

uint64_t on_entry(uint64_t* ctx) {
  record(g_entry, ctx, 0);
  return 0;
}
uint64_t on_exit(uint64_t* ctx) {
  record(g_exit, ctx, 2);
  return 0;
}
uint64_t on_fmod(uint64_t*) {
  ++g_fmod_runs;
  return g_fmod_value;
}

void arm(const Spec& s) {
  g_arm = {};
  g_arm.nslots = static_cast<int>(s.args.size());
  for (size_t i = 0; i < s.args.size(); ++i)
    if (s.args[i].memory) g_arm.mem_len[i] = s.args[i].bytes.size();
  if (s.ret == RetKind::memory) g_arm.mem_len[s.args.size()] = s.ret_bytes;
  g_entry = {};
  g_exit = {};
  g_fmod_runs = 0;
}

// ---- Checks -------------------------------------------------------------------------

void check_args(const Spec& s, const Record& r, const abi_entry& e, const char* who) {
  SCOPED_TRACE(who);
  ASSERT_EQ(r.runs, 1) << "the program ran once";
  EXPECT_EQ(r.ip, reinterpret_cast<uint64_t>(e.fn)) << "ctx[-2] is the function";
  ASSERT_EQ(r.n, s.args.size()) << "ctx[-1] is the number of argument slots";
  for (size_t i = 0; i < s.args.size(); ++i) {
    const SlotExp& x = s.args[i];
    if (x.memory) {
      ASSERT_TRUE(r.mem_seen[i]) << "ctx[" << i << "] = " << hex64(r.slot[i])
                                 << " is not the address of the caller's copy";
      EXPECT_EQ(hex(bytes_of(r.mem[i], x.bytes.size())), hex(x.bytes))
          << "bytes at ctx[" << i << "]";
    } else {
      EXPECT_EQ(hex64(r.slot[i]), hex64(x.value)) << "ctx[" << i << "]";
    }
  }
}

void check_ret(const Spec& s, const Record& r, const Bytes& value) {
  const size_t n = s.args.size();
  switch (s.ret) {
    case RetKind::none:
      return;
    case RetKind::reg: {
      const auto e = eightbytes(value.data(), value.size());
      for (size_t i = 0; i < e.size(); ++i)
        EXPECT_EQ(hex64(r.slot[n + i]), hex64(e[i])) << "return slot ctx[" << n + i << "]";
      return;
    }
    case RetKind::x87:
      EXPECT_EQ(hex(bytes_of(&r.slot[n], 10)), hex(value)) << "x87 value in ctx[n], ctx[n+1]";
      return;
    case RetKind::memory:
      ASSERT_TRUE(r.mem_seen[n]) << "ctx[n] = " << hex64(r.slot[n])
                                 << " is not the caller's return buffer";
      EXPECT_EQ(hex(bytes_of(r.mem[n], value.size())), hex(value)) << "bytes at ctx[n]";
      return;
  }
}

Bytes call(void (*drive)(void*), size_t n) {
  alignas(16) uint8_t buf[kMaxMem] = {};
  drive(buf);
  return Bytes(buf, buf + n);
}

// Attaches with the entry's signature string, or with no options (DWARF).
struct Linked {
  utramp_link* link = nullptr;
  Linked(const abi_entry& e, utramp_attach_type t, void* prog, bool dwarf) {
    UTRAMP_OPTS(utramp_attach_opts, o, .signature = e.signature);
    link = t == UTRAMP_FREPLACE
               ? utramp_attach_replace(e.fn, prog, dwarf ? nullptr : &o)
               : utramp_attach(e.fn, t, reinterpret_cast<utramp_prog_t>(prog), dwarf ? nullptr : &o);
  }
  ~Linked() {
    if (link) {
      EXPECT_EQ(utramp_link_detach(link), 0) << utramp_last_error();
    }
  }
  Linked(const Linked&) = delete;
  Linked& operator=(const Linked&) = delete;
};

void* as_prog(uint64_t (*p)(uint64_t*)) { return reinterpret_cast<void*>(p); }

// The signature the function's trampoline uses, and where it came from.
std::pair<std::string, std::string> trampoline_signature(const void* fn) {
  for (const auto& t : utramp::tramp::Manager::instance().list())
    if (t.func == reinterpret_cast<uint64_t>(fn)) return {t.signature, t.signature_source};
  return {"(no trampoline)", ""};
}

// The DWARF pass: the trampoline took its signature from DWARF, and it is the option
// string's convention.
void check_dwarf_signature(const abi_entry& e) {
  const auto [sig, source] = trampoline_signature(e.fn);
  EXPECT_EQ(source, "DWARF") << sig;
  auto want = utramp::abi::parse_signature(e.signature);
  ASSERT_TRUE(want) << want.error().message;
  EXPECT_EQ(sig, want->describe()) << "from the option string " << e.signature;
}

// ---- The tests ------------------------------------------------------------------------

struct Param {
  size_t flavour;
  size_t spec;
  bool dwarf;
};
void PrintTo(const Param& p, std::ostream* os) {
  *os << (p.dwarf ? "DWARF, " : "signature, ") << kFlavours[p.flavour].name << ", "
      << specs()[p.spec].name << " " << specs()[p.spec].sig;
}

class Abi : public ::testing::TestWithParam<Param> {};

TEST_P(Abi, EveryAttachType) {
  const Flavour& fl = kFlavours[GetParam().flavour];
  const Spec& s = specs()[GetParam().spec];
  const bool dwarf = GetParam().dwarf;
  if (!fl.traced || !fl.ref) GTEST_SKIP() << fl.name << " was not built (compiler not found)";
  const abi_build& build = dwarf ? *fl.dwarf : *fl.traced;
  const abi_entry& e = build.cases[GetParam().spec];
  const abi_entry& ref = fl.ref->cases[GetParam().spec];
  ASSERT_STREQ(e.name, s.name.c_str());
  ASSERT_STREQ(ref.name, s.name.c_str());
  ASSERT_LE(s.args.size(), size_t(kMaxSlots));
  if ((s.name == "i128s" || s.name == "i128odd") && !build.i128_psabi)
    GTEST_SKIP() << build.compiler
                 << " passes a stack __int128 against the psABI (LLVM before 18 splits it "
                    "between r9 and the stack and aligns it to 8); the trampoline follows "
                    "the psABI, as gcc does";

  const Bytes untraced = call(e.drive, s.ret_bytes);
  EXPECT_EQ(hex(untraced), hex(call(ref.drive, s.ret_bytes)))
      << "the traced build and the reference build disagree before any attach";
  const Bytes replaced = call(ref.drive_rep, s.ret_bytes);
  ASSERT_NE(hex(replaced), hex(untraced)) << "the replacement must be distinguishable";
  if (s.ret == RetKind::none) {
    ASSERT_NE(hex(untraced), hex(Bytes(s.ret_bytes, 0))) << "the void function stores a result";
  }

  {
    SCOPED_TRACE("fentry");
    Linked l(e, UTRAMP_FENTRY, as_prog(&on_entry), dwarf);
    ASSERT_NE(l.link, nullptr) << utramp_last_error();
    if (dwarf) check_dwarf_signature(e);
    arm(s);
    EXPECT_EQ(hex(call(e.drive, s.ret_bytes)), hex(untraced));
    check_args(s, g_entry, e, "fentry");
  }
  {
    SCOPED_TRACE("fexit");
    Linked l(e, UTRAMP_FEXIT, as_prog(&on_exit), dwarf);
    ASSERT_NE(l.link, nullptr) << utramp_last_error();
    arm(s);
    EXPECT_EQ(hex(call(e.drive, s.ret_bytes)), hex(untraced));
    check_args(s, g_exit, e, "fexit");
    check_ret(s, g_exit, untraced);
  }
  {
    SCOPED_TRACE("fentry+fexit");
    Linked l1(e, UTRAMP_FEXIT, as_prog(&on_exit), dwarf);
    ASSERT_NE(l1.link, nullptr) << utramp_last_error();
    Linked l2(e, UTRAMP_FENTRY, as_prog(&on_entry), dwarf);
    ASSERT_NE(l2.link, nullptr) << utramp_last_error();
    arm(s);
    EXPECT_EQ(hex(call(e.drive, s.ret_bytes)), hex(untraced));
    check_args(s, g_entry, e, "fentry");
    check_args(s, g_exit, e, "fexit");
    check_ret(s, g_exit, untraced);
  }
  {
    SCOPED_TRACE("fmod_ret");
    Linked l(e, UTRAMP_FMOD_RET, as_prog(&on_fmod), dwarf);
    if (!s.fmod_ok) {
      EXPECT_EQ(l.link, nullptr) << "fmod_ret on a function returning " << s.sig;
      EXPECT_NE(std::string(utramp_last_error()).find("fmod_ret needs an integer"),
                std::string::npos)
          << utramp_last_error();
    } else {
      ASSERT_NE(l.link, nullptr) << utramp_last_error();
      Linked lx(e, UTRAMP_FEXIT, as_prog(&on_exit), dwarf);
      ASSERT_NE(lx.link, nullptr) << utramp_last_error();
      arm(s);
      g_fmod_value = 0;
      EXPECT_EQ(hex(call(e.drive, s.ret_bytes)), hex(untraced)) << "0 runs the body";
      EXPECT_EQ(g_fmod_runs, 1);
      check_ret(s, g_exit, untraced);

      arm(s);
      g_fmod_value = 0xffffffffffffffeaull;  // -EINVAL, in every integer width
      // The body is skipped: its result is the program's, cut to the return type; a
      // void function leaves the sink as its driver cleared it.
      const Bytes injected = s.ret == RetKind::none
                                 ? Bytes(s.ret_bytes, 0)
                                 : bytes_of(&g_fmod_value, s.ret_bytes);
      EXPECT_EQ(hex(call(e.drive, s.ret_bytes)), hex(injected)) << "non-zero skips the body";
      EXPECT_EQ(g_fmod_runs, 1);
      EXPECT_EQ(g_exit.runs, 1);
      if (s.ret != RetKind::none) {
        EXPECT_EQ(hex(bytes_of(&g_exit.slot[s.args.size()], s.ret_bytes)), hex(injected))
            << "fexit sees the injected value";
      }
    }
  }
  {
    SCOPED_TRACE("freplace");
    Linked l(e, UTRAMP_FREPLACE, e.rep, dwarf);
    ASSERT_NE(l.link, nullptr) << utramp_last_error();
    EXPECT_EQ(hex(call(e.drive, s.ret_bytes)), hex(replaced));
  }
  EXPECT_EQ(hex(call(e.drive, s.ret_bytes)), hex(untraced)) << "after every link is gone";
}

std::vector<Param> all_params() {
  std::vector<Param> v;
  for (bool dwarf : {false, true})
    for (size_t f = 0; f < std::size(kFlavours); ++f)
      for (size_t c = 0; c < specs().size(); ++c) v.push_back({f, c, dwarf});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Builds, Abi, ::testing::ValuesIn(all_params()),
                         [](const ::testing::TestParamInfo<Param>& i) {
                           return std::string(i.param.dwarf ? "dwarf_" : "sig_") +
                                  kFlavours[i.param.flavour].name + "_" +
                                  specs()[i.param.spec].name;
                         });

// The build tables list exactly the cases this file knows, in the same order.
TEST(AbiBuilds, TablesMatchTheCaseList) {
  for (const Flavour& fl : kFlavours) {
    if (!fl.traced || !fl.ref) continue;
    for (const abi_build* b : {fl.traced, fl.dwarf, fl.ref}) {
      size_t n = 0;
      while (b->cases[n].name) ++n;
      EXPECT_EQ(n, specs().size()) << fl.name << " (" << b->compiler << ")";
    }
  }
}

// ---- noreturn -----------------------------------------------------------------------

int g_pipe = -1;

uint64_t on_noreturn_entry(uint64_t* ctx) {
  // The body never comes back: report through a pipe, before it runs.
  const uint64_t rec[3] = {utramp_get_func_arg_cnt(ctx), ctx[0], utramp_get_func_ip(ctx)};
  if (write(g_pipe, rec, sizeof rec) != sizeof rec) _exit(97);
  return 0;
}

// Runs `drive` in a child, which the function ends; returns its exit status and what
// the fentry program wrote (nothing when none ran).
struct ChildResult {
  int status = -1;
  std::vector<uint64_t> rec;
};
ChildResult run_in_child(void (*drive)(void*)) {
  int fds[2];
  ChildResult out;
  if (pipe(fds) != 0) return out;
  g_pipe = fds[1];
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    drive(nullptr);
    _exit(98);  // not reached: the function does not return
  }
  close(fds[1]);
  uint64_t buf[8];
  ssize_t got;
  while ((got = read(fds[0], buf, sizeof buf)) > 0)
    out.rec.insert(out.rec.end(), buf, buf + got / 8);
  close(fds[0]);
  if (pid > 0) waitpid(pid, &out.status, 0);
  return out;
}

class AbiNoreturn : public ::testing::TestWithParam<std::pair<size_t, bool>> {};

TEST_P(AbiNoreturn, FentryAndFreplaceOnlyFexitAndFmodRetRefused) {
  const Flavour& fl = kFlavours[GetParam().first];
  const bool dwarf = GetParam().second;
  if (!fl.traced) GTEST_SKIP() << fl.name << " was not built (compiler not found)";
  const abi_build& build = dwarf ? *fl.dwarf : *fl.traced;
  const abi_entry& e = build.noreturn_fn;
  for (auto t : {UTRAMP_FEXIT, UTRAMP_FMOD_RET}) {
    Linked l(e, t, as_prog(&on_exit), dwarf);
    EXPECT_EQ(l.link, nullptr);
    EXPECT_NE(std::string(utramp_last_error()).find("never returns (noreturn)"),
              std::string::npos)
        << utramp_last_error();
  }
  if (dwarf) check_dwarf_signature(e);
  {
    // This thread must have met a trampoline before forking: a first entry registers
    // the thread, which takes locks another thread of the parent may hold at fork.
    const abi_entry& warm = fl.traced->cases[0];
    Linked w(warm, UTRAMP_FENTRY, as_prog(&on_entry), false);
    ASSERT_NE(w.link, nullptr) << utramp_last_error();
    arm(specs()[0]);
    (void)call(warm.drive, specs()[0].ret_bytes);
  }
  {
    Linked l(e, UTRAMP_FENTRY, as_prog(&on_noreturn_entry), dwarf);
    ASSERT_NE(l.link, nullptr) << utramp_last_error();
    const ChildResult r = run_in_child(e.drive);
    ASSERT_TRUE(WIFEXITED(r.status)) << r.status;
    EXPECT_EQ(WEXITSTATUS(r.status), ABI_NORETURN_CODE ^ 0x5a) << "the body ran";
    ASSERT_EQ(r.rec.size(), 3u) << "the fentry program ran once";
    EXPECT_EQ(r.rec[0], 1u);
    EXPECT_EQ(r.rec[1], uint64_t(ABI_NORETURN_CODE));
    EXPECT_EQ(r.rec[2], reinterpret_cast<uint64_t>(e.fn));
  }
  {
    Linked l(e, UTRAMP_FREPLACE, e.rep, dwarf);
    ASSERT_NE(l.link, nullptr) << utramp_last_error();
    const ChildResult r = run_in_child(e.drive);
    ASSERT_TRUE(WIFEXITED(r.status)) << r.status;
    EXPECT_EQ(WEXITSTATUS(r.status), ABI_NORETURN_CODE ^ 0x3c) << "the replacement ran";
  }
  const ChildResult r = run_in_child(e.drive);
  ASSERT_TRUE(WIFEXITED(r.status)) << r.status;
  EXPECT_EQ(WEXITSTATUS(r.status), ABI_NORETURN_CODE ^ 0x5a);
  EXPECT_TRUE(r.rec.empty()) << "no program after detach";
}

std::vector<std::pair<size_t, bool>> noreturn_params() {
  std::vector<std::pair<size_t, bool>> v;
  for (bool dwarf : {false, true})
    for (size_t f = 0; f < std::size(kFlavours); ++f) v.push_back({f, dwarf});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Builds, AbiNoreturn, ::testing::ValuesIn(noreturn_params()),
                         [](const ::testing::TestParamInfo<std::pair<size_t, bool>>& i) {
                           return std::string(i.param.second ? "dwarf_" : "sig_") +
                                  kFlavours[i.param.first].name;
                         });

}  // namespace
