// The probe correctness oracle (issue 5): every instruction boundary of a non-trivial
// fixture (oracle_fixture.c, built by gcc and by clang at -O2) gets a counting probe, all
// at once and then in four interleaved batches (the first with post-handlers too).
//
//   reference:  a child single-stepped under ptrace from a marker before oracle_main()
//               to one after it; each stop inside the fixture's functions counts the
//               instruction about to run (a rep-prefixed string instruction stops once
//               per iteration and counts once, as its probe does);
//   probed:     another child attaches the probes and runs oracle_main() with them;
//
// and the probed runs must print what the unprobed run printed, count what the
// reference counted at every probed boundary (post-handlers as often as pre-handlers),
// and leave every byte of the fixture as it was after detaching. The only boundaries
// allowed to refuse a probe are instructions that trap themselves (ud2).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "arch/arch.hpp"
#include "probe/probe.hpp"
#include "sites/table.hpp"

namespace {

using utramp::probe::Manager;
using utramp::probe::State;
using OracleMain = size_t (*)(char*, size_t);

constexpr size_t kOut = 64 * 1024;
constexpr int kBatches = 4;
constexpr size_t kMaxRefusals = 64;

struct Func {
  uint64_t start, size;
  std::string name;
};

// Shared with the probing child.
struct Shared {
  char error[1024];
  size_t out_len[2 + kBatches];
  char out[2 + kBatches][kOut];  // [0] unprobed, [1] all at once, [2+k] batch k
  size_t refused;
  uint64_t refused_addr[kMaxRefusals];
  char refused_why[kMaxRefusals][200];
  size_t optimised_all, optimised_batches;
  int bytes_restored;  // 1 when every detach left the fixture's bytes as they were
  double attach_all_ms, run_all_ms;
  // Followed by counts: all[n], batch[n] (each boundary in exactly one batch), post[n].
};

__attribute__((no_sanitize("address"))) int count_hit(utramp::arch::PtRegs*, uint64_t cookie) {
  ++*reinterpret_cast<uint64_t*>(cookie);
  return 0;
}

bool in_ranges(const std::vector<Func>& fs, uint64_t a) {
  auto it = std::upper_bound(fs.begin(), fs.end(), a,
                             [](uint64_t x, const Func& f) { return x < f.start; });
  if (it == fs.begin()) return false;
  --it;
  return a < it->start + it->size;
}

bool is_rep_string(uint64_t a) {
  auto insn = utramp::arch::decode(reinterpret_cast<const uint8_t*>(a), utramp::arch::kMaxInsnLen, a);
  if (!insn) return false;
  const std::string t = insn->text();
  return t.rfind("rep", 0) == 0;  // rep/repe/repne: stops once per iteration
}

// Counts per address of the fixture's instructions over one oracle_main() run, by
// single-stepping a child. Returns false (with why) when ptrace is not permitted.
bool single_step_counts(OracleMain fn, const std::vector<Func>& funcs,
                        std::unordered_map<uint64_t, uint64_t>* counts, uint64_t* steps,
                        std::string* why) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) != 0) _exit(3);
    static char buf[kOut];
    raise(SIGSTOP);
    fn(buf, sizeof buf);
    raise(SIGSTOP);
    _exit(0);
  }
  int st = 0;
  if (waitpid(pid, &st, 0) != pid || !WIFSTOPPED(st)) {
    *why = WIFEXITED(st) && WEXITSTATUS(st) == 3 ? "ptrace(PTRACE_TRACEME) is not permitted here"
                                                 : "the traced child did not stop";
    if (!WIFEXITED(st)) kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return false;
  }
  uint64_t prev = 0;
  *steps = 0;
  for (;;) {
    if (ptrace(PTRACE_SINGLESTEP, pid, nullptr, nullptr) != 0) {
      *why = std::string("PTRACE_SINGLESTEP: ") + strerror(errno);
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return false;
    }
    if (waitpid(pid, &st, 0) != pid) return false;
    if (!WIFSTOPPED(st)) {
      *why = "the traced child ended before its second marker";
      return false;
    }
    if (WSTOPSIG(st) == SIGSTOP) break;  // the marker after oracle_main()
    ++*steps;
    user_regs_struct regs;
    ptrace(PTRACE_GETREGS, pid, nullptr, &regs);
    const uint64_t rip = regs.rip;
    if (in_ranges(funcs, rip) && !(rip == prev && is_rep_string(rip))) ++(*counts)[rip];
    prev = rip;
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return true;
}

std::vector<uint8_t> snapshot(const std::vector<Func>& funcs) {
  std::vector<uint8_t> out;
  for (const Func& f : funcs)
    out.insert(out.end(), reinterpret_cast<const uint8_t*>(f.start),
               reinterpret_cast<const uint8_t*>(f.start + f.size));
  return out;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// The probing child: writes everything into `sh` and exits 0, or writes an error.
[[noreturn]] void probed_child(Shared* sh, uint64_t* counts, OracleMain fn,
                               const std::vector<Func>& funcs, const std::vector<uint64_t>& addrs) {
  const size_t n = addrs.size();
  uint64_t* all = counts;
  uint64_t* batch = counts + n;
  uint64_t* post = counts + 2 * n;
  auto fail = [&](const std::string& what) {
    snprintf(sh->error, sizeof sh->error, "%s", what.c_str());
    _exit(1);
  };
  auto& m = Manager::instance();
  sh->out_len[0] = fn(sh->out[0], kOut);
  const std::vector<uint8_t> before = snapshot(funcs);
  sh->bytes_restored = 1;

  std::vector<size_t> ok;
  for (size_t i = 0; i < n; ++i) {
    auto st = m.check(addrs[i]);
    if (st) {
      ok.push_back(i);
      continue;
    }
    if (sh->refused < kMaxRefusals) {
      sh->refused_addr[sh->refused] = addrs[i];
      snprintf(sh->refused_why[sh->refused], sizeof sh->refused_why[0], "%s", st.error().message.c_str());
    }
    ++sh->refused;
  }
  auto handler = reinterpret_cast<utramp::probe::Handler>(&count_hit);
  auto count_optimised = [&] {
    size_t k = 0;
    for (const auto& i : m.list()) k += i.state == State::optimised;
    return k;
  };

  // All at once.
  std::vector<utramp::probe::ProbeSpec> specs;
  for (size_t i : ok) specs.push_back({addrs[i], handler, nullptr, reinterpret_cast<uint64_t>(&all[i])});
  auto t0 = std::chrono::steady_clock::now();
  auto probes = m.attach_batch(specs);
  if (!probes) fail("attach_batch (all): " + probes.error().message);
  sh->attach_all_ms = ms_since(t0);
  sh->optimised_all = count_optimised();
  t0 = std::chrono::steady_clock::now();
  sh->out_len[1] = fn(sh->out[1], kOut);
  sh->run_all_ms = ms_since(t0);
  if (auto r = m.detach_batch(*probes); !r) fail("detach_batch (all): " + r.error().message);
  if (snapshot(funcs) != before) sh->bytes_restored = 0;

  // In interleaved batches: sparser probes leave room for jumps over several instructions.
  for (int k = 0; k < kBatches; ++k) {
    specs.clear();
    std::vector<utramp::probe::ProbeSpec> posts;
    for (size_t j = k; j < ok.size(); j += kBatches) {
      const size_t i = ok[j];
      specs.push_back({addrs[i], handler, nullptr, reinterpret_cast<uint64_t>(&batch[i])});
      if (k == 0) posts.push_back({addrs[i], nullptr, handler, reinterpret_cast<uint64_t>(&post[i])});
    }
    auto ps = m.attach_batch(specs);
    if (!ps) fail("attach_batch (batch " + std::to_string(k) + "): " + ps.error().message);
    sh->optimised_batches += count_optimised();
    auto qs = m.attach_batch(posts);
    if (!qs) fail("attach_batch (posts): " + qs.error().message);
    sh->out_len[2 + k] = fn(sh->out[2 + k], kOut);
    if (auto r = m.detach_batch(*qs); !r) fail("detach_batch (posts): " + r.error().message);
    if (auto r = m.detach_batch(*ps); !r) fail("detach_batch (batch): " + r.error().message);
    if (snapshot(funcs) != before) sh->bytes_restored = 0;
  }
  _exit(0);
}

class Oracle : public ::testing::TestWithParam<std::string> {};

TEST_P(Oracle, EveryInstructionBoundaryCountsWhatSingleSteppingCounts) {
  const std::string cc = GetParam();
  const std::string path = std::string(UTRAMP_PROBE_ORACLE_DIR) + "/liboracle_" + cc + ".so";
  if (access(path.c_str(), R_OK) != 0) GTEST_SKIP() << cc << " not found: " << path << " not built";
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto fn = reinterpret_cast<OracleMain>(dlsym(h, "oracle_main"));
  ASSERT_NE(fn, nullptr);

  // The fixture's functions, as the site table found them, and their boundaries.
  auto& table = utramp::sites::SiteTable::instance();
  ASSERT_TRUE(table.discover());
  char real[PATH_MAX];
  ASSERT_NE(realpath(path.c_str(), real), nullptr);
  std::vector<Func> funcs;
  for (const auto* s : table.all()) {
    char r2[PATH_MAX];
    if (s->info.size && realpath(s->object().c_str(), r2) && std::string(r2) == real)
      funcs.push_back({s->info.func, s->info.size, s->info.name});
  }
  std::sort(funcs.begin(), funcs.end(), [](const Func& a, const Func& b) { return a.start < b.start; });
  std::vector<uint64_t> addrs;
  for (const Func& f : funcs)
    for (uint64_t off = 0; off < f.size;) {
      auto insn = utramp::arch::decode(reinterpret_cast<const uint8_t*>(f.start + off), f.size - off,
                                       f.start + off);
      ASSERT_TRUE(insn) << f.name << "+" << off;
      addrs.push_back(f.start + off);
      off += insn->length;
    }
  ASSERT_GE(addrs.size(), 10000u) << "the fixture is too small for the oracle";

  // The reference.
  std::unordered_map<uint64_t, uint64_t> ref;
  uint64_t steps = 0;
  std::string why;
  auto t0 = std::chrono::steady_clock::now();
  if (!single_step_counts(fn, funcs, &ref, &steps, &why)) GTEST_SKIP() << "no reference: " << why;
  const double step_ms = ms_since(t0);

  // The probed runs, in a child of their own.
  const size_t n = addrs.size();
  const size_t bytes = sizeof(Shared) + 3 * n * sizeof(uint64_t);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* sh = static_cast<Shared*>(mem);
  auto* counts = reinterpret_cast<uint64_t*>(sh + 1);
  t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) probed_child(sh, counts, fn, funcs, addrs);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  const double probed_ms = ms_since(t0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
      << "the probed child failed: " << (WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : sh->error);

  // Output.
  const std::string out0(sh->out[0], std::min(sh->out_len[0], kOut));
  ASSERT_GT(out0.size(), 100u);
  for (int r = 1; r < 2 + kBatches; ++r)
    EXPECT_EQ(std::string(sh->out[r], std::min(sh->out_len[r], kOut)), out0) << "run " << r;
  EXPECT_TRUE(sh->bytes_restored) << "detach left the fixture's bytes changed";

  // Refusals: only instructions that raise a trap themselves.
  for (size_t i = 0; i < std::min(sh->refused, kMaxRefusals); ++i)
    EXPECT_NE(std::string(sh->refused_why[i]).find("raises a trap"), std::string::npos)
        << sh->refused_why[i];
  EXPECT_LT(sh->refused, n / 100) << "too many refusals";

  // Counts.
  const uint64_t* all = counts;
  const uint64_t* batch = counts + n;
  const uint64_t* post = counts + 2 * n;
  std::vector<uint64_t> refused(sh->refused_addr, sh->refused_addr + std::min(sh->refused, kMaxRefusals));
  size_t mismatches = 0, executed = 0;
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t a = addrs[i];
    if (std::find(refused.begin(), refused.end(), a) != refused.end()) continue;
    const auto it = ref.find(a);
    const uint64_t want = it == ref.end() ? 0 : it->second;
    executed += want != 0;
    total += want;
    if (all[i] != want || batch[i] != want) {
      if (++mismatches <= 20)
        ADD_FAILURE() << "at " << std::hex << a << std::dec << ": single-stepping counted "
                      << want << ", the probes " << all[i] << " (all at once) and " << batch[i]
                      << " (in a batch)";
    }
  }
  EXPECT_EQ(mismatches, 0u);
  size_t post_mismatches = 0;
  for (size_t i = 0; i < n; ++i)
    if (post[i] != 0 && post[i] != batch[i]) ++post_mismatches;
  EXPECT_EQ(post_mismatches, 0u) << "post-handlers ran as often as pre-handlers";
  uint64_t posts = 0;
  for (size_t i = 0; i < n; ++i) posts += post[i];
  EXPECT_GT(posts, 0u);

  std::printf(
      "[oracle %s] %zu functions, %zu boundaries (%zu refused), %zu executed, %llu "
      "instructions run (%llu steps); optimised: %zu all at once, %zu over %d batches\n"
      "[oracle %s] single-stepping %.0f ms; probed child %.0f ms (attach all %.0f ms, run with "
      "all %.0f ms)\n",
      cc.c_str(), funcs.size(), n, sh->refused, executed, static_cast<unsigned long long>(total),
      static_cast<unsigned long long>(steps), sh->optimised_all, sh->optimised_batches, kBatches,
      cc.c_str(), step_ms, probed_ms, sh->attach_all_ms, sh->run_all_ms);
  munmap(mem, bytes);
}

INSTANTIATE_TEST_SUITE_P(Compilers, Oracle, ::testing::Values("gcc", "clang"),
                         [](const auto& info) { return info.param; });

}  // namespace
