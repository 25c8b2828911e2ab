// replay, report and dump through the real CLI binary, on synthetic traces written with
// TraceWriter, compared with goldens in tests/trace/golden/ (UTRAMP_UPDATE_GOLDENS=1
// rewrites them). Thread ids and addresses differ from run to run and are masked; the
// times are synthetic and exact, so they are kept: the goldens check the arithmetic of
// durations, self times and units.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "golden.hpp"
#include "hist_print.hpp"
#include "ring_util.hpp"
#include "synth_trace.hpp"
#include "trace/trace_dir.hpp"

using namespace utramp;
using namespace utramp::trace;
using test::Synth;
using test::TempDir;

namespace {

// Runs the CLI and renders what it did, masked, for a golden.
std::string run_masked(const std::vector<std::string>& args, const std::string& dir,
                       bool mask_times = false) {
  const auto r = test::run_cli(args);
  std::string shown = "$ utramp";
  for (const auto& a : args) shown += " " + a;
  std::string text = shown + "\n--- exit " + std::to_string(r.exit_code) + "\n--- stdout\n" +
                     r.out + "--- stderr\n" + r.err;
  test::MaskOptions mo;
  mo.times = mask_times;
  mo.literal = {{dir, "DIR"}};
  // The raw dump prints ids in plain columns: name the synthetic ones.
  Synth s;
  for (uint32_t k = 1; k <= 4; ++k) mo.known_ids.push_back(std::to_string(s.id(k)));
  return test::mask(text, mo);
}

void golden(const std::string& name, const std::vector<std::string>& args, const std::string& dir,
            bool mask_times = false) {
  SCOPED_TRACE(name);
  test::expect_golden(name, run_masked(args, dir, mask_times));
}

// main { parse(ptr, "str") { strlen() = 21; fib(3) { fib(2) {...} fib(1) } } lookup()
//        ratio() walk<int>() tick() x6 } — nesting, recursion, arguments, return values
// of every format, a long body, durations from ns to s.
void basic(Synth& s) {
  const uint32_t p = s.id(1);
  auto t = s.thread(p, p);
  t.in(1'000, "main", 0)
      .arg(0, ValueFormat::integer, 2)
      .arg(1, ValueFormat::pointer, s.ptr(0x1230));
  t.in(1'100, "_ZN3app6Parser5parseEPKc", 1)
      .arg(0, ValueFormat::pointer, s.ptr(0x40))
      .arg(1, ValueFormat::string, s.ptr(0x80))
      .str("config-file-name.conf");
  t.in(1'200, "strlen", 2).arg(0, ValueFormat::string, s.ptr(0x80)).str("config-file-name.conf");
  t.ret(1'320, "strlen", 2, ValueFormat::integer, 21);
  t.in(1'400, "_Z3fibi", 2).arg(0, ValueFormat::integer, 3);
  t.in(1'450, "_Z3fibi", 3).arg(0, ValueFormat::integer, 2);
  t.in(1'500, "_Z3fibi", 4)
      .arg(0, ValueFormat::integer, 1)
      .ret(1'540, "_Z3fibi", 4, ValueFormat::integer, 1);
  t.in(1'560, "_Z3fibi", 4)
      .arg(0, ValueFormat::integer, 0)
      .ret(1'600, "_Z3fibi", 4, ValueFormat::integer, 0);
  t.ret(1'650, "_Z3fibi", 3, ValueFormat::integer, 1);
  t.in(1'700, "_Z3fibi", 3)
      .arg(0, ValueFormat::integer, 1)
      .ret(1'750, "_Z3fibi", 3, ValueFormat::integer, 1);
  t.ret(1'800, "_Z3fibi", 2, ValueFormat::integer, 2);
  t.ret(1'501'100, "_ZN3app6Parser5parseEPKc", 1, ValueFormat::integer, 0);  // 1.5 ms
  t.in(1'600'000, "lookup", 1).arg(0, ValueFormat::string, 0);               // NULL
  t.ret(1'602'500, "lookup", 1, ValueFormat::string, s.ptr(0x200)).str("found \"it\"\n");
  t.in(1'700'000, "ratio", 1).arg(0, ValueFormat::dbl, std::bit_cast<uint64_t>(-0.25));
  t.ret(1'700'012, "ratio", 1, ValueFormat::dbl, std::bit_cast<uint64_t>(1.5));
  t.in(1'800'000, "_ZN3app4walkIiEEvT_", 1).arg(0, ValueFormat::string, s.ptr(0x300)).str("", true);
  t.out(1'800'100, "_ZN3app4walkIiEEvT_", 1);
  for (int i = 0; i < 6; ++i)
    t.leaf(2'000'000 + i * 1000, 2'000'000 + i * 1000 + 10 * (i + 1), "tick", 1);
  t.in(3'000'000, "idle", 1).out(2'503'000'000, "idle", 1);  // 2.5 s
  t.ret(2'503'001'000, "main", 0, ValueFormat::integer, static_cast<uint64_t>(-1));
}

// Two threads interleaved, a fork and the child's events, a third thread started later.
void threads(Synth& s) {
  const uint32_t p = s.id(1), w = s.id(2), c = s.id(3), late = s.id(4);
  auto m = s.thread(p, p);
  auto k = s.thread(p, w);
  auto ch = s.thread(c, c);
  auto l = s.thread(p, late);
  m.in(0, "main", 0);
  m.in(10, "spawn", 1);
  k.in(20, "worker", 0);
  k.in(30, "work", 1).arg(0, ValueFormat::integer, 1).ret(40, "work", 1, ValueFormat::integer, 10);
  m.out(50, "spawn", 1);
  m.marker(EventType::fork, 60, c, 1);
  ch.in(70, "child_main", 0);
  ch.leaf(80, 90, "work", 1);
  ch.out(100, "child_main", 0);
  k.in(105, "work", 1)
      .arg(0, ValueFormat::integer, 2)
      .ret(108, "work", 1, ValueFormat::integer, 20);
  k.out(110, "worker", 0);
  m.leaf(120, 130, "join", 1);
  l.in(140, "late", 0).out(150, "late", 0);
  m.out(200, "main", 0);
  s.processes.push_back({c, p, {"/usr/bin/app", "--child"}, 60, 100, "exited 0"});
}

// An exception through three traced frames, and a longjmp over three.
void exits(Synth& s) {
  const uint32_t p = s.id(1);
  auto t = s.thread(p, p);
  t.in(0, "main", 0);
  t.in(10, "try_it", 1);
  t.in(20, "thrower", 2);
  t.in(30, "inner", 3);
  t.in(40, "raise_it", 4);
  t.out(50, "raise_it", 4, EventType::exit_unwound);
  t.out(50, "inner", 3, EventType::exit_unwound);
  t.out(51, "thrower", 2, EventType::exit_unwound);
  t.ret(60, "try_it", 1, ValueFormat::integer, 0);
  t.in(100, "jumper", 1);
  t.in(110, "j1", 2);
  t.in(120, "j2", 3);
  t.in(130, "do_longjmp", 4);
  t.out(140, "do_longjmp", 4, EventType::exit_longjmp);
  t.out(140, "j2", 3, EventType::exit_longjmp);
  t.out(140, "j1", 2, EventType::exit_longjmp);
  t.ret(150, "jumper", 1, ValueFormat::integer, 1);
  t.out(200, "main", 0);
}

// A ring that overwrote its start, losses in the middle, a depth overrun, a malformed
// event, and calls still running when the trace ends.
void damaged(Synth& s) {
  const uint32_t p = s.id(1);
  auto t = s.thread(p, p);
  t.marker(EventType::lost, 5, 5000, 3);
  t.add(EventType::string, 6, 0, 3, 0, 0, 0);  // the tail of a string whose start was lost
  t.out(10, "leaf_a", 3);
  t.out(20, "mid", 2);
  t.in(30, "a", 2);
  t.in(40, "b", 3);
  t.marker(EventType::lost, 50, 7, 4);
  t.out(60, "a", 2);
  t.marker(EventType::depth_overrun, 70, 3, 2);
  t.in(80, "c", 2);
  t.add(static_cast<EventType>(99), 85, 0, 2);
  t.in(90, "d", 3);
  t.out(95, "outer", 1);  // closes c and d: their exits are not in the trace
  t.in(100, "e", 1);
  t.in(110, "f", 2);
  s.lost[{p, p}] = 5007;
  s.info.exit = "killed by SIGKILL";
  s.info.exit_code = 137;
}

// Symbols as the agent records them (as in the object) that a demangler alone gets wrong:
// C functions named like manglings of types, a class template's members (two instances:
// one simple name), an operator template, a lambda, an anonymous namespace, an ABI tag,
// a clone and a thunk.
void names(Synth& s) {
  const uint32_t p = s.id(1);
  auto t = s.thread(p, p);
  t.in(0, "main", 0);
  t.leaf(10, 20, "f", 1);
  t.leaf(30, 40, "i", 1);
  t.leaf(50, 60, "_Zap", 1);
  t.in(100, "_Z3runv", 1);
  t.leaf(110, 120, "_ZZ3runvENKUliE_clEi", 2);
  t.leaf(130, 140, "_ZNK2ns3BoxIiE3getEv", 2);
  t.leaf(150, 170, "_ZNK2ns3BoxIdE3getEv", 2);
  t.leaf(180, 190, "_ZN2nsltIiEEbRKNS_3BoxIT_EES5_", 2);
  t.leaf(200, 210, "_ZN12_GLOBAL__N_11fEv", 2);
  t.leaf(220, 230, "_ZN2ns5titleB5cxx11Ei", 2);
  t.leaf(240, 250, "_Z3fooi.isra.0", 2);
  t.leaf(260, 270, "_ZThn8_N1B1fEv", 2);
  t.out(300, "_Z3runv", 1);
  t.out(400, "main", 0);
}

std::string write_trace(TempDir& tmp, void (*fill)(Synth&), const std::string& name = "t") {
  Synth s;
  fill(s);
  const std::string dir = tmp / name;
  s.write(dir);
  return dir;
}

TEST(CliGolden, ReplayBasic) {
  TempDir tmp;
  const auto dir = write_trace(tmp, basic);
  golden("replay_basic", {"replay", dir}, dir);
  golden("replay_basic_no_demangle_us", {"replay", "--no-demangle", "--unit", "us", dir}, dir);
}

// Each style of names, and globs naming functions by any of their forms whatever the
// style shown (docs/tracing.md, "Function names and globs").
TEST(CliGolden, Names) {
  TempDir tmp;
  const auto dir = write_trace(tmp, names);
  golden("replay_names", {"replay", dir}, dir);
  golden("replay_names_full", {"replay", "--demangle", "full", dir}, dir);
  golden("replay_basic_full", {"replay", "--demangle", "full", write_trace(tmp, basic, "basic")},
         tmp / "basic");
  golden("replay_names_no", {"replay", "--demangle", "no", dir}, dir);
  golden("report_names", {"report", "--sort", "name", dir}, dir);
  golden("report_names_full", {"report", "--sort", "name", "--demangle", "full", dir}, dir);
  golden("dump_folded_names_no", {"dump", "--folded", "--no-demangle", dir}, dir);
  // Both instances by their simple name; one by its full name; one by its symbol, shown
  // mangled.
  golden("replay_names_F_simple", {"replay", "-F", "ns::Box::get", dir}, dir);
  golden("replay_names_F_full", {"replay", "-F", "ns::Box<double>::get() const", dir}, dir);
  golden("replay_names_F_symbol_no",
         {"replay", "--no-demangle", "-F", "_ZN2ns5titleB5cxx11Ei", "-F", "f", dir}, dir);
  golden("replay_names_N",
         {"replay", "-N", "run::{lambda#1}::operator()", "-N", "*operator<(*", "-N", "foo*", "-N",
          "*thunk*", "-N", "[fi]", dir},
         dir);
  golden("error_demangle_style", {"replay", "--demangle", "short", dir}, dir);
}

TEST(CliGolden, ReplayFilters) {
  TempDir tmp;
  const auto dir = write_trace(tmp, basic);
  golden("replay_filter_F", {"replay", "-F", "fib", dir}, dir);
  golden("replay_filter_N", {"replay", "-N", "app::*", "-N", "tick", dir}, dir);
  golden("replay_filter_D", {"replay", "-D", "1", dir}, dir);
  golden("replay_filter_FD", {"replay", "-F", "_ZN3app6Parser5parseEPKc", "-D", "2", dir}, dir);
}

TEST(CliGolden, ReplayThreadsAndFork) {
  TempDir tmp;
  const auto dir = write_trace(tmp, threads);
  golden("replay_threads", {"replay", dir}, dir);
  golden("replay_threads_no_merge", {"replay", "--no-merge", dir}, dir);
  Synth s;
  golden("replay_threads_tid", {"replay", "--tid", std::to_string(s.id(2)), dir}, dir);
  golden("replay_threads_tid_main", {"replay", "--tid", std::to_string(s.id(1)), dir}, dir);
}

TEST(CliGolden, ReplayExceptionAndLongjmp) {
  TempDir tmp;
  const auto dir = write_trace(tmp, exits);
  golden("replay_exits", {"replay", dir}, dir);
}

TEST(CliGolden, ReplayDamagedTrace) {
  TempDir tmp;
  const auto dir = write_trace(tmp, damaged);
  golden("replay_damaged", {"replay", dir}, dir);
  golden("report_damaged", {"report", dir}, dir);
}

TEST(CliGolden, ReplayTruncatedFile) {
  TempDir tmp;
  const auto dir = write_trace(tmp, exits);
  Synth s;
  const std::string f =
      dir + "/events-" + std::to_string(s.id(1)) + "-" + std::to_string(s.id(1)) + ".bin";
  // Cut in the middle of the 13th record: 12 whole events and 17 bytes of the next.
  ASSERT_EQ(truncate(f.c_str(), 32 + 12 * 32 + 17), 0);
  golden("replay_truncated", {"replay", dir}, dir);
  // No info.json either: still shown, times taken as ns.
  std::filesystem::remove(dir + "/info.json");
  golden("replay_truncated_no_info", {"replay", dir}, dir);
}

TEST(CliGolden, Report) {
  TempDir tmp;
  const auto dir = write_trace(tmp, basic);
  golden("report_basic", {"report", dir}, dir);
  golden("report_basic_self", {"report", "--sort", "self", dir}, dir);
  golden("report_basic_calls", {"report", "-s", "calls", "--unit", "us", dir}, dir);
  golden("report_basic_name", {"report", "--sort", "name", dir}, dir);
  const auto tdir = write_trace(tmp, threads, "threads");
  golden("report_threads", {"report", tdir}, tdir);
  // The main thread's id is its process's too: --tid is that thread only, --pid the
  // process (its threads, not the forked child).
  Synth s;
  const std::string main_id = std::to_string(s.id(1));
  golden("report_threads_tid_main", {"report", "--sort", "name", "--tid", main_id, tdir}, tdir);
  golden("report_threads_pid", {"report", "--sort", "name", "--pid", main_id, tdir}, tdir);
  golden("report_exits", {"report", write_trace(tmp, exits, "exits")}, tmp / "exits");
}

TEST(CliGolden, DumpChrome) {
  TempDir tmp;
  const auto dir = write_trace(tmp, threads);
  golden("dump_chrome_threads", {"dump", "--chrome", dir}, dir);
  const auto edir = write_trace(tmp, exits, "exits");
  golden("dump_chrome_exits", {"dump", "--chrome", edir}, edir);

  // What Perfetto needs: valid JSON, B/E balanced per thread, times not going back.
  for (const auto& d : {dir, edir}) {
    const auto r = test::run_cli({"dump", "--chrome", d});
    ASSERT_EQ(r.exit_code, 0);
    const auto j = nlohmann::json::parse(r.out);
    std::map<std::pair<int, int>, int> open;
    std::map<std::pair<int, int>, double> last;
    for (const auto& e : j["traceEvents"]) {
      const auto key = std::make_pair(e["pid"].get<int>(), e["tid"].get<int>());
      const std::string ph = e["ph"];
      if (ph == "M") continue;
      const double ts = e["ts"];
      EXPECT_GE(ts, last[key]);
      last[key] = ts;
      if (ph == "B") ++open[key];
      if (ph == "E") {
        EXPECT_GE(--open[key], 0);
      }
    }
    for (auto& [k, n] : open) EXPECT_EQ(n, 0);
  }
}

TEST(CliGolden, DumpFolded) {
  TempDir tmp;
  const auto dir = write_trace(tmp, basic);
  golden("dump_folded_basic", {"dump", "--folded", dir}, dir);
  golden("dump_folded_basic_count", {"dump", "--folded", "--count", dir}, dir);
  // Self times add up to main's total time.
  const auto r = test::run_cli({"dump", "--folded", dir});
  uint64_t sum = 0;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) sum += std::stoull(line.substr(line.rfind(' ') + 1));
  EXPECT_EQ(sum, 2'503'001'000u - 1'000u);
  golden("dump_folded_threads", {"dump", "--folded", write_trace(tmp, threads, "th")}, tmp / "th");
}

TEST(CliGolden, DumpRaw) {
  TempDir tmp;
  const auto dir = write_trace(tmp, exits);
  golden("dump_raw_exits", {"dump", dir}, dir);
}

TEST(CliGolden, FunctionTracerTrace) {
  TempDir tmp;
  Synth s;
  const uint32_t p = s.id(1);
  auto t = s.thread(p, p);
  const uint64_t main_addr = s.addr("main");
  t.in(0, "main", 0, 0x401234);
  t.in(10, "foo", 0, main_addr + 0x1c);
  t.in(20, "bar", 0, s.addr("foo") + 0x8);
  t.in(30, "foo", 0, main_addr + 0x30);
  s.info.tracer = "function";
  const std::string dir = tmp / "t";
  s.write(dir);
  golden("replay_function_tracer", {"replay", dir}, dir);
  golden("report_function_tracer", {"report", dir}, dir);
  golden("dump_folded_function_tracer", {"dump", "--folded", "--count", dir}, dir);
}

TEST(CliGolden, Histogram) {
  TempDir tmp;
  Synth s;
  const uint32_t p = s.id(1);
  auto t = s.thread(p, p);
  uint64_t now = 0;
  t.in(now, "main", 0);
  // work(): durations 1, 2, 4... 2^20 ns, 2^k taken k+1 times; other() is ignored.
  for (int k = 0; k <= 20; ++k)
    for (int n = 0; n <= k; ++n) {
      t.leaf(now + 1, now + 1 + (uint64_t{1} << k), "work", 1);
      t.leaf(now + 1 + (uint64_t{1} << k), now + 2 + (uint64_t{1} << k), "other", 1);
      now += 3 + (uint64_t{1} << k);
    }
  t.out(now + 1, "main", 0);
  const std::string dir = tmp / "t";
  s.write(dir);
  golden("report_hist_work", {"report", "--hist", "work", dir}, dir);
  golden("report_hist_work_usecs", {"report", "--hist", "w*", "--hist-unit", "usecs", dir}, dir);
  golden("report_hist_nothing", {"report", "--hist", "nothing", dir}, dir);
}

TEST(CliGolden, Errors) {
  TempDir tmp;
  golden("error_missing_dir", {"replay", tmp / "nope"}, tmp.path);
  golden("error_report_sort", {"report", "--sort", "bogus", tmp / "nope"}, tmp.path);
  golden("error_dump_both", {"dump", "--chrome", "--folded", tmp / "nope"}, tmp.path);
  std::filesystem::create_directory(tmp / "empty");
  golden("error_not_a_trace", {"dump", "--chrome", tmp / "empty"}, tmp.path);
  // Every subcommand has --help.
  for (const char* cmd : {"replay", "report", "dump"}) {
    const auto r = test::run_cli({cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_NE(r.out.find("Usage:"), std::string::npos) << cmd;
  }
}

// Random damage to events files: every command still ends normally (exit 0 or 1, never a
// signal), and says something about files it could not read.
TEST(CliRobustness, CorruptEventsNeverCrashTheCli) {
  TempDir tmp;
  std::mt19937_64 rng(12345);
  for (int round = 0; round < 24; ++round) {
    const std::string dir = tmp / ("r" + std::to_string(round));
    Synth s;
    basic(s);
    threads(s);
    s.write(dir);
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      const std::string name = entry.path().filename();
      if (!name.starts_with("events-")) continue;
      std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
      const auto size = std::filesystem::file_size(entry.path());
      // Some rounds spare the header; bytes anywhere else, including type, depth, aux.
      const uint64_t from = round % 3 ? 32 : 0;
      for (int k = 0; k < 1 + round; ++k) {
        f.seekp(static_cast<std::streamoff>(from + rng() % (size - from)));
        const char b = static_cast<char>(rng());
        f.write(&b, 1);
      }
      if (round % 4 == 3) std::filesystem::resize_file(entry.path(), rng() % size);
    }
    for (const std::vector<std::string>& args : {std::vector<std::string>{"replay", dir},
                                                 {"replay", "--no-merge", "-D", "3", dir},
                                                 {"report", dir},
                                                 {"dump", "--chrome", dir},
                                                 {"dump", "--folded", dir},
                                                 {"dump", dir}}) {
      const auto r = test::run_cli(args);
      EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1)
          << args[0] << " round " << round << " exit " << r.exit_code << "\n"
          << r.err;
    }
  }
}

TEST(Masking, ReplacesIdsAddressesAndTimesConsistently) {
  const std::string in =
      "   1.234 us [ 123456] |   foo(0x7ffd12345678) {\n"
      "            [ 123457] | /* fork: child 123458 */\n"
      "  12.000 ms [ 123456] | } = 0x7ffd12345678; 123456.000 us\n";
  const std::string want =
      "   #.### us [     T1] |   foo(0xADDR1) {\n"
      "            [     T2] | /* fork: child     T3 */\n"
      "  #.### ms [     T1] | } = 0xADDR1; #.### us\n";
  EXPECT_EQ(test::mask(in), want);
}

TEST(HistPrint, BucketsAndRowsAsBcc) {
  EXPECT_EQ(cli::log2_bucket(0), 0u);
  EXPECT_EQ(cli::log2_bucket(1), 0u);
  EXPECT_EQ(cli::log2_bucket(2), 1u);
  EXPECT_EQ(cli::log2_bucket(3), 1u);
  EXPECT_EQ(cli::log2_bucket(256), 8u);
  EXPECT_EQ(cli::log2_bucket(511), 8u);
  EXPECT_EQ(cli::log2_bucket(UINT64_MAX), 63u);
  std::ostringstream os;
  cli::print_latency_hist(os, {300, 400, 500, 600, 1000, 1023, 1024, 5}, "nsecs");
  EXPECT_EQ(os.str(),
            "     nsecs               : count     distribution\n"
            "         4 -> 7          : 1        |*************                           |\n"
            "         8 -> 15         : 0        |                                        |\n"
            "        16 -> 31         : 0        |                                        |\n"
            "        32 -> 63         : 0        |                                        |\n"
            "        64 -> 127        : 0        |                                        |\n"
            "       128 -> 255        : 0        |                                        |\n"
            "       256 -> 511        : 3        |****************************************|\n"
            "       512 -> 1023       : 3        |****************************************|\n"
            "      1024 -> 2047       : 1        |*************                           |\n"
            "\navg = 606 nsecs, total: 4852 nsecs, count: 8\n");
  std::ostringstream empty;
  cli::print_log2_hist(empty, {});
  EXPECT_EQ(empty.str(), "(no values)\n");
  std::ostringstream wide;
  cli::print_log2_hist(wide, cli::log2_buckets({uint64_t{1} << 40}), "usecs");
  EXPECT_EQ(wide.str(),
            "               usecs                         : count     distribution\n"
            "       1099511627776 -> 2199023255551        : 1        |********************|\n");
}

}  // namespace
