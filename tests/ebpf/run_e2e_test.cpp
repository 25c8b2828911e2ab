// `utramp run` end to end: every example of examples/bpf against the real bpf_target,
// map contents checked against the exact counts the target's loops imply, and bad
// objects refused before the target starts.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unistd.h>

#include "../e2e/cli_runner.hpp"
#include "../e2e/temp_dir.hpp"

namespace utramp {
namespace {

using nlohmann::json;

std::string example(const std::string& name) { return std::string(UTRAMP_BPF_EXAMPLES_DIR) + "/" + name + ".bpf.o"; }
std::string bad(const std::string& name) { return std::string(UTRAMP_BPF_BAD_DIR) + "/" + name + ".bpf.o"; }
const std::string kTarget = UTRAMP_BPF_TARGET;

test::RunResult run(const std::string& obj, std::vector<std::string> target_args, bool as_json = true) {
  std::vector<std::string> a = {UTRAMP_CLI, "run", obj};
  if (as_json) a.push_back("--json");
  a.push_back("--");
  a.push_back(kTarget);
  for (auto& x : target_args) a.push_back(x);
  return test::run_program(a);
}

// The JSON lines of one type ("map", "global") of a --json run, by name.
std::map<std::string, json> records_of(const std::string& out, const char* type) {
  std::map<std::string, json> m;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '{') continue;
    json j = json::parse(line);
    if (j["type"] == type) m[j["name"]] = j;
  }
  return m;
}
std::map<std::string, json> maps_of(const std::string& out) { return records_of(out, "map"); }
std::map<std::string, json> globals_of(const std::string& out) { return records_of(out, "global"); }

std::map<uint64_t, uint64_t> entries(const json& map) {
  std::map<uint64_t, uint64_t> e;
  for (const auto& x : map["entries"]) e[x["key"].get<uint64_t>()] = x["value"].get<uint64_t>();
  return e;
}

TEST(RunE2E, LatencyHistogram) {
  auto r = run(example("latency"), {"4", "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("bpf_target: 4 threads x 1000 calls, 0 failures"), std::string::npos);
  auto m = maps_of(r.out);
  ASSERT_TRUE(m.count("hist_ns")) << r.out;
  uint64_t total = 0;
  for (uint64_t c : m["hist_ns"]["hist"]) total += c;
  EXPECT_EQ(total, 4000u);
  ASSERT_TRUE(m.count("start"));
  EXPECT_TRUE(m["start"]["entries"].empty());  // every entry's start was deleted at exit
}

// A target without debug info, as distributions ship them: the prototype check and the
// signatures fall back (no DWARF), and nothing hangs. (libdw's search for separate debug
// info ended by loading libdebuginfod with dlopen, while the agent held its locks: the
// agent's own dlopen hook re-entered it and the target never started.)
TEST(RunE2E, TargetWithoutDebugInfoNeitherHangsNorChanges) {
  const std::string target = UTRAMP_BPF_TARGET_NODEBUG;
  const auto plain = test::run_program({target, "2", "300"});
  ASSERT_EQ(plain.exit_code, 0);
  const auto r = test::run_program({UTRAMP_CLI, "run", example("latency"), "--json", "--", target, "2", "300"},
                                   {.timeout_s = 60});
  ASSERT_FALSE(r.timed_out) << "utramp run hung; stderr: " << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(plain.out), std::string::npos) << r.out;
  auto m = maps_of(r.out);
  uint64_t total = 0;
  for (uint64_t c : m["hist_ns"]["hist"]) total += c;
  EXPECT_EQ(total, 600u);
}

// Stripped, the program's own functions have no names left: refused before it starts,
// saying so.
TEST(RunE2E, StrippedTargetIsRefusedByName) {
  const auto r = test::run_program({UTRAMP_CLI, "run", example("latency"), "--", UTRAMP_BPF_TARGET_STRIPPED, "1", "1"},
                                   {.timeout_s = 60});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no function 'work'"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");  // the target never ran
}

// A target killed while its programs hold a map's bucket lock (it is taken on every
// call): the CLI reads the maps without waiting for the lock for ever, and says so.
TEST(RunE2E, TargetKilledHoldingAMapLockDoesNotHangTheCli) {
  for (int round = 0; round < 6; ++round) {
    const auto r = test::run_program({UTRAMP_CLI, "run", example("latency"), "--", UTRAMP_MAP_ABUSE, "kill",
                                      std::to_string(50 + 40 * round)},
                                     {.timeout_s = 60});
    ASSERT_FALSE(r.timed_out) << "round " << round << ": the CLI hung; " << r.err;
    EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
    EXPECT_NE(r.out.find("@hist_ns"), std::string::npos) << r.out;  // the maps were printed
  }
}

// A target that overwrites its map file (every shared map mapping, with 0xff): the CLI
// keeps its own layout, bounds every index it reads, and says the maps were damaged.
TEST(RunE2E, TargetThatOverwritesItsMapsDoesNotCrashTheCli) {
  const auto r = test::run_program({UTRAMP_CLI, "run", example("latency"), "--", UTRAMP_MAP_ABUSE, "scribble"},
                                   {.timeout_s = 60});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("scribbled"), std::string::npos);
  EXPECT_NE(r.out.find("@hist_ns"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("overwrote"), std::string::npos) << r.err;
}

// A thread that blocks SIGTRAP with the raw system call (the agent cannot keep it
// deliverable: docs/sites.md) and then reaches a uprobe that stays an int3: the kernel
// ends the target, which nothing in it can prevent. `run` names the thread while it
// runs, as one that cannot be probed, and says what killed the target.
TEST(RunE2E, ThreadBlockingSigtrapIsNamedAsNotProbed) {
  const auto r = test::run_program({UTRAMP_CLI, "run", bad("int3_uprobe"), "--json", "--", UTRAMP_SIGTRAP_BLOCKER},
                                   {.no_core = true, .timeout_s = 60});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 128 + SIGTRAP) << r.out << r.err;
  EXPECT_NE(r.out.find("main 1\n"), std::string::npos) << r.out;
  const size_t at = r.out.find("blocker ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string tid = std::to_string(std::stol(r.out.substr(at + 8)));
  EXPECT_NE(r.err.find("thread " + tid + " (sigtrap_blocker, SigBlk"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("keeps SIGTRAP blocked"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("it cannot be probed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("count_hit (uprobe trap_target) at trap_target+0x0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("a thread that blocked SIGTRAP reached an int3 probe"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("\"hits\""), std::string::npos) << r.out;  // the maps were printed
}

TEST(RunE2E, LatencyHistogramTextDrawsBars) {
  auto r = run(example("latency"), {"1", "100"}, false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("@hist_ns:\n["), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("|@@@@"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("@start: (empty)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("@calls: 100\n"), std::string::npos) << r.out;  // the .bss global
}

TEST(RunE2E, GlobalsPrintedByName) {
  // One thread, n = 0..99: every value follows from that.
  auto r = run(example("globals"), {"1", "100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, json> g = globals_of(r.out);
  ASSERT_EQ(g.size(), 6u) << r.out;
  EXPECT_EQ(g["calls"]["value"], 100);
  EXPECT_EQ(g["calls"]["section"], ".bss");
  EXPECT_EQ(g["saw_zero"]["value"], true);
  EXPECT_EQ(g["lowest"]["value"], -5);
  EXPECT_EQ(g["last_parity"]["value"], "odd");
  EXPECT_EQ(g["pair"]["value"], (json{{"a", 1}, {"b", 2}}));  // a struct, by field
  EXPECT_EQ(g["threshold"]["value"], -5);
  EXPECT_EQ(g["threshold"]["section"], ".rodata");

  auto t = run(example("globals"), {"1", "100"}, false);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("@calls: 100\n@saw_zero: true\n@lowest: -5\n@last_parity: \"odd\"\n"
                       "@pair: { .a = 1, .b = 2 }\n@threshold: -5\n"),
            std::string::npos)
      << t.out;
}

TEST(RunE2E, ByteFillInLanesHashesAsC) {
  // tests/ebpf/bpf/byte_fill.bpf.c: clang's fill loop, which the JIT runs in SSE2 lanes,
  // then FNV-1a; one thread, n = 0..99 (its calls of work in order).
  uint64_t x = 0, sum = 0;
  for (uint64_t n = 0; n < 100; ++n) {
    const uint64_t seed = n * 0x9e3779b97f4a7c15ull + 1;
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < 256; i++) h = (h ^ static_cast<uint8_t>(((i + 1) * seed) >> 8)) * 0x100000001b3ull;
    x ^= h;
    sum += h;
  }
  auto r = run(bad("byte_fill"), {"1", "100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, json> g = globals_of(r.out);
  EXPECT_EQ(g["calls"]["value"], 100) << r.out;
  EXPECT_EQ(g["hash_xor"]["value"], x) << r.out;
  EXPECT_EQ(g["hash_sum"]["value"], sum) << r.out;
}

TEST(RunE2E, PercpuCounters) {
  auto r = run(example("percpu_count"), {"4", "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto m = maps_of(r.out);
  EXPECT_EQ(entries(m["calls"]), (std::map<uint64_t, uint64_t>{{0, 4000}}));
  EXPECT_EQ(entries(m["by_mod4"]), (std::map<uint64_t, uint64_t>{{0, 1000}, {1, 1000}, {2, 1000}, {3, 1000}}));
}

TEST(RunE2E, FexitAggregatesReturnValues) {
  auto r = run(example("fexit_ret"), {"4", "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto m = maps_of(r.out);
  EXPECT_EQ(entries(m["rets"]), (std::map<uint64_t, uint64_t>{{0, 800}, {1, 800}, {2, 800}, {3, 800}, {4, 800}}));
  EXPECT_EQ(entries(m["ret_sum"]), (std::map<uint64_t, uint64_t>{{0, 8000}}));
}

TEST(RunE2E, FmodRetInjectsFaults) {
  auto r = run(example("fault_inject"), {"4", "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 0, 3, ..., 999: 334 per thread.
  EXPECT_NE(r.out.find("4 threads x 1000 calls, 1336 failures"), std::string::npos) << r.out;
  EXPECT_EQ(entries(maps_of(r.out)["injected"]), (std::map<uint64_t, uint64_t>{{0, 1336}}));
}

// Records decoded with the object's types: `struct event` is only a local variable's
// type, so it comes from the object's DWARF, not its .BTF. The printk lines say which
// process and thread printed them: the same ids the records carry.
TEST(RunE2E, RingbufStreamAndPrintk) {
  auto r = run(example("ringbuf_events"), {"2", "10"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(r.out);
  std::map<uint64_t, int> ns;
  std::set<uint64_t> record_ids, printk_ids;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '{') continue;
    json j = json::parse(line);
    if (j["type"] == "printk") {
      EXPECT_EQ(j["msg"], "work(0) returned 0");
      EXPECT_EQ(j["comm"], "bpf_target");
      printk_ids.insert(j["pid"].get<uint64_t>() << 32 | j["tid"].get<uint64_t>());
    } else if (j["type"] == "ringbuf") {
      EXPECT_EQ(j["map"], "events");
      EXPECT_EQ(j["struct"], "struct event");
      const std::string d = j["data"];
      ASSERT_EQ(d.size(), 48u);  // 24 bytes, still given raw
      const json& v = j["value"];
      const uint64_t n = v["n"];
      EXPECT_EQ(n, std::stoull(d.substr(16, 2), nullptr, 16));
      EXPECT_EQ(v["ret"].get<uint64_t>(), n % 5);
      record_ids.insert(v["pid_tgid"].get<uint64_t>());
      ++ns[n];
    }
  }
  EXPECT_EQ(printk_ids.size(), 2u);  // one line from each thread
  EXPECT_EQ(printk_ids, record_ids);
  EXPECT_EQ(ns, (std::map<uint64_t, int>{{0, 2}, {1, 2}, {2, 2}}));
  EXPECT_EQ(r.out.find("____fmt"), std::string::npos) << "a printk format printed as a global";

  // As text: bpftrace's struct form, the printk line prefixed, no format global; and with
  // --raw the old u64 words.
  auto t = run(example("ringbuf_events"), {"1", "3"}, false);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find(", .n = 2, .ret = 2 }\n"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("events: { .pid_tgid = "), std::string::npos) << t.out;
  const auto at = t.out.find("bpf_target ");
  ASSERT_NE(at, std::string::npos) << t.out;
  unsigned pid = 0, tid = 0;
  ASSERT_EQ(std::sscanf(t.out.c_str() + at, "bpf_target %u/%u: work(0) returned 0", &pid, &tid), 2) << t.out;
  EXPECT_NE(t.out.find(fmt::format("{{ .pid_tgid = {}, .n = 0", uint64_t(pid) << 32 | tid)), std::string::npos)
      << t.out;
  EXPECT_EQ(t.out.find("____fmt"), std::string::npos) << t.out;
  auto raw = test::run_program({UTRAMP_CLI, "run", example("ringbuf_events"), "--raw", "--", kTarget, "1", "3"});
  ASSERT_EQ(raw.exit_code, 0) << raw.err;
  EXPECT_NE(raw.out.find(" 2 2\n"), std::string::npos) << raw.out;
  EXPECT_EQ(raw.out.find(".n ="), std::string::npos) << raw.out;
}

// -o FILE: what run prints goes to FILE (0600), the target's own output stays on stdout,
// so that --json makes a file of JSON lines only.
TEST(RunE2E, OutputFileKeepsRunsOutputApartFromTheTargets) {
  test::TempDir dir("utramp-run-o");
  const std::string file = dir.path + "/out.json";
  auto r = test::run_program(
      {UTRAMP_CLI, "run", example("ringbuf_events"), "--json", "-o", file, "--", kTarget, "1", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "bpf_target: 1 threads x 3 calls, 0 failures\n");
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::ifstream in(file);
  int lines = 0, records = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    json j = json::parse(line);  // throws (fails the test) on anything else
    if (j["type"] == "ringbuf") ++records;
  }
  EXPECT_EQ(records, 3);
  EXPECT_GE(lines, 4);  // the printk line and the globals too
  auto refused = test::run_program({UTRAMP_CLI, "run", example("ringbuf_events"), "-o",
                                    dir.path + "/no/such/dir/x", "--", kTarget, "1", "3"});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("-o " + dir.path + "/no/such/dir/x: No such file or directory"), std::string::npos)
      << refused.err;
  EXPECT_EQ(refused.out, "");  // the target never ran
}

TEST(RunE2E, RecordTypeNamedOnTheCommandLine) {
  auto r = test::run_program({UTRAMP_CLI, "run", example("ringbuf_events"), "--record-type", "events=struct nope",
                              "--", kTarget, "1", "3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--record-type events=struct nope"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no struct or union 'struct nope' in its BTF or DWARF"), std::string::npos) << r.err;
  auto bad_map = test::run_program({UTRAMP_CLI, "run", example("ringbuf_events"), "--record-type", "counts=event",
                                    "--", kTarget, "1", "3"});
  EXPECT_EQ(bad_map.exit_code, 2);
  EXPECT_NE(bad_map.err.find("has no ring buffer or perf event array 'counts'"), std::string::npos) << bad_map.err;
  auto ok = test::run_program({UTRAMP_CLI, "run", example("ringbuf_events"), "--json", "--record-type",
                               "events=struct event", "--", kTarget, "1", "3"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("\"struct\":\"struct event\",\"value\":{\"pid_tgid\":"), std::string::npos) << ok.out;
}

// Bad objects: refused with the reason, the target never runs.
void expect_refused(const std::string& obj, const std::string& msg) {
  auto r = run(obj, {"1", "10"});
  EXPECT_EQ(r.exit_code, 2) << obj;
  EXPECT_NE(r.err.find(msg), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("bpf_target:"), std::string::npos) << "the target ran: " << r.out;
}

TEST(RunE2E, BadObjectsNeverStartTheTarget) {
  expect_refused(bad("missing_target"), "program 'prog' (section 'fentry/no_such_function'): no function "
                                        "'no_such_function' in");
  expect_refused(bad("unknown_section"), "section 'tracepoint/syscalls/sys_enter_write': unknown program type");
  expect_refused(bad("unsupported_map"), "map type 8 (cgroup_array) is not supported");
  expect_refused(bad("unknown_helper"), "unknown helper 35 (bpf_get_current_task)");
  expect_refused(bad("proto_mismatch"), "program 'typed' declares (long a, long b) but work is (i32) -> i32");
  expect_refused(bad("proto_inlined_mismatch"),
                 "program 'typed' declares (long a, long b) but work is (i32) -> i32 (1 argument)");
  expect_refused("/nonexistent.bpf.o", "/nonexistent.bpf.o: cannot open");
}

// Unsafe programs: refused by the verifier with the instruction, its source line, the
// state and the path; the target never runs.
TEST(RunE2E, VerifierRefusalsNeverStartTheTarget) {
  expect_refused(bad("verifier_null_deref"), "program 'count' (section 'fentry/work') refused by the verifier:\ninsn ");
  expect_refused(bad("verifier_null_deref"), "which may be NULL: compare it with 0 first");
  expect_refused(bad("verifier_null_deref"), "at verifier_null_deref.bpf.c:16: return (int)*v;");
  expect_refused(bad("verifier_null_deref"), "state: r0=map_value_or_null(counts)");
  expect_refused(bad("verifier_null_deref"), "  path: 0..");
  expect_refused(bad("verifier_ctx_oob"), "a 8-byte read at offset 8 of the context, outside it: the tracing context "
                                          "of work (1 argument word: 8 bytes) has 8 bytes");
  expect_refused(bad("verifier_ringbuf_leak"), "is neither submitted nor discarded on this path");
  expect_refused(bad("verifier_ringbuf_leak"), "(!= NULL) -> ");
}

// --verifier-log: every program's log, accepted ones too, on stderr; the run goes on.
TEST(RunE2E, VerifierLog) {
  auto r = test::run_program({UTRAMP_CLI, "run", example("latency"), "--verifier-log", "--json", "--", kTarget, "1",
                              "10"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* p : {"work_entry", "work_exit"})
    EXPECT_NE(r.err.find(std::string("program '") + p + "' (section"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("verifier log:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("accepted: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("call 1"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("bpf_target: 1 threads x 10 calls"), std::string::npos) << r.out;
}

TEST(RunE2E, InlinedPrototypeThatMatchesRuns) {
  auto r = run(bad("proto_inlined_match"), {"1", "10"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("bpf_target: 1 threads x 10 calls"), std::string::npos) << r.out;
}

// Arguments and return values through pt_regs: exact counts for 4 threads x 1000
// calls of work(i), may_fail(i), i = 0..999.
TEST(RunE2E, UprobesAndUretprobes) {
  auto r = run(example("uprobe_args"), {"4", "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("bpf_target: 4 threads x 1000 calls, 0 failures"), std::string::npos) << r.out;
  auto m = maps_of(r.out);
  EXPECT_EQ(entries(m["args_mod4"]), (std::map<uint64_t, uint64_t>{{0, 1000}, {1, 1000}, {2, 1000}, {3, 1000}}));
  EXPECT_EQ(entries(m["rets"]), (std::map<uint64_t, uint64_t>{{0, 800}, {1, 800}, {2, 800}, {3, 800}, {4, 800}}));
  // work+5: even n (500 per thread); *:may_fail: odd x (500 per thread).
  EXPECT_EQ(entries(m["inside"]), (std::map<uint64_t, uint64_t>{{0, 2000}, {1, 2000}}));
}

TEST(RunE2E, UprobeBadInputNeverStartsTheTarget) {
  expect_refused(bad("uprobe_bad_offset"),
                 "program 'inside_insn' (section 'uprobe/may_fail+6'): offset 0x6 is not an instruction boundary "
                 "of may_fail: it is inside");
  expect_refused(bad("uprobe_beyond"),
                 "program 'beyond' (section 'uprobe/may_fail+0x10000'): offset 0x10000 is beyond may_fail");
  expect_refused(bad("uprobe_other_binary"),
                 "program 'other' (section 'uprobe/not_the_target:work'): binary 'not_the_target' is neither "
                 "the traced program");
  expect_refused(bad("uprobe_unknown_func"),
                 "program 'unknown' (section 'uretprobe/no_such_function'): no function 'no_such_function' in");
}

// CO-RE: core_order.bpf.c is compiled with struct order { int qty; int price; long id;
// long discount; }; bpf_target has { long id; int qty; int price; }. Per thread, prices
// i % 7 sum to 2997 and quantities i % 3 to 999 over i = 0..999.
TEST(RunE2E, CoreReadsTheTargetsLayout) {
  auto r = run(example("core_order"), {"4", "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto m = maps_of(r.out);
  EXPECT_EQ(entries(m["order_stats"]),
            (std::map<uint64_t, uint64_t>{{0, 4 * 2997}, {1, 4 * 999}, {3, 4000}, {4, 4000 * 16}, {5, 4000 * 12},
                                          {6, 4000}}));
}

// ---- perf event arrays, queues, stacks, bloom filters on events_target ---------------

// events_target built by gcc and by clang (examples/bpf/CMakeLists.txt).
const std::vector<std::string> kEventsTargets = {UTRAMP_EVENTS_TARGET, UTRAMP_EVENTS_TARGET_CLANG};

// Word k of a record's hex bytes (little-endian u64).
uint64_t word(const std::string& hex, size_t k) {
  uint64_t v = 0;
  for (size_t b = 0; b < 8; ++b) v |= std::stoull(hex.substr((k * 8 + b) * 2, 2), nullptr, 16) << (8 * b);
  return v;
}

std::vector<json> json_lines(const std::string& out, const std::string& type) {
  std::vector<json> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '{') continue;
    json j = json::parse(line);
    if (j["type"] == type) v.push_back(j);
  }
  return v;
}

// Every emit(i, v) of every thread arrives once and in the thread's order, whichever
// CPU's ring it went to: the records of each thread (by tid) fold to the chain the
// target printed for that thread, and their i count up from 0. Rings of 1 MiB hold all
// 12000 records (40 bytes each) even if the consumer read none: nothing may be lost.
TEST(RunE2E, PerfEventsStreamEveryRecordInEachThreadsOrder) {
  for (const std::string& target : kEventsTargets) {
    SCOPED_TRACE(target);
    const auto r = test::run_program({UTRAMP_CLI, "run", example("perf_events"), "--perf-pages", "256", "--json", "--",
                                      target, "emit", "4", "3000"},
                                     {.timeout_s = 120});
    ASSERT_FALSE(r.timed_out) << r.err;
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::map<uint64_t, std::pair<uint64_t, uint64_t>> told;  // tid -> calls, chain (its stderr)
    std::istringstream in(r.err);
    for (std::string line; std::getline(in, line);) {
      unsigned long long tid, chain;
      int calls;
      if (std::sscanf(line.c_str(), "thread %llu calls %d chain %llu", &tid, &calls, &chain) == 3)
        told[tid] = {uint64_t(calls), chain};
    }
    ASSERT_EQ(told.size(), 4u) << r.err;
    std::map<uint64_t, uint64_t> count, chain;
    uint64_t out_of_order = 0;
    for (const json& j : json_lines(r.out, "perf")) {
      EXPECT_EQ(j["map"], "events");
      const std::string d = j["data"];
      ASSERT_EQ(d.size(), 48u);  // {pid_tgid, i, v}
      const uint64_t tid = word(d, 0) & 0xffffffff;
      if (!chain.count(tid)) chain[tid] = 14695981039346656037ull;
      if (word(d, 1) != count[tid]) ++out_of_order;
      ++count[tid];
      chain[tid] = (chain[tid] ^ word(d, 2)) * 1000003ull;
    }
    EXPECT_EQ(out_of_order, 0u);
    for (const auto& [tid, want] : told) {
      EXPECT_EQ(count[tid], want.first) << "thread " << tid;
      EXPECT_EQ(chain[tid], want.second) << "thread " << tid;
    }
    EXPECT_EQ(count.size(), 4u);
    EXPECT_TRUE(json_lines(r.out, "lost").empty()) << r.err;
    EXPECT_TRUE(maps_of(r.out)["refused"]["entries"].empty());
  }
}

// A slow consumer, made certain: the target stops the CLI (its parent) before it sends
// 1000 records to ring 0 of one page, and lets it go on after. 4096 / 40 of them fit
// (24 bytes, an 8-byte stamp and an 8-byte header each); the rest are lost, as the
// helper told the program (its own count) and as the end of the run says.
TEST(RunE2E, PerfEventsLostToAFullRingAreCounted) {
  constexpr int kSent = 1000, kFit = 4096 / 40;
  for (const std::string& target : kEventsTargets) {
    SCOPED_TRACE(target);
    const auto r = test::run_program({UTRAMP_CLI, "run", example("perf_events"), "--perf-pages", "1", "--json", "--",
                                      target, "burst", std::to_string(kSent)},
                                     {.timeout_s = 120});
    ASSERT_FALSE(r.timed_out) << r.err;
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.err.find("burst 1000\n"), std::string::npos) << r.err;
    const auto recs = json_lines(r.out, "perf");
    ASSERT_EQ(recs.size(), size_t(kFit));
    for (int i = 0; i < kFit; ++i) {
      EXPECT_EQ(recs[size_t(i)]["cpu"], 0);
      EXPECT_EQ(word(recs[size_t(i)]["data"].get<std::string>(), 1), uint64_t(i));
    }
    const auto lost = json_lines(r.out, "lost");
    ASSERT_EQ(lost.size(), 1u) << r.out;
    EXPECT_EQ(lost[0]["map"], "events");
    EXPECT_EQ(lost[0]["count"], kSent - kFit);
    EXPECT_EQ(entries(maps_of(r.out)["refused"]), (std::map<uint64_t, uint64_t>{{0, kSent - kFit}}));
    EXPECT_NE(r.err.find("perf event array 'events': 898 record(s) lost"), std::string::npos) << r.err;
  }
}

// Queue, stack and bloom filter, one thread: every content follows from the values the
// target printed. recent (a queue of 64, BPF_EXIST) keeps the last 64 of 100 values and
// take() pops 10 of them; first (a stack of 64, no flag) keeps the first 64, refusing
// 36; seen (a bloom filter) finds all 100.
TEST(RunE2E, QueueStackAndBloomFilterContents) {
  for (const std::string& target : kEventsTargets) {
    SCOPED_TRACE(target);
    const auto r = test::run_program({UTRAMP_CLI, "run", example("queue_stack"), "--json", "--", target, "queue", "1",
                                      "100", "10"},
                                     {.timeout_s = 120});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<uint64_t> v;
    {
      std::istringstream in(r.out.substr(r.out.find("values ") + 7));
      std::string line;
      std::getline(in, line);
      std::istringstream words(line);
      for (uint64_t x; words >> x;) v.push_back(x);
    }
    ASSERT_EQ(v.size(), 100u) << r.out;
    auto m = maps_of(r.out);
    EXPECT_EQ(m["recent"]["map_type"], "queue");
    std::map<uint64_t, uint64_t> recent, first;
    for (uint64_t k = 0; k < 54; ++k) recent[k] = v[46 + k];
    for (uint64_t k = 0; k < 64; ++k) first[k] = v[63 - k];
    EXPECT_EQ(entries(m["recent"]), recent);
    EXPECT_EQ(entries(m["first"]), first);
    EXPECT_FALSE(m.count("seen"));  // a bloom filter is not printed
    auto st = entries(m["stats"]);
    uint64_t popped_sum = 0;
    for (int k = 36; k < 46; ++k) popped_sum += v[size_t(k)];
    EXPECT_EQ(st[0], 100u);        // PUSHED
    EXPECT_EQ(st[1], 36u);         // STACK_FULL
    EXPECT_EQ(st[2], 10u);         // POPPED
    EXPECT_EQ(st[3], popped_sum);  // POPPED_SUM
    EXPECT_EQ(st[4], 10 * v[63]);  // PEEK_SUM
    EXPECT_FALSE(st.count(5));     // EMPTY: never
    EXPECT_EQ(st[6], 100u);        // PRESENT_HITS: no false negative
    EXPECT_LT(st.count(7) ? st[7] : 0, 50u);  // ABSENT_HITS: false positives, few
  }
}

// Four threads: the counts are exact whatever the interleaving; 70 takes empty the
// queue of its 64 and find it empty 6 times.
TEST(RunE2E, QueueStackAndBloomFilterCountsAcrossThreads) {
  const auto r = test::run_program({UTRAMP_CLI, "run", example("queue_stack"), "--json", "--", UTRAMP_EVENTS_TARGET,
                                    "queue", "4", "1000", "70"},
                                   {.timeout_s = 120});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto m = maps_of(r.out);
  auto st = entries(m["stats"]);
  EXPECT_EQ(st[0], 4000u);
  EXPECT_EQ(st[1], 4000u - 64);
  EXPECT_EQ(st[2], 64u);
  EXPECT_EQ(st[5], 6u);
  EXPECT_EQ(st[6], 4000u);
  EXPECT_TRUE(m["recent"]["entries"].empty());
  EXPECT_EQ(m["first"]["entries"].size(), 64u);
}

// Tail calls (examples/bpf/tail_dispatch.bpf.c): a dispatcher on emit(i, v) jumps to
// the handler of i % 4 through a prog_array its initialiser fills; the handlers are
// bare uprobe sections, attached by nothing. Counted against what the target did: two
// threads x 1000 emit() calls, their values from its own formula (value_of).
TEST(RunE2E, TailCallsDispatchPerCase) {
  for (const std::string& target : kEventsTargets) {
    SCOPED_TRACE(target);
    const auto r = test::run_program({UTRAMP_CLI, "run", example("tail_dispatch"), "--json", "--", target, "emit",
                                      "2", "1000"},
                                     {.timeout_s = 120});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("calls 1000 chain"), std::string::npos) << r.err;
    uint64_t v_sum = 0;
    for (uint64_t t = 0; t < 2; ++t)
      for (uint64_t i = 0; i < 1000; i += 4) v_sum += (t << 32) + i * 2654435761ul % 1000003ul * 2 + 1;
    auto m = maps_of(r.out);
    const std::map<uint64_t, uint64_t> want = {
        {0, 500},       // case0
        {1, 500},       // case1
        {2, 500 * 33},  // case2 runs: the dispatcher's tail call and 32 of its own per emit()
        {3, 500},       // case2's 34th tail call, refused
        {4, 500},       // slot 3: no handler, the dispatcher goes on
        {5, v_sum}};    // case0 read emit's v from the dispatcher's context
    EXPECT_EQ(entries(m["stats"]), want);
    EXPECT_EQ(m["handlers"]["map_type"], "prog_array");
    std::vector<std::pair<uint64_t, std::string>> slots;
    for (const auto& e : m["handlers"]["entries"]) slots.emplace_back(e["key"], e["program"]);
    EXPECT_EQ(slots, (std::vector<std::pair<uint64_t, std::string>>{{0, "case0"}, {1, "case1"}, {2, "case2"}}));
    EXPECT_NE(r.out.find(R"({"count":500,"map":"handlers","type":"tail_call_limit"})"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find("prog_array 'handlers': 500 tail call(s) fell through at the limit of 33"),
              std::string::npos)
        << r.err;
  }
}

// An LPM trie as a routing table: each route() is counted under the route the target
// itself chose (the longest prefix, before and after two routes are deleted), and the
// trie printed is the table left, in get_next_key order (more specific prefixes first).
TEST(RunE2E, LpmTrieRoutesAsTheTargetDoes) {
  for (const std::string& target : kEventsTargets) {
    SCOPED_TRACE(target);
    const auto r = test::run_program({UTRAMP_CLI, "run", example("lpm_routes"), "--json", "--", target, "route",
                                      "1000"},
                                     {.timeout_s = 120});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::map<uint64_t, uint64_t> want;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      unsigned long id = 0, n = 0;
      if (std::sscanf(line.c_str(), "route %lu %lu", &id, &n) == 2) want[id] = n;
    }
    ASSERT_EQ(want.size(), 8u) << r.out;  // every route and "none" had addresses
    auto m = maps_of(r.out);
    EXPECT_EQ(entries(m["hits"]), want);
    EXPECT_EQ(m["routes"]["map_type"], "lpm_trie");
    std::vector<std::pair<std::string, uint64_t>> routes;
    for (const auto& e : m["routes"]["entries"]) routes.emplace_back(e["key"], e["value"]);
    const std::vector<std::pair<std::string, uint64_t>> left = {
        {"10.1.2.128/25", 6}, {"10.1.2.0/24", 3}, {"10.0.0.0/8", 1}, {"172.16.0.0/12", 7}, {"192.168.0.0/16", 4}};
    EXPECT_EQ(routes, left);
  }
}

// bpf_override_return from a uprobe at a function's entry: the calls the program picks
// return its value without running, exactly those (the target's own count and sum); a
// function not marked error-injectable only under --allow-override (else the target
// never starts); from a uretprobe never.
TEST(RunE2E, OverrideReturnFromAUprobeAtTheEntry) {
  for (const std::string& target : kEventsTargets) {
    SCOPED_TRACE(target);
    const auto r = test::run_program({UTRAMP_CLI, "run", example("override_return"), "--json", "--", target, "alloc",
                                      "1000"},
                                     {.timeout_s = 120});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // i % 4 == 1 for i < 1000: 250 calls return -12; try_plain is left alone.
    EXPECT_NE(r.out.find("alloc 1000 failed 250 sum -3000 plain 0 0\n"), std::string::npos) << r.out;
    EXPECT_EQ(entries(maps_of(r.out)["injected"]), (std::map<uint64_t, uint64_t>{{0, 250}}));
    const auto a = test::run_program({UTRAMP_CLI, "run", bad("override_plain"), "--allow-override", "--", target,
                                      "alloc", "1000"},
                                     {.timeout_s = 120});
    ASSERT_EQ(a.exit_code, 0) << a.err;
    EXPECT_NE(a.out.find("alloc 1000 failed 0 sum 0 plain 500 -2500\n"), std::string::npos) << a.out;
  }
  const auto p = test::run_program({UTRAMP_CLI, "run", bad("override_plain"), "--", UTRAMP_EVENTS_TARGET, "alloc",
                                    "10"},
                                   {.timeout_s = 120});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_NE(p.err.find("program 'fail_plain' (uprobe/try_plain) calls bpf_override_return, but try_plain is not "
                       "marked with UTRAMP_ALLOW_ERROR_INJECTION(try_plain)"),
            std::string::npos)
      << p.err;
  EXPECT_EQ(p.out.find("alloc"), std::string::npos) << "the target ran: " << p.out;
  expect_refused(bad("override_uretprobe"),
                 "program 'too_late' (section 'uretprobe/may_fail') calls bpf_override_return (helper 58), which "
                 "only a uprobe at a function's entry may: a uretprobe runs after the function returned");
}

TEST(RunE2E, AttachFailureInTheAgentEndsTheTargetBeforeMain) {
  expect_refused(bad("not_injectable"), "not marked with UTRAMP_ALLOW_ERROR_INJECTION(work)");
  auto r = run(bad("not_injectable"), {"1", "10"});
  EXPECT_NE(r.err.find("target not started"), std::string::npos) << r.err;
}


// ---- libbpf-style uprobes: bare sections attached with --attach, CO-RE on pt_regs ----

// adder's own line: "adder: N calls, add a A ret R, sub b B ret S".
struct AdderSums {
  long n = -1, add_a = -1, add_ret = -1, sub_b = -1, sub_ret = -1;
};
AdderSums adder_line(const std::string& out) {
  AdderSums s;
  const size_t at = out.find("adder: ");
  if (at != std::string::npos)
    std::sscanf(out.c_str() + at, "adder: %ld calls, add a %ld ret %ld, sub b %ld ret %ld", &s.n, &s.add_a,
                &s.add_ret, &s.sub_b, &s.sub_ret);
  return s;
}

test::RunResult run_on(const std::string& target, const std::string& obj, const std::vector<std::string>& attach,
                       const std::string& n, bool as_json = true) {
  std::vector<std::string> a = {UTRAMP_CLI, "run", obj};
  for (const auto& x : attach) {
    a.push_back("--attach");
    a.push_back(x);
  }
  if (as_json) a.push_back("--json");
  a.insert(a.end(), {"--", target, n});
  return test::run_program(a);
}

// uprobe_sum.bpf.c (vmlinux.h, BPF_KPROBE, BPF_CORE_READ, ctx->di; bare sections and a
// kprobe name) against adder built by gcc and by clang: its sums equal those the target
// printed from inside the functions, and the target prints what it prints untraced.
TEST(RunE2E, LibbpfStyleUprobesWithAttachSpecs) {
  for (const std::string target : {std::string(UTRAMP_ADDER), std::string(UTRAMP_ADDER_CLANG)}) {
    SCOPED_TRACE(target);
    auto plain = test::run_program({target, "1000"});
    ASSERT_EQ(plain.exit_code, 0);
    const AdderSums want = adder_line(plain.out);
    ASSERT_EQ(want.n, 1000);
    const std::string base = target.substr(target.rfind('/') + 1);
    auto r = run_on(target, example("uprobe_sum"),
                    {"sum_add=uprobe:" + base + ":uprobed_add", "sum_add_ret=uretprobe:" + target + ":uprobed_add"},
                    "1000");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const AdderSums got = adder_line(r.out);
    EXPECT_EQ(got.add_a, want.add_a);
    EXPECT_EQ(got.add_ret, want.add_ret);
    EXPECT_EQ(got.sub_b, want.sub_b);
    EXPECT_EQ(got.sub_ret, want.sub_ret);
    auto m = maps_of(r.out);
    EXPECT_EQ(entries(m["sums"]),
              (std::map<uint64_t, uint64_t>{{0, 1000},
                                            {1, uint64_t(want.add_a)},
                                            {2, uint64_t(want.add_ret)},
                                            {3, 1000},
                                            {4, uint64_t(want.sub_b)},
                                            {5, 3 * 500500},  // uprobed_sub(3 * i, i)
                                            {6, 1000}}));
  }
}

// libbpf-bootstrap's uprobe example, as its loader attaches it: the printk lines carry
// exactly the arguments and return values of the target's three calls.
TEST(RunE2E, BootstrapStyleUprobeExample) {
  for (const std::string target : {std::string(UTRAMP_ADDER), std::string(UTRAMP_ADDER_CLANG)}) {
    SCOPED_TRACE(target);
    auto r = run_on(target, example("uprobe_add"),
                    {"uprobe_add=uprobe:/proc/self/exe:uprobed_add",
                     "uretprobe_add=uretprobe:/proc/self/exe:uprobed_add"},
                    "3", false);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("adder: 3 calls, add a 6 ret 18, sub b 6 ret 12\n"), std::string::npos) << r.out;
    std::vector<std::string> lines;
    std::istringstream in(r.out);
    for (std::string l; std::getline(in, l);)
      if (const auto c = l.find(": uprobed_"); l.starts_with("adder") && c != std::string::npos)
        lines.push_back(l.substr(c + 2));  // after "COMM PID/TID: "
    std::vector<std::string> want;
    for (int i = 1; i <= 3; ++i) {
      auto s = [](int v) { return std::to_string(v); };
      want.push_back("uprobed_add ENTRY: a = " + s(i) + ", b = " + s(2 * i));
      want.push_back("uprobed_add EXIT: return = " + s(3 * i));
      want.push_back("uprobed_sub ENTRY: a = " + s(3 * i) + ", b = " + s(i));
      want.push_back("uprobed_sub EXIT: return = " + s(2 * i));
    }
    EXPECT_EQ(lines, want) << r.out;
  }
}

void expect_adder_refused(const std::string& obj, const std::vector<std::string>& attach, const std::string& msg) {
  auto r = run_on(UTRAMP_ADDER, obj, attach, "3");
  EXPECT_EQ(r.exit_code, 2) << obj;
  EXPECT_NE(r.err.find(msg), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("adder:"), std::string::npos) << "the target ran: " << r.out;
}

TEST(RunE2E, AttachSpecRefusalsNeverStartTheTarget) {
  const std::string sum = example("uprobe_sum");
  expect_adder_refused(sum, {}, "program 'sum_add' (section 'uprobe') names no function: attach it with --attach "
                                "sum_add=uprobe:BINARY:FUNC[+OFFSET]");
  expect_adder_refused(sum, {"sum_add=uprobe:libc.so.6:no_such_fn", "sum_add_ret=uretprobe:adder:uprobed_add"},
                       "program 'sum_add' (section 'uprobe'): no function 'no_such_fn' in /");
  expect_adder_refused(sum, {"sum_add=uprobe:libnot_here.so.1:f", "sum_add_ret=uretprobe:adder:uprobed_add"},
                       "shared library 'libnot_here.so.1' not found in LD_LIBRARY_PATH or the library directories");
  expect_adder_refused(sum, {"sum_add=uprobe:other:uprobed_add", "sum_add_ret=uretprobe:adder:uprobed_add"},
                       "binary 'other' is neither the traced program");
  expect_adder_refused(sum, {"sum_add=usdt:adder:p:n", "sum_add_ret=uretprobe:adder:uprobed_add"},
                       "usdt programs but no map '__bpf_usdt_specs': include <bpf/usdt.bpf.h>");
  expect_adder_refused(sum, {"sum_add=uprobe:adder:no_such", "sum_add_ret=uretprobe:adder:uprobed_add"},
                       "program 'sum_add' (section 'uprobe'): no function 'no_such' in");
  expect_refused(bad("core_pt_regs"), "program 'missing' insn 0: CO-RE field_byte_offset of struct pt_regs.fred_cs");
  expect_refused(bad("core_pt_regs"), "utramp's uprobe context has no register 'fred_cs'");
}

// ---- USDT probes: usdt.bpf.h on <sys/sdt.h> probes ----

#ifdef UTRAMP_HAVE_USDT_TARGETS
std::vector<std::string> usdt_targets() {
  std::vector<std::string> t;
  // gcc -O2's build is plain usdt_target (the name usdt_args.bpf.c's sections give).
  for (const char* b : {"usdt_target", "usdt_target_gcc_O0", "usdt_target_clang_O0", "usdt_target_clang_O2"})
    t.push_back(std::string(UTRAMP_BPF_EXAMPLES_DIR) + "/" + b);
  return t;
}

// The lines of `out` holding `marker`, from the marker on (printk lines may get a
// prefix), but for the globals printed at the end (`@name: ...`: printk's formats).
std::vector<std::string> lines_from(const std::string& out, const std::string& marker) {
  std::vector<std::string> v;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);)
    if (const size_t at = l.find(marker); at != std::string::npos && !l.starts_with("@"))
      v.push_back(l.substr(at + marker.size()));
  return v;
}

// usdt_args.bpf.c on every build of usdt_target: each argument's 64-bit value (signed
// and unsigned, 1 to 8 bytes, in registers, stack slots and constants) is what the
// target printed; demo:guarded runs only while attached (its semaphore is raised), and
// the target's own output is otherwise what it prints untraced.
TEST(RunE2E, UsdtArgumentsOfEveryKindAndSemaphores) {
  for (const std::string& target : usdt_targets()) {
    SCOPED_TRACE(target);
    auto plain = test::run_program({target, "3"});
    ASSERT_EQ(plain.exit_code, 0);
    EXPECT_NE(plain.out.find("usdt_target: 3 calls, guarded ran 0 times\n"), std::string::npos) << plain.out;
    const std::string base = target.substr(target.rfind('/') + 1);
    // on_guarded's section names usdt_target: the other builds override it.
    auto r = run_on(target, example("usdt_args"),
                    {"on_consts=usdt:" + base + ":demo:consts", "on_guarded=usdt:" + target + ":demo:guarded"}, "3",
                    false);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("usdt_target: 3 calls, guarded ran 3 times\n"), std::string::npos) << r.out;
    // Untraced lines unchanged.
    EXPECT_EQ(lines_from(r.out, "target: demo:args "), lines_from(plain.out, "target: demo:args "));
    EXPECT_EQ(lines_from(r.out, "target: demo:consts "), lines_from(plain.out, "target: demo:consts "));
    // "target: demo:args I A0 ... A7" -> "bpf: demo:args argK = AK" for each K, AK as
    // the program prints the 64-bit value (%ld: a u64 above INT64_MAX shows negative).
    std::vector<std::string> want_args;
    for (const std::string& l : lines_from(plain.out, "target: demo:args ")) {
      std::istringstream in(l);
      std::string i, v;
      in >> i;
      for (int k = 0; in >> v; ++k) {
        const int64_t bits = v[0] == '-' ? std::stoll(v) : static_cast<int64_t>(std::stoull(v));
        want_args.push_back("arg" + std::to_string(k) + " = " + std::to_string(bits));
      }
    }
    ASSERT_EQ(want_args.size(), 24u);
    EXPECT_EQ(lines_from(r.out, "bpf: demo:args "), want_args) << r.out;
    EXPECT_EQ(lines_from(r.out, "bpf: demo:consts "),
              std::vector<std::string>(3, "5 -7 123456789012"));
    const auto guarded = lines_from(r.out, "target: demo:guarded ");
    ASSERT_EQ(guarded.size(), 3u);
    EXPECT_EQ(guarded[2], "3 14");  // costly(3) = 0 + 1 + 4 + 9
    EXPECT_EQ(lines_from(r.out, "bpf: demo:guarded "), guarded);
    EXPECT_EQ(lines_from(r.out, "__bpf_usdt"), std::vector<std::string>{});  // usdt.bpf.h's maps not printed
  }
}

// A program nobody here wrote: Debian's python3 (stripped; its USDT probes sit in
// .cold code no symbol names, and are guarded by semaphores CPython tests on every
// call). usdt_pycalls.bpf.c counts function__entry by function name: exactly the calls
// the script makes, and the script's output is what it prints untraced. (CPython 3.11
// reports a call only from its tracing dispatch, which python:line's semaphore or
// sys.settrace turns on, and otherwise a generator entered by throw() or close()
// (CPython issue gh-98894): the script's generators are dropped after one next(), and
// their close is what is counted. tests/attach/run_pid_test.cpp's UsdtInDebiansPython
// has both.)
TEST(RunE2E, UsdtInDebiansPython) {
  const std::string py = "/usr/bin/python3";
  if (access(py.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << py;
  auto notes = test::run_program({"/usr/bin/readelf", "-n", py});
  if (notes.out.find("function__entry") == std::string::npos) GTEST_SKIP() << py << " has no USDT notes";
  const std::string script = "def tick():\n    yield 1\nfor i in range(250): next(tick())\nprint('ticks done')\n";
  auto plain = test::run_program({py, "-c", script});
  ASSERT_EQ(plain.exit_code, 0);
  auto r = test::run_program({UTRAMP_CLI, "run", example("usdt_pycalls"), "--attach",
                              "py_entry=usdt:" + py + ":python:function__entry", "--json", "--", py, "-c", script});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines_from(r.out, "ticks done"), lines_from(plain.out, "ticks done"));
  auto m = maps_of(r.out);
  ASSERT_TRUE(m.count("calls")) << r.out;
  uint64_t ticks = 0;
  for (const auto& e : m["calls"]["entries"])
    if (e["key"].get<std::string>().starts_with("7469636b00")) ticks = e["value"].get<uint64_t>();  // "tick\0"
  EXPECT_EQ(ticks, 250u) << m["calls"].dump();
}

TEST(RunE2E, UsdtRefusalsNeverStartTheTarget) {
  const std::string target = usdt_targets()[0];
  auto refused = [&](const std::vector<std::string>& attach, const std::string& msg) {
    auto r = run_on(target, example("usdt_args"), attach, "3");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find(msg), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("usdt_target:"), std::string::npos) << "the target ran: " << r.out;
  };
  refused({}, "program 'on_consts' (section 'usdt') names no USDT probe: attach it with --attach "
              "on_consts=usdt:BINARY:PROVIDER:NAME");
  refused({"on_consts=usdt:libc.so.6:libc:setjmp"},
          "binary 'libc.so.6' is a shared library: USDT probes in shared libraries are not supported yet");
  refused({"on_consts=usdt:usdt_target:demo:nope"},
          "no USDT probe 'demo:nope' in " + target + " (its probes: demo:args, demo:consts, demo:guarded)");
}
#endif

// ---- user stacks: bpf_get_stackid, bpf_get_stack, symbolised output ----------------------

// A frame's function: "path_a3+12" -> "path_a3".
std::string frame_function(const std::string& f) { return f.substr(0, f.rfind('+')); }

// mallocstacks (a uprobe on libc's malloc, bytes and calls by user stack) on
// stack_target, whose two call paths to malloc are known, built by gcc and clang at -O0
// and -O2, with and without frame pointers (unwound by the CFI), and without unwind
// tables (the frame-pointer walk): each path's stack, from malloc to main, exact, with
// exactly its calls and bytes; bpf_get_stack's first frame is the probed address, a
// skip shifts the frames, a kernel stack is -EFAULT, a build-id stack -EOPNOTSUPP.
TEST(RunE2E, MallocBytesByUserStackExactOnEveryBuild) {
  std::vector<std::string> builds = {"gcc_O2_nocfi"};
  for (const char* cc : {"gcc", "clang"})
    for (const char* opt : {"O0", "O2"})
      for (const char* fp : {"fp", "nofp"}) builds.push_back(fmt::format("{}_{}_{}", cc, opt, fp));
  const std::vector<std::string> path_a = {"malloc", "alloc_leaf", "path_a3", "path_a2", "path_a1", "main"};
  const std::vector<std::string> path_b = {"malloc", "alloc_leaf", "path_b1", "main"};
  for (const std::string& b : builds) {
    SCOPED_TRACE(b);
    const std::string target = std::string(UTRAMP_STACK_TARGETS_DIR) + "/stack_target_" + b;
    const auto r = test::run_program({UTRAMP_CLI, "run", example("mallocstacks"), "--json", "--", target, "40"},
                                     {.timeout_s = 120});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("stack_target: 40 calls of path_a (1000 bytes), 80 of path_b (2000 bytes)"),
              std::string::npos);
    auto m = maps_of(r.out);
    // The rows whose stack goes through alloc_leaf, each stack cut after main.
    std::map<std::vector<std::string>, std::pair<uint64_t, uint64_t>> rows;  // calls, bytes
    for (const char* map : {"stack_calls", "stack_bytes"}) {
      ASSERT_TRUE(m.count(map)) << r.out;
      for (const auto& e : m[map]["entries"]) {
        if (!e.contains("ustack")) continue;
        std::vector<std::string> fs;
        for (const auto& f : e["ustack"]) {
          fs.push_back(frame_function(f.get<std::string>()));
          if (fs.back() == "main") break;
        }
        if (std::find(fs.begin(), fs.end(), "alloc_leaf") == fs.end()) continue;
        auto& row = rows[fs];
        (std::string(map) == "stack_calls" ? row.first : row.second) += e["value"].get<uint64_t>();
      }
    }
    const std::map<std::vector<std::string>, std::pair<uint64_t, uint64_t>> want = {
        {path_a, {40, 40 * 1000}}, {path_b, {80, 80 * 2000}}};
    EXPECT_EQ(rows, want) << m["stack_calls"].dump();
    auto g = globals_of(r.out);
    EXPECT_EQ(g["leaf_calls"]["value"], 120);
    EXPECT_EQ(g["leaf_first_is_ip"]["value"], 120);
    EXPECT_EQ(g["leaf_skip1_ok"]["value"], 120);
    EXPECT_GE(g["leaf_bytes"]["value"].get<int64_t>(), 8 * 4);  // alloc_leaf, path_*, main at least
    EXPECT_EQ(g["leaf_bytes"]["value"].get<int64_t>() % 8, 0);
    EXPECT_EQ(g["leaf_skip1_bytes"]["value"].get<int64_t>(), g["leaf_bytes"]["value"].get<int64_t>() - 8);
    EXPECT_EQ(g["kernel_stack_err"]["value"], -14);  // -EFAULT
    EXPECT_EQ(g["build_id_err"]["value"], -95);      // -EOPNOTSUPP
  }
}

// The text form: bpftrace's `@[ustack]: value`, one frame per line, and the stack trace
// map itself by id.
TEST(RunE2E, MallocStacksPrintedAsBpftracePrintsUstack) {
  const std::string target = std::string(UTRAMP_STACK_TARGETS_DIR) + "/stack_target_gcc_O2_nofp";
  const auto r = test::run_program({UTRAMP_CLI, "run", example("mallocstacks"), "--", target, "5"}, {.timeout_s = 120});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The row of path_b: 10 calls, its frames from malloc to main.
  const size_t calls = r.out.find("@stack_calls[\n");
  ASSERT_NE(calls, std::string::npos) << r.out;
  const size_t at = r.out.find("        path_b1+", calls);
  ASSERT_NE(at, std::string::npos) << r.out;
  const size_t begin = r.out.rfind("@stack_calls[\n", at);
  const size_t end = r.out.find("\n]: ", at);
  ASSERT_NE(end, std::string::npos) << r.out;
  EXPECT_EQ(r.out.substr(end, 7), "\n]: 10\n") << r.out.substr(begin, end + 8 - begin);
  std::vector<std::string> lines;
  std::istringstream in(r.out.substr(begin, end - begin));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_GE(lines.size(), 5u);
  EXPECT_EQ(lines[0], "@stack_calls[");
  EXPECT_TRUE(lines[1].starts_with("        malloc+0")) << lines[1];
  EXPECT_TRUE(lines[2].starts_with("        alloc_leaf+")) << lines[2];
  EXPECT_TRUE(lines[3].starts_with("        path_b1+")) << lines[3];
  EXPECT_TRUE(lines[4].starts_with("        main+")) << lines[4];
  EXPECT_NE(r.out.find("@stacks["), std::string::npos);
}

// Return probes on two frames of the stack (uretprobes on path_a2 and path_a1) put the
// return trampoline in their return address slots while they run: the stack malloc's
// program takes still names their real callers, and each probe still returns.
TEST(RunE2E, UserStacksThroughReturnProbesNameTheRealCallers) {
  const std::string target = std::string(UTRAMP_STACK_TARGETS_DIR) + "/stack_target_gcc_O2_nofp";
  const auto r = test::run_program({UTRAMP_CLI, "run", bad("ustack_retprobe"), "--json", "--", target, "7"},
                                   {.timeout_s = 120});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("stack_target: 7 calls of path_a (1000 bytes), 14 of path_b (2000 bytes)"), std::string::npos);
  auto m = maps_of(r.out);
  ASSERT_TRUE(m.count("stack_calls")) << r.out;
  uint64_t path_a = 0;
  for (const auto& e : m["stack_calls"]["entries"]) {
    if (!e.contains("ustack")) continue;
    std::vector<std::string> fs;
    for (const auto& f : e["ustack"]) fs.push_back(frame_function(f.get<std::string>()));
    if (fs.size() < 3 || fs[2] != "path_a3") continue;
    ASSERT_GE(fs.size(), 6u) << e.dump();
    EXPECT_EQ(std::vector<std::string>(fs.begin(), fs.begin() + 6),
              (std::vector<std::string>{"malloc", "alloc_leaf", "path_a3", "path_a2", "path_a1", "main"}))
        << e.dump();
    path_a += e["value"].get<uint64_t>();
  }
  EXPECT_EQ(path_a, 7u) << m["stack_calls"].dump();
  EXPECT_EQ(globals_of(r.out)["returns"]["value"], 7);
}

// Uprobes at the entry of functions whose xmm and ymm arguments are live there: with
// programs that call no helper (the handler proven general-purpose-only, nothing saved
// around it) and with programs that update a hash map and read the clock (the extended
// state saved: bpf_ktime_get_ns reaches the vDSO through a pointer), every call still
// computes with its arguments intact, and every hit ran its program.
TEST(RunE2E, VectorArgumentsSurviveUprobes) {
  for (const char* obj : {"vector_probes", "vector_probes_helpers"}) {
    SCOPED_TRACE(obj);
    const auto r = test::run_program({UTRAMP_CLI, "run", bad(obj), "--json", "--", UTRAMP_VECTOR_TARGET, "2000"},
                                     {.timeout_s = 120});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const bool avx = r.out.find("(no AVX") == std::string::npos;
    EXPECT_NE(r.out.find("vector_target: 2000 calls, 0 wrong"), std::string::npos) << r.out;
    EXPECT_EQ(globals_of(r.out)["hits"]["value"], avx ? 6000 : 4000);
  }
}

// stackcount (libbpf-tools' way: a struct key with user_stack_id and kern_stack_id):
// every key's user stack printed as frames, the kernel stack id -EFAULT as a number,
// the pid and name decoded, each path's calls exact.
TEST(RunE2E, StackIdsInsideStructKeysPrintedAsStacks) {
  const std::string target = std::string(UTRAMP_STACK_TARGETS_DIR) + "/stack_target_gcc_O2_nofp";
  const auto r = test::run_program({UTRAMP_CLI, "run", example("stackcount"), "--json", "--", target, "6"},
                                   {.timeout_s = 120});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto m = maps_of(r.out);
  ASSERT_TRUE(m.count("counts")) << r.out;
  std::map<std::vector<std::string>, uint64_t> rows;
  std::set<uint64_t> pids;  // the target's, one process
  for (const auto& e : m["counts"]["entries"]) {
    EXPECT_EQ(e["key"]["kern_stack_id"], -14) << e.dump();
    EXPECT_EQ(e["key"]["name"], "stack_target_gc") << e.dump();  // comm: 15 bytes
    pids.insert(e["key"]["pid"].get<uint64_t>());
    ASSERT_TRUE(e.contains("ustacks") && e["ustacks"].contains("user_stack_id")) << e.dump();
    std::vector<std::string> fs;
    for (const auto& f : e["ustacks"]["user_stack_id"]) {
      fs.push_back(frame_function(f.get<std::string>()));
      if (fs.back() == "main") break;
    }
    if (fs.size() > 1 && fs[1] == "alloc_leaf") rows[fs] += e["value"].get<uint64_t>();
  }
  const std::map<std::vector<std::string>, uint64_t> want = {
      {{"malloc", "alloc_leaf", "path_a3", "path_a2", "path_a1", "main"}, 6},
      {{"malloc", "alloc_leaf", "path_b1", "main"}, 12}};
  EXPECT_EQ(rows, want) << m["counts"].dump();
  EXPECT_EQ(pids.size(), 1u);
  EXPECT_NE(pids.count(0), 1u);

  const auto t = test::run_program({UTRAMP_CLI, "run", example("stackcount"), "--", target, "6"}, {.timeout_s = 120});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const size_t at = t.out.find("        path_b1+", t.out.find("@counts["));  // not the stack map's
  ASSERT_NE(at, std::string::npos) << t.out;
  const size_t begin = t.out.rfind("@counts[.pid = ", at), end = t.out.find("]: ", at);
  ASSERT_NE(begin, std::string::npos) << t.out;
  const std::string row = t.out.substr(begin, t.out.find('\n', end) - begin);
  EXPECT_NE(row.find(", .user_stack_id =\n        malloc+0\n        alloc_leaf+"), std::string::npos) << row;
  EXPECT_NE(row.find("\n, .kern_stack_id = -14, .name = \"stack_target_gc\"]: 12"), std::string::npos) << row;
}

// The rows of a --json hash map keyed by stack id: each stack's frames (cut after main)
// and its value, rows of the same frames added.
std::map<std::vector<std::string>, uint64_t> stack_rows(const json& map) {
  std::map<std::vector<std::string>, uint64_t> rows;
  for (const auto& e : map["entries"]) {
    std::vector<std::string> fs;
    if (e.contains("ustack"))
      for (const auto& f : e["ustack"]) {
        fs.push_back(f.get<std::string>());
        if (frame_function(fs.back()) == "main") break;
      }
    rows[fs] += e["value"].get<uint64_t>();
  }
  return rows;
}

// fentry and fexit programs take user stacks (the image publishes the function's entry
// frame, abi/ctx.hpp kCtxEntrySp): on alloc_leaf of stack_target, built by gcc and clang
// at -O0 and -O2 with and without frame pointers, both give exactly the frames a uprobe
// at alloc_leaf gives (function+offset, every frame to main), with exactly each path's
// calls (without unwind tables: the uprobe's frames, whatever they are); bpf_get_stack's
// first frame is bpf_get_func_ip's, and a skip shifts the frames.
TEST(RunE2E, FentryAndFexitStacksAreTheUprobesFrames) {
  std::vector<std::string> builds = {"gcc_O2_nocfi"};
  for (const char* cc : {"gcc", "clang"})
    for (const char* opt : {"O0", "O2"})
      for (const char* fp : {"fp", "nofp"}) builds.push_back(fmt::format("{}_{}_{}", cc, opt, fp));
  auto functions = [](const std::map<std::vector<std::string>, uint64_t>& rows) {
    std::map<std::vector<std::string>, uint64_t> out;
    for (const auto& [fs, n] : rows) {
      std::vector<std::string> names;
      for (const auto& f : fs) names.push_back(frame_function(f));
      out[names] += n;
    }
    return out;
  };
  const std::map<std::vector<std::string>, uint64_t> want = {
      {{"alloc_leaf", "path_a3", "path_a2", "path_a1", "main"}, 9}, {{"alloc_leaf", "path_b1", "main"}, 18}};
  // Two different stacks in one bucket of the stack trace map: bpf_get_stackid says
  // -EEXIST for the second (the kernel's rule without BPF_F_REUSE_STACKID). The buckets
  // follow the addresses, which ASLR moves at every run: about 1 run in 1,000 per pair
  // of stacks. Such a run is made again (at most twice); a stack that is wrong every
  // time still fails below.
  const auto run_stacks = [](const std::string& object, const std::string& target) {
    test::RunResult r;
    for (int attempt = 0; attempt < 3; ++attempt) {
      r = test::run_program({UTRAMP_CLI, "run", object, "--json", "--", target, "9"}, {.timeout_s = 120});
      if (r.exit_code != 0) break;
      auto g = globals_of(r.out);
      if (!g.count("errors") || g["errors"]["value"] == 0) break;
    }
    return r;
  };
  for (const std::string& b : builds) {
    SCOPED_TRACE(b);
    const std::string target = std::string(UTRAMP_STACK_TARGETS_DIR) + "/stack_target_" + b;
    const auto up = run_stacks(bad("ustack_uprobe"), target);
    ASSERT_EQ(up.exit_code, 0) << up.err;
    const auto fe = run_stacks(bad("ustack_fentry"), target);
    ASSERT_EQ(fe.exit_code, 0) << fe.err;
    EXPECT_NE(fe.out.find("stack_target: 9 calls of path_a (1000 bytes), 18 of path_b (2000 bytes)"),
              std::string::npos);
    auto um = maps_of(up.out), fm = maps_of(fe.out);
    ASSERT_TRUE(um.count("uprobe_stack_calls")) << up.out;
    ASSERT_TRUE(fm.count("fentry_stack_calls") && fm.count("fexit_stack_calls")) << fe.out;
    const auto uprobe = stack_rows(um["uprobe_stack_calls"]);
    // Without unwind tables the frame-pointer walk at a function's first instruction
    // skips its caller (docs/ebpf.md), from a uprobe and from fentry alike.
    if (b != "gcc_O2_nocfi") EXPECT_EQ(functions(uprobe), want) << um["uprobe_stack_calls"].dump();
    EXPECT_EQ(stack_rows(fm["fentry_stack_calls"]), uprobe) << fm["fentry_stack_calls"].dump();
    EXPECT_EQ(stack_rows(fm["fexit_stack_calls"]), uprobe) << fm["fexit_stack_calls"].dump();
    auto g = globals_of(fe.out);
    EXPECT_EQ(g["errors"]["value"], 0) << g["last_error"].dump();
    EXPECT_EQ(g["first_is_func"]["value"], 27);
    EXPECT_EQ(g["skip1_ok"]["value"], 27);
  }
}

}  // namespace
}  // namespace utramp
