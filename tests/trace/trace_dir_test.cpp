// The trace directory: writer/reader round trip, the k-way merge, streaming over many
// threads and chunk boundaries, and damaged directories (truncated, corrupt, missing).
#include "trace/trace_dir.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "ring_util.hpp"
#include "trace/write_queue.hpp"
#include "trace/zstd_frames.hpp"

using namespace utramp;
using namespace utramp::trace;
using test::intact;
using test::seq_event;
using test::TempDir;

namespace {

Event ev(EventType type, uint64_t time, uint64_t addr = 0, uint16_t depth = 0, uint64_t data = 0) {
  Event e{};
  e.time = time;
  e.addr = addr;
  e.data = data;
  e.depth = depth;
  e.type = static_cast<uint8_t>(type);
  return e;
}

std::vector<Event> read_all(EventStream& s) {
  std::vector<Event> out;
  while (auto e = s.next()) out.push_back(*e);
  return out;
}

bool same(const Event& a, const Event& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool has_warning(const TraceReader& r, const std::string& text) {
  for (const auto& w : r.warnings())
    if (w.find(text) != std::string::npos) return true;
  return false;
}

std::string all_warnings(const TraceReader& r) {
  std::string s;
  for (const auto& w : r.warnings()) s += w + "\n";
  return s;
}

TEST(TraceDir, RoundTrip) {
  TempDir tmp;
  const std::string dir = tmp / "t";
  {
    auto w = TraceWriter::create(dir);
    ASSERT_TRUE(w.ok()) << w.error().message;
    std::vector<Event> a, b;
    for (uint64_t s = 0; s < 10000; ++s) a.push_back(seq_event(s, 1));
    for (uint64_t s = 0; s < 7; ++s) b.push_back(seq_event(s, 2));
    // In several appends, interleaved between threads.
    ASSERT_TRUE(w->append(10, 10, std::span(a).subspan(0, 4000)).ok());
    ASSERT_TRUE(w->append(10, 11, b).ok());
    ASSERT_TRUE(w->append(10, 10, std::span(a).subspan(4000)).ok());
    w->add_lost(10, 11, 5);
    const std::vector<Function> fns{{0x1000, 0x40, "main", "/bin/app"},
                                    {0x1040, 0x10, "_Z3fooi", "/bin/app"},
                                    {0x2000, 0, "sized_zero", "/lib/x.so"}};
    ASSERT_TRUE(write_functions_file(dir, 10, fns).ok());
    ASSERT_TRUE(write_process_file(dir, {20, 10, {"/bin/app", "--child"}, 5, 6, "exited 3"}).ok());
    TraceInfo info;
    info.command = {"/bin/app", "arg with space"};
    info.time_unit = "tsc";
    info.ticks_per_ns = 2.5;
    info.start_time = 123;
    info.buffer_mode = "overwrite";
    info.exit = "killed by SIGSEGV";
    info.exit_code = 139;
    info.unclaimed_threads = 2;
    ASSERT_TRUE(w->write_info(info).ok());  // threads filled from the writer
    auto th = w->threads();
    ASSERT_EQ(th.size(), 2u);
    EXPECT_EQ(th[0].events, 10000u);
    EXPECT_EQ(th[1].lost, 5u);
  }
  auto r = TraceReader::open(dir);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->warnings().empty()) << all_warnings(*r);
  const auto& info = r->info();
  EXPECT_EQ(info.version, kFormatVersion);
  EXPECT_EQ(info.command, (std::vector<std::string>{"/bin/app", "arg with space"}));
  EXPECT_EQ(info.time_unit, "tsc");
  EXPECT_EQ(info.buffer_mode, "overwrite");
  EXPECT_EQ(info.exit, "killed by SIGSEGV");
  EXPECT_EQ(info.exit_code, 139);
  EXPECT_EQ(info.unclaimed_threads, 2u);
  EXPECT_EQ(info.start_time, 123u);
  ASSERT_EQ(info.threads.size(), 2u);
  EXPECT_DOUBLE_EQ(r->to_ns(250), 100.0);

  EXPECT_EQ(r->threads(), (std::vector<std::pair<uint32_t, uint32_t>>{{10, 10}, {10, 11}}));
  EXPECT_EQ(r->event_count(10, 10), 10000u);
  auto s = r->stream(10, 10);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->pid(), 10u);
  EXPECT_EQ(s->tid(), 10u);
  auto got = read_all(*s);
  ASSERT_EQ(got.size(), 10000u);
  for (uint64_t i = 0; i < got.size(); ++i) ASSERT_TRUE(same(got[i], seq_event(i, 1))) << i;
  EXPECT_EQ(read_all(*r->stream(10, 11)).size(), 7u);
  EXPECT_EQ(r->stream(1, 1), nullptr);

  const SymbolTable& syms = r->symbols(10);
  EXPECT_EQ(syms.size(), 3u);
  EXPECT_EQ(syms.name(0x1000), "main");
  EXPECT_EQ(syms.name(0x1010), "main+0x10");
  EXPECT_EQ(syms.name(0x1040), "_Z3fooi");
  EXPECT_EQ(syms.name(0x2000), "sized_zero");
  EXPECT_EQ(syms.name(0x2001), "0x2001");
  EXPECT_EQ(syms.name(0x50), "0x50");
  ASSERT_NE(syms.find(0x104f), nullptr);
  EXPECT_EQ(syms.find(0x104f)->object, "/bin/app");
  EXPECT_EQ(syms.find(0x1050), nullptr);
  // Process 20 forked from 10 and has no table: it uses its parent's.
  EXPECT_EQ(&r->symbols(20), &syms);
  ASSERT_EQ(r->processes().count(20), 1u);
  EXPECT_EQ(r->processes().at(20).parent, 10u);
  EXPECT_EQ(r->processes().at(20).exit, "exited 3");
}

TEST(TraceDir, MergeOrdersByTimeThenThreadAndKeepsArgumentsWithTheirEntry) {
  TempDir tmp;
  const std::string dir = tmp / "t";
  {
    auto w = TraceWriter::create(dir);
    ASSERT_TRUE(w.ok());
    // Thread 2 sorts after thread 1 on equal times.
    std::vector<Event> t1{ev(EventType::entry, 10, 0xa), ev(EventType::exit, 30, 0xa),
                          ev(EventType::entry, 50, 0xb), ev(EventType::exit, 50, 0xb)};
    std::vector<Event> t2{ev(EventType::entry, 5, 0xc),  ev(EventType::arg, 5, 0xc),
                          ev(EventType::string, 5, 0xc), ev(EventType::exit, 30, 0xc),
                          ev(EventType::entry, 40, 0xd), ev(EventType::arg, 99, 0xd),
                          ev(EventType::exit, 60, 0xd)};
    // Thread 3's entry at time 5 ties with thread 2's arguments, which stay together.
    std::vector<Event> t3{ev(EventType::entry, 5, 0xe), ev(EventType::exit, 70, 0xe)};
    ASSERT_TRUE(w->append(1, 1, t1).ok());
    ASSERT_TRUE(w->append(1, 2, t2).ok());
    ASSERT_TRUE(w->append(1, 3, t3).ok());
    ASSERT_TRUE(w->write_info(TraceInfo{}).ok());
  }
  auto r = TraceReader::open(dir);
  ASSERT_TRUE(r.ok());
  auto m = r->merged();
  std::vector<std::tuple<uint32_t, uint8_t, uint64_t>> got;
  while (auto e = m->next()) got.emplace_back(m->tid(), e->type, e->time);
  const uint8_t E = 1, X = 2, A = 5, S = 6;
  const std::vector<std::tuple<uint32_t, uint8_t, uint64_t>> want{
      {2, E, 5},  {2, A, 5},  {2, S, 5},  {3, E, 5},  {1, E, 10}, {1, X, 30}, {2, X, 30},
      {2, E, 40}, {2, A, 99}, {1, E, 50}, {1, X, 50}, {2, X, 60}, {3, X, 70}};
  EXPECT_EQ(got, want);
}

TEST(TraceDir, MergeStreamsManyThreadsAcrossChunks) {
  TempDir tmp;
  const std::string dir = tmp / "t";
  constexpr uint32_t kThreads = 150;  // beyond the writer's open-file cap and keep_open
  constexpr uint64_t kEach = 3000;    // beyond the merged chunk size
  {
    auto w = TraceWriter::create(dir);
    ASSERT_TRUE(w.ok());
    for (uint64_t s = 0; s < kEach; s += 500)
      for (uint32_t t = 0; t < kThreads; ++t) {
        std::vector<Event> chunk;
        for (uint64_t k = s; k < s + 500; ++k)
          chunk.push_back(ev(EventType::entry, k * kThreads + (t * 7) % kThreads, t, 0, k));
        ASSERT_TRUE(w->append(1, 1000 + t, chunk).ok());
      }
    ASSERT_TRUE(w->write_info(TraceInfo{}).ok());
  }
  auto r = TraceReader::open(dir);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->threads().size(), kThreads);
  auto m = r->merged();
  uint64_t n = 0, last = 0;
  std::vector<uint64_t> next(kThreads, 0);
  while (auto e = m->next()) {
    ASSERT_GE(e->time, last);
    last = e->time;
    const uint32_t t = m->tid() - 1000;
    ASSERT_EQ(e->addr, t);
    ASSERT_EQ(e->data, next[t]++);
    ++n;
  }
  EXPECT_EQ(n, kThreads * kEach);
}

TEST(TraceDir, TruncatedEventsFileIsReadUpToTheLastWholeRecord) {
  TempDir tmp;
  const std::string dir = tmp / "t";
  {
    auto w = TraceWriter::create(dir);
    ASSERT_TRUE(w.ok());
    std::vector<Event> a;
    for (uint64_t s = 0; s < 1234; ++s) a.push_back(seq_event(s));
    ASSERT_TRUE(w->append(12, 12, a).ok());
    ASSERT_TRUE(w->write_info(TraceInfo{}).ok());
  }
  const std::string f = dir + "/events-12-12.bin";
  ASSERT_EQ(truncate(f.c_str(), 32 + 1233 * 32 + 17), 0);
  auto r = TraceReader::open(dir);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(
      has_warning(*r, "events-12-12.bin: truncated after 1233 events (last record 17 bytes)"))
      << all_warnings(*r);
  EXPECT_EQ(read_all(*r->stream(12, 12)).size(), 1233u);
  EXPECT_EQ(read_all(*r->merged()).size(), 1233u);
  EXPECT_TRUE(r->truncated(12, 12));
  EXPECT_FALSE(r->truncated(12, 13));
  // Whole records only: not cut short.
  ASSERT_EQ(truncate(f.c_str(), 32 + 1233 * 32), 0);
  EXPECT_FALSE(TraceReader::open(dir)->truncated(12, 12));
}

TEST(TraceDir, DamagedFilesAreReportedAndTheRestIsRead) {
  TempDir tmp;
  const std::string dir = tmp / "t";
  {
    auto w = TraceWriter::create(dir);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->append(1, 1, std::vector<Event>{seq_event(0)}).ok());
    ASSERT_TRUE(w->append(1, 2, std::vector<Event>{seq_event(0)}).ok());
    ASSERT_TRUE(w->append(1, 3, std::vector<Event>{seq_event(0)}).ok());
    const std::vector<Function> fns{{0x10, 4, "f", "o"}};
    ASSERT_TRUE(write_functions_file(dir, 1, fns).ok());
  }
  // Bad magic, a header cut short, a malformed symbol line, a broken info.json.
  {
    std::fstream f(dir + "/events-1-2.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.write("XXXXXXXX", 8);
  }
  ASSERT_EQ(truncate((dir + "/events-1-3.bin").c_str(), 20), 0);
  {
    std::ofstream f(dir + "/functions-1.tsv", std::ios::app);
    f << "zz\tnot a line\n";
  }
  {
    std::ofstream f(dir + "/info.json");
    f << "{\"version\": 1, \"comm";
  }
  auto r = TraceReader::open(dir);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(has_warning(*r, "events-1-2.bin: not a utramp events file (bad magic)"))
      << all_warnings(*r);
  EXPECT_TRUE(has_warning(*r, "events-1-3.bin: truncated before the end of its header"))
      << all_warnings(*r);
  EXPECT_TRUE(has_warning(*r, "functions-1.tsv: 1 malformed line(s), the first at line 3"))
      << all_warnings(*r);
  EXPECT_TRUE(has_warning(*r, "info.json: not valid JSON")) << all_warnings(*r);
  EXPECT_EQ(r->threads(), (std::vector<std::pair<uint32_t, uint32_t>>{{1, 1}}));
  EXPECT_EQ(r->symbols(1).name(0x10), "f");
}

TEST(TraceDir, MissingInfoIsAWarningNotAnError) {
  TempDir tmp;
  const std::string dir = tmp / "t";
  {
    auto w = TraceWriter::create(dir);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->append(1, 1, std::vector<Event>{seq_event(0)}).ok());
  }
  auto r = TraceReader::open(dir);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(has_warning(*r, "info.json: missing"));
  EXPECT_EQ(r->info().threads.size(), 1u);
  EXPECT_EQ(r->info().threads[0].events, 1u);
}

TEST(TraceDir, UnreadableDirectoriesAreErrors) {
  TempDir tmp;
  auto missing = TraceReader::open(tmp / "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Errc::not_found);
  EXPECT_NE(missing.error().message.find("no such trace directory"), std::string::npos);

  std::filesystem::create_directory(tmp / "empty");
  auto empty = TraceReader::open(tmp / "empty");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message.find("not a utramp trace directory"), std::string::npos);

  { std::ofstream f(tmp / "file"); }
  EXPECT_FALSE(TraceReader::open(tmp / "file").ok());

  std::filesystem::create_directory(tmp / "newer");
  {
    std::ofstream f(tmp / "newer/info.json");
    f << R"({"version": 99})";
  }
  auto newer = TraceReader::open(tmp / "newer");
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.error().code, Errc::unsupported);
  EXPECT_NE(newer.error().message.find("newer utramp"), std::string::npos);
}

TEST(TraceDir, CreateEmptiesATraceButNeverAnythingElse) {
  TempDir tmp;
  const std::string dir = tmp / "t";
  {
    auto w = TraceWriter::create(dir);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->append(1, 1, std::vector<Event>{seq_event(0)}).ok());
    ASSERT_TRUE(w->write_info(TraceInfo{}).ok());
  }
  { std::ofstream f(dir + "/agent-12.log"); }
  { std::ofstream f(dir + "/buffers.shm"); }
  {
    auto w = TraceWriter::create(dir);  // a second recording into the same directory
    ASSERT_TRUE(w.ok()) << w.error().message;
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir));

  { std::ofstream f(dir + "/thesis.tex"); }
  auto refused = TraceWriter::create(dir);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("not a utramp trace directory (it holds thesis.tex)"),
            std::string::npos)
      << refused.error().message;
  EXPECT_TRUE(std::filesystem::exists(dir + "/thesis.tex"));

  EXPECT_FALSE(TraceWriter::create(dir + "/thesis.tex").ok());
  EXPECT_FALSE(TraceWriter::create(tmp / "no/such/parent").ok());
}

TEST(TraceDir, InfoJsonIsDocumentedJson) {
  TempDir tmp;
  const std::string dir = tmp / "t";
  auto w = TraceWriter::create(dir);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->append(3, 4, std::vector<Event>{seq_event(0), seq_event(1)}).ok());
  w->add_lost(3, 4, 9);
  TraceInfo info;
  info.command = {"a"};
  info.tracer = "function";
  ASSERT_TRUE(w->write_info(info).ok());
  std::ifstream f(dir + "/info.json");
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["format"], "utramp-trace");
  EXPECT_EQ(j["version"], kFormatVersion);
  EXPECT_EQ(j["tracer"], "function");
  EXPECT_EQ(j["threads"][0]["pid"], 3);
  EXPECT_EQ(j["threads"][0]["tid"], 4);
  EXPECT_EQ(j["threads"][0]["events"], 2);
  EXPECT_EQ(j["threads"][0]["lost"], 9);
  // The events file: a 32-byte header, then the records.
  EXPECT_EQ(std::filesystem::file_size(dir + "/events-3-4.bin"), 32u + 2 * 32u);
  std::ifstream ef(dir + "/events-3-4.bin", std::ios::binary);
  EventFileHeader h{};
  ef.read(reinterpret_cast<char*>(&h), sizeof h);
  EXPECT_EQ(std::string(h.magic, 8), "UTRTHR01");
  EXPECT_EQ(h.version, kFormatVersion);
  EXPECT_EQ(h.record_size, 32u);
  EXPECT_EQ(h.pid, 3u);
  EXPECT_EQ(h.tid, 4u);
}

// The per-process files, as the agent writes them in every traced process.
TEST(TraceDir, ProcessFilesAsDocumented) {
  TempDir tmp;
  const std::string dir = tmp.path;
  const std::vector<Function> fns{{0x401126, 42, "main", "/home/me/app"},
                                  {0x401150, 18, "_ZN3app6Parser5parseEPKc", "/home/me/app"}};
  ASSERT_TRUE(write_functions_file(dir, 7, fns).ok());
  std::ifstream in(dir + "/functions-7.tsv");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(),
            "# address\tsize\tname\tobject\n"
            "0x401126\t42\tmain\t/home/me/app\n"
            "0x401150\t18\t_ZN3app6Parser5parseEPKc\t/home/me/app\n");

  ASSERT_TRUE(write_process_file(dir, {7, 0, {"./app", "--flag"}, 1000, 5000, "exited 0"}).ok());
  auto p = read_process_file(dir, 7);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->pid, 7u);
  EXPECT_EQ(p->parent, 0u);
  EXPECT_EQ(p->command, (std::vector<std::string>{"./app", "--flag"}));
  EXPECT_EQ(p->start_time, 1000u);
  EXPECT_EQ(p->end_time, 5000u);
  EXPECT_EQ(p->exit, "exited 0");
  EXPECT_EQ(read_process_file(dir, 8).error().code, Errc::not_found);
  std::ofstream(dir + "/process-9.json") << "{\"parent\": \"nine\"}";
  EXPECT_EQ(read_process_file(dir, 9).error().code, Errc::bad_format);

  ASSERT_TRUE(write_maps_file(dir, 7, "00400000-00401000 r-xp 00000000 08:01 12 /home/me/app\n").ok());

  // Owner-only; nothing left behind but the files themselves.
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.insert(e.path().filename());
    if (e.path().filename() == "process-9.json") continue;  // written by this test
    struct stat st {};
    ASSERT_EQ(stat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << e.path();
  }
  EXPECT_EQ(names, (std::set<std::string>{"functions-7.tsv", "process-7.json", "process-9.json",
                                          "maps-7.txt"}));
}

// A name the format cannot hold costs that function only, and the error names it.
TEST(TraceDir, FunctionsWithTabsAreLeftOutAndSaid) {
  TempDir tmp;
  const std::vector<Function> fns{{0x10, 4, "good", "/bin/app"},
                                  {0x20, 4, "bad\tname", "/bin/app"},
                                  {0x30, 4, "other", "/dir\nwith newline/lib.so"}};
  auto w = write_functions_file(tmp.path, 1, fns);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("2 function(s) left out"), std::string::npos) << w.error().message;
  EXPECT_NE(w.error().message.find("\"bad\\tname\""), std::string::npos) << w.error().message;
  auto r = TraceReader::open(tmp.path);
  ASSERT_FALSE(r.ok());  // no events, no info.json: not a trace, but the file is there
  std::ifstream in(tmp.path + "/functions-1.tsv");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "# address\tsize\tname\tobject\n0x10\t4\tgood\t/bin/app\n");
}

// Files are never written through a link someone left: one at the temporary name is
// removed and the file created anew (exclusively), one at the name itself replaced.
TEST(TraceDir, ProcessFilesAreNotWrittenThroughLinks) {
  TempDir tmp, elsewhere;
  const std::string target = elsewhere.path + "/victim";
  ASSERT_EQ(symlink(target.c_str(), (tmp.path + "/process-3.json.tmp").c_str()), 0);
  auto w = write_process_file(tmp.path, {3, 0, {"x"}, 1, 0, ""});
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_FALSE(std::filesystem::exists(target));
  EXPECT_FALSE(std::filesystem::exists(tmp.path + "/process-3.json.tmp"));
  EXPECT_TRUE(std::filesystem::is_regular_file(tmp.path + "/process-3.json"));
  EXPECT_TRUE(read_process_file(tmp.path, 3).ok());
  // A link at the name itself is replaced, not followed.
  ASSERT_EQ(symlink(target.c_str(), (tmp.path + "/maps-3.txt").c_str()), 0);
  ASSERT_TRUE(write_maps_file(tmp.path, 3, "text\n").ok());
  EXPECT_FALSE(std::filesystem::exists(target));
  EXPECT_FALSE(std::filesystem::is_symlink(tmp.path + "/maps-3.txt"));
}

// A second writer of the same directory is refused before it removes anything, and
// names the first; once the first is gone, the directory can be recorded into again.
TEST(TraceDir, OneWriterAtATime) {
  TempDir tmp;
  const std::string dir = tmp / "t";
  {
    auto first = TraceWriter::create(dir);
    ASSERT_TRUE(first.ok()) << first.error().message;
    TraceInfo info;
    info.state = "recording";
    info.recorder_pid = 4242;
    ASSERT_TRUE(first->write_info(info).ok());
    ASSERT_TRUE(first->append(1, 1, std::vector<Event>{seq_event(0)}).ok());
    auto second = TraceWriter::create(dir);
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.error().code, Errc::busy);
    EXPECT_NE(second.error().message.find("another utramp record (pid 4242)"), std::string::npos)
        << second.error().message;
    EXPECT_TRUE(std::filesystem::exists(dir + "/events-1-1.bin"));
    EXPECT_TRUE(std::filesystem::exists(dir + "/info.json"));
    // A reader while it records: told so, not told it was cut.
    auto r = TraceReader::open(dir);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(has_warning(*r, "being recorded now by utramp record (pid 4242)")) << all_warnings(*r);
  }
  // The writer is gone and info.json still says "recording": its recorder died.
  auto r = TraceReader::open(dir);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(has_warning(*r, "the recording did not finish: utramp record (pid 4242)")) << all_warnings(*r);
  EXPECT_TRUE(TraceWriter::create(dir).ok());
}

// A write that fails (here: past RLIMIT_FSIZE, as a full disk would) cuts the trace:
// whole records stay, what follows is counted as unsaved, info.json says where, and a
// reader ends the thread's events with a `lost` event for what was not saved.
TEST(TraceDir, AFailedWriteCutsTheTraceAtWholeRecords) {
  TempDir tmp;
  const std::string dir = tmp / "t";
  auto w = TraceWriter::create(dir);
  ASSERT_TRUE(w.ok()) << w.error().message;
  std::vector<Event> a, b;
  for (uint64_t i = 0; i < 60; ++i) a.push_back(seq_event(i)), b.push_back(seq_event(60 + i));
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto old_xfsz = signal(SIGXFSZ, SIG_IGN);
  const rlimit small{32 + 100 * 32 + 17, old.rlim_max};  // 100 records and part of one
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const bool first_ok = w->append(1, 2, a).ok();
  auto cut = w->append(1, 2, b);
  const bool after_ok = w->append(1, 2, a).ok();  // counted, not written
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_xfsz);
  EXPECT_TRUE(first_ok);
  ASSERT_FALSE(cut.ok());
  EXPECT_TRUE(after_ok);
  EXPECT_NE(cut.error().message.find("events-1-2.bin: File too large"), std::string::npos) << cut.error().message;
  EXPECT_EQ(w->cut_reason(), cut.error().message);
  EXPECT_EQ(w->cut_time(), 100u);  // the first event not saved
  TraceInfo info;
  ASSERT_TRUE(w->finish(info).ok());
  EXPECT_EQ(std::filesystem::file_size(dir + "/events-1-2.bin"), 32u + 100 * 32u);
  EXPECT_FALSE(std::filesystem::exists(dir + "/reserve.tmp"));

  auto r = TraceReader::open(dir);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->info().state, "cut");
  ASSERT_EQ(r->info().threads.size(), 1u);
  EXPECT_EQ(r->info().threads[0].events, 100u);
  EXPECT_EQ(r->info().threads[0].unsaved, 80u);
  EXPECT_FALSE(r->truncated(1, 2));
  const auto events = read_all(*r->stream(1, 2));
  ASSERT_EQ(events.size(), 101u);
  EXPECT_EQ(events[99].time, 99u);
  EXPECT_EQ(events[100].type, static_cast<uint8_t>(EventType::lost));
  EXPECT_EQ(events[100].data, 80u);
  EXPECT_EQ(events[100].time, 99u);
  EXPECT_TRUE(has_warning(*r, "the recording was cut at +")) << all_warnings(*r);
}

// Arguments captured with -A can be passwords: the directory and every file are the
// user's alone whatever the umask, and a directory that was looser becomes so.
TEST(TraceDir, OwnerOnlyWhateverTheUmask) {
  TempDir tmp;
  const std::string dir = tmp / "t";
  ASSERT_EQ(mkdir(dir.c_str(), 0777), 0);
  const mode_t old = umask(0);
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  {
    auto w = TraceWriter::create(dir);
    ASSERT_TRUE(w.ok()) << w.error().message;
    ASSERT_TRUE(w->append(1, 1, std::vector<Event>{seq_event(0)}).ok());
    ASSERT_TRUE(w->finish(TraceInfo{}).ok());
  }
  ASSERT_TRUE(write_process_file(dir, {1, 0, {"x"}, 1, 0, ""}).ok());
  ASSERT_TRUE(write_maps_file(dir, 1, "maps\n").ok());
  ASSERT_TRUE(write_functions_file(dir, 1, std::vector<Function>{{0x10, 4, "f", "/bin/app"}}).ok());
  umask(old);
  struct stat st {};
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    ASSERT_EQ(lstat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u) << e.path();
    ++files;
  }
  EXPECT_EQ(files, 5u);  // info, events, process, maps, functions
}

// Only the user's own directory, reached only through the user's (or root's) links.
TEST(TraceDir, AnotherUsersDirectoryOrLinkIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to give a directory and a link to another user";
  TempDir tmp;
  const std::string theirs = tmp / "theirs", mine = tmp / "mine", link = tmp / "link";
  ASSERT_EQ(mkdir(theirs.c_str(), 0700), 0);
  ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
  auto w = TraceWriter::create(theirs);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("owned by uid 65534, not by you"), std::string::npos) << w.error().message;
  ASSERT_EQ(mkdir(mine.c_str(), 0700), 0);
  std::ofstream(mine + "/info.json") << "mine\n";
  ASSERT_EQ(symlink(mine.c_str(), link.c_str()), 0);
  EXPECT_TRUE(TraceWriter::create(link).ok()) << "the user's own link is followed";
  std::ofstream(mine + "/info.json") << "mine\n";
  ASSERT_EQ(lchown(link.c_str(), 65534, 65534), 0);
  w = TraceWriter::create(link);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("a symbolic link owned by uid 65534"), std::string::npos) << w.error().message;
  EXPECT_TRUE(std::filesystem::exists(mine + "/info.json"));
}

TEST(TraceDir, ExitDescriptions) {
  EXPECT_EQ(exit_description(W_EXITCODE(0, 0)), "exited 0");
  EXPECT_EQ(exit_description(W_EXITCODE(3, 0)), "exited 3");
  EXPECT_EQ(exit_description(SIGKILL), "killed by SIGKILL");
  EXPECT_EQ(exit_description(SIGSEGV | WCOREFLAG), "killed by SIGSEGV (core dumped)");
}

}  // namespace

// --follow-exec: a process that exec'd ran two programs, possibly with functions at the
// same addresses. Each event is named from the program that ran at its time; a forked
// child without files of its own has its parent's program of when it forked; a trace
// whose process files list no images (written before they were kept) has one.
TEST(TraceDir, EachProgramOfAProcessKeepsItsFunctions) {
  TempDir tmp;
  const std::string dir = tmp / "t";
  {
    auto w = TraceWriter::create(dir);
    ASSERT_TRUE(w.ok()) << w.error().message;
    ASSERT_TRUE(w->write_info(TraceInfo{}).ok());
  }
  const std::vector<Function> first{{0x1000, 0x10, "first_fn", "/bin/first"}};
  const std::vector<Function> second{{0x1000, 0x10, "second_fn", "/bin/second"}};
  // As the agents write them: the first program's files, then at the exec they become
  // image 0's, and the second program's are written.
  ASSERT_TRUE(write_functions_file(dir, 7, first).ok());
  ASSERT_TRUE(write_maps_file(dir, 7, "first maps\n").ok());
  const int dfd = open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dfd, 0);
  ASSERT_TRUE(keep_image_files(dfd, dir, 7, 0).ok());
  close(dfd);
  ASSERT_TRUE(write_functions_file(dir, 7, second).ok());
  ProcessInfo p{7, 0, {"/bin/second"}, 100, 0, "", {{100, {"/bin/first"}}, {500, {"/bin/second"}}}};
  ASSERT_TRUE(write_process_file(dir, p).ok());
  ASSERT_TRUE(write_process_file(dir, {8, 7, {"/bin/first"}, 300, 0, ""}).ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/functions-7-0.tsv"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/maps-7-0.txt"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/maps-7.txt"));

  auto back = read_process_file(dir, 7);
  ASSERT_TRUE(back.ok()) << back.error().message;
  ASSERT_EQ(back->images.size(), 2u);
  EXPECT_EQ(back->images[1].time, 500u);
  EXPECT_EQ(back->images[0].command, (std::vector<std::string>{"/bin/first"}));

  auto r = TraceReader::open(dir);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->warnings().empty()) << all_warnings(*r);
  EXPECT_EQ(r->symbols(7, 0).name(0x1000), "first_fn");
  EXPECT_EQ(r->symbols(7, 499).name(0x1004), "first_fn+0x4");
  EXPECT_EQ(r->symbols(7, 500).name(0x1000), "second_fn");
  EXPECT_EQ(r->symbols(7).name(0x1000), "second_fn");
  // The child forked at 300, before the exec: the first program, whatever the time.
  EXPECT_EQ(r->symbols(8, 900).name(0x1000), "first_fn");

  // Images out of time order are not believed.
  std::ofstream(dir + "/process-9.json") << R"({"pid": 9, "images": [{"time": 5}, {"time": 4}]})";
  auto bad = read_process_file(dir, 9);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("not in time order"), std::string::npos) << bad.error().message;
  // A new trace directory over this one removes the per-image files too.
  ASSERT_TRUE(TraceWriter::create(dir).ok());
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

// ---- Compressed events files (Compression::zstd) -------------------------------------

namespace {

std::vector<Event> seq_events(uint64_t from, uint64_t n, uint32_t owner = 0) {
  std::vector<Event> out;
  for (uint64_t s = from; s < from + n; ++s) out.push_back(seq_event(s, owner));
  return out;
}

EventFileHeader header_of(const std::string& path) {
  EventFileHeader h{};
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(&h), sizeof h);
  return h;
}

}  // namespace

// Every event back, in order, whatever the appends' sizes against the frames'; the
// header says the body is zstd; counts are of what was written; a trace of few
// functions (a real one) takes a fraction of its plain size.
TEST(TraceDirZstd, RoundTripAcrossFrames) {
  TempDir tmp;
  const std::string dir = tmp / "t";
  const std::vector<Event> a = seq_events(0, 3 * kZstdFrameEvents + 1000, 1);
  const std::vector<Event> b = seq_events(0, 7, 2);
  {
    auto w = TraceWriter::create(dir, Compression::zstd);
    ASSERT_TRUE(w.ok()) << w.error().message;
    const std::span all(a);
    ASSERT_TRUE(w->append(10, 10, all.subspan(0, 1)).ok());
    ASSERT_TRUE(w->append(10, 11, b).ok());
    ASSERT_TRUE(w->append(10, 10, all.subspan(1, kZstdFrameEvents + 5)).ok());
    EXPECT_EQ(w->threads()[0].events, kZstdFrameEvents);  // one frame written, the rest held
    EXPECT_EQ(w->threads()[1].events, 0u);
    ASSERT_TRUE(w->flush().ok());
    EXPECT_EQ(w->threads()[0].events, kZstdFrameEvents + 6);
    EXPECT_EQ(w->threads()[1].events, 7u);
    ASSERT_TRUE(w->append(10, 10, all.subspan(kZstdFrameEvents + 6)).ok());
    ASSERT_TRUE(w->finish(TraceInfo{}).ok());
    EXPECT_EQ(w->threads()[0].events, a.size());
  }
  const EventFileHeader h = header_of(dir + "/events-10-10.bin");
  EXPECT_EQ(h.flags, kEventFileZstd);
  EXPECT_EQ(h.version, kFormatVersion);
  auto r = TraceReader::open(dir);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->warnings().empty()) << all_warnings(*r);
  EXPECT_EQ(r->event_count(10, 10), a.size());
  EXPECT_FALSE(r->truncated(10, 10));
  const auto got = read_all(*r->stream(10, 10));
  ASSERT_EQ(got.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(same(got[i], a[i])) << "event " << i;
  EXPECT_EQ(read_all(*r->merged()).size(), a.size() + b.size());

  // Calls of a few functions, as a recording holds them: far smaller than plain.
  const std::string small = tmp / "s";
  {
    auto w = TraceWriter::create(small, Compression::zstd);
    ASSERT_TRUE(w.ok());
    std::vector<Event> calls;
    for (uint64_t i = 0; i < 100000; ++i)
      calls.push_back(ev(EventType::leaf, 1000 + 37 * i, 0x401000 + 0x40 * (i % 5), 1, 1020 + 37 * i));
    ASSERT_TRUE(w->append(1, 1, calls).ok());
    ASSERT_TRUE(w->close().ok());
  }
  EXPECT_LT(std::filesystem::file_size(small + "/events-1-1.bin"), 100000u * sizeof(Event) / 4);
  EXPECT_EQ(read_all(*TraceReader::open(small)->stream(1, 1)).size(), 200000u);  // leaves: two each
}

// A damaged frame, or one the file ends inside, ends that thread's events there: every
// event of the frames before it is read, none of it, and the warning names the file and
// the frame's byte offset.
TEST(TraceDirZstd, ADamagedOrCutFrameEndsTheThreadAfterTheFramesBeforeIt) {
  TempDir tmp;
  const std::string dir = tmp / "t";
  const std::string f = dir + "/events-1-1.bin";
  uint64_t end1 = 0, end2 = 0;  // where frames 1 and 2 end
  {
    auto w = TraceWriter::create(dir, Compression::zstd);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->append(1, 1, seq_events(0, kZstdFrameEvents)).ok());
    end1 = std::filesystem::file_size(f);
    ASSERT_TRUE(w->append(1, 1, seq_events(kZstdFrameEvents, kZstdFrameEvents)).ok());
    end2 = std::filesystem::file_size(f);
    ASSERT_TRUE(w->append(1, 1, seq_events(2 * kZstdFrameEvents, 100)).ok());
    ASSERT_TRUE(w->finish(TraceInfo{}).ok());
  }
  ASSERT_GT(end2, end1);
  ASSERT_GT(std::filesystem::file_size(f), end2);
  {  // one byte changed in the middle of frame 2
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>((end1 + end2) / 2);
    io.seekg(at);
    char c = 0;
    io.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    io.seekp(at);
    io.write(&c, 1);
  }
  auto check = [&](const std::string& warning) {
    auto r = TraceReader::open(dir);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(has_warning(*r, warning)) << all_warnings(*r);
    EXPECT_TRUE(r->truncated(1, 1));
    EXPECT_EQ(r->event_count(1, 1), kZstdFrameEvents);
    const auto got = read_all(*r->stream(1, 1));
    ASSERT_EQ(got.size(), kZstdFrameEvents);
    for (const Event& e : got) ASSERT_TRUE(intact(e)) << e.time;
    EXPECT_EQ(got.back().time, kZstdFrameEvents - 1);
    EXPECT_EQ(read_all(*r->merged()).size(), kZstdFrameEvents);
  };
  check("events-1-1.bin: corrupt: the zstd frame at byte " + std::to_string(end1) + ": ");
  check("; the " + std::to_string(kZstdFrameEvents) + " events before it are read");
  // Cut 10 bytes into frame 2.
  ASSERT_EQ(truncate(f.c_str(), static_cast<off_t>(end1 + 10)), 0);
  check("events-1-1.bin: truncated: the zstd frame at byte " + std::to_string(end1) +
        " ends with the file at byte " + std::to_string(end1 + 10));
}

// Frames stored without compression (set_store_frames(): what the recorder writes when
// its compression falls behind) sit among compressed ones and read back the same: every
// event in order, the counts right; the system's zstd decodes the body too; and their
// checksum is checked like a compressed frame's (a changed byte in one is found).
TEST(TraceDirZstd, StoredFramesReadAsCompressedOnes) {
  TempDir tmp;
  const std::string dir = tmp / "t";
  const std::string f = dir + "/events-3-3.bin";
  const std::vector<Event> a = seq_events(0, 4 * kZstdFrameEvents + 123, 3);
  uint64_t stored_at = 0, stored_end = 0;  // where the second (stored) frame is
  {
    auto w = TraceWriter::create(dir, Compression::zstd);
    ASSERT_TRUE(w.ok()) << w.error().message;
    const std::span all(a);
    ASSERT_TRUE(w->append(3, 3, all.subspan(0, kZstdFrameEvents)).ok());  // compressed
    stored_at = std::filesystem::file_size(f);
    w->set_store_frames(true);
    ASSERT_TRUE(w->append(3, 3, all.subspan(kZstdFrameEvents, kZstdFrameEvents)).ok());
    stored_end = std::filesystem::file_size(f);
    w->set_store_frames(false);
    ASSERT_TRUE(w->append(3, 3, all.subspan(2 * kZstdFrameEvents, kZstdFrameEvents)).ok());
    w->set_store_frames(true);  // the rest, a part frame at the end, stored too
    ASSERT_TRUE(w->append(3, 3, all.subspan(3 * kZstdFrameEvents)).ok());
    ASSERT_TRUE(w->finish(TraceInfo{}).ok());
    EXPECT_EQ(w->stored_frames(), 3u);
    EXPECT_EQ(w->threads()[0].events, a.size());
  }
  // A stored frame: its records plus a few bytes of headers.
  EXPECT_GE(stored_end - stored_at, kZstdFrameEvents * sizeof(Event));
  EXPECT_LE(stored_end - stored_at, kZstdFrameEvents * sizeof(Event) + 32);
  auto r = TraceReader::open(dir);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->warnings().empty()) << all_warnings(*r);
  EXPECT_EQ(r->event_count(3, 3), a.size());
  const auto got = read_all(*r->stream(3, 3));
  ASSERT_EQ(got.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(same(got[i], a[i])) << "event " << i;
  // zstd itself (Debian's zstd, if installed) reads the body: the same bytes.
  if (std::system("command -v zstd >/dev/null 2>&1") == 0) {
    const std::string plain = tmp / "plain.bin";
    ASSERT_EQ(std::system(("tail -c +33 " + f + " | zstd -dcq > " + plain).c_str()), 0);
    ASSERT_EQ(std::filesystem::file_size(plain), a.size() * sizeof(Event));
    std::ifstream in(plain, std::ios::binary);
    std::vector<Event> body(a.size());
    in.read(reinterpret_cast<char*>(body.data()), static_cast<std::streamsize>(a.size() * sizeof(Event)));
    for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(same(body[i], a[i])) << "event " << i;
  }
  {  // one byte of a record changed in the stored frame: its checksum no longer matches
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>((stored_at + stored_end) / 2);
    io.seekg(at);
    char c = 0;
    io.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    io.seekp(at);
    io.write(&c, 1);
  }
  auto damaged = TraceReader::open(dir);
  ASSERT_TRUE(damaged.ok());
  EXPECT_TRUE(has_warning(*damaged, "events-3-3.bin: corrupt: the zstd frame at byte " +
                                        std::to_string(stored_at) + ": "))
      << all_warnings(*damaged);
  EXPECT_EQ(damaged->event_count(3, 3), kZstdFrameEvents);
}

// The recorder's writing thread (WriteQueue): every event appended is written, in order,
// with the losses counted, whether the writer keeps up or not. Here the writer is made
// slow (the test hook: each compressed batch takes 2 ms more) while events come in far
// faster: the queue, bounded to 1 MiB, stores frames instead of compressing them once it
// is half full, and nothing is dropped. Several threads' events, interleaved as the
// drain hands them over.
TEST(WriteQueue, ASlowCompressorStoresFramesAndKeepsEveryEvent) {
  TempDir tmp;
  const std::string dir = tmp / "t";
  constexpr uint32_t kThreads = 6;
  constexpr uint64_t kBatch = 3000, kBatches = 40;
  uint64_t stored = 0;
  {
    auto w = TraceWriter::create(dir, Compression::zstd);
    ASSERT_TRUE(w.ok()) << w.error().message;
    WriteQueue q(*w, {.max_bytes = size_t{1} << 20, .slow_write_ns = 2'000'000});
    for (uint64_t b = 0; b < kBatches; ++b)
      for (uint32_t t = 1; t <= kThreads; ++t) {
        q.append(100, 100 + t, seq_events(b * kBatch, kBatch, t));
        q.add_lost(100, 100 + t, 1);
        if (b % 10 == 9) q.flush();
      }
    q.finish();
    EXPECT_LE(q.peak_bytes(), size_t{1} << 20);
    stored = w->stored_frames();
    ASSERT_TRUE(w->finish(TraceInfo{}).ok());
  }
  EXPECT_GT(stored, 0u) << "the writer was never behind: the test tests nothing";
  auto r = TraceReader::open(dir);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->warnings().empty()) << all_warnings(*r);
  ASSERT_EQ(r->threads().size(), kThreads);
  for (uint32_t t = 1; t <= kThreads; ++t) {
    const auto got = read_all(*r->stream(100, 100 + t));
    ASSERT_EQ(got.size(), kBatch * kBatches) << "thread " << t;
    for (uint64_t i = 0; i < got.size(); ++i) ASSERT_TRUE(same(got[i], seq_event(i, t))) << t << " " << i;
  }
  for (const ThreadInfo& ti : r->info().threads) EXPECT_EQ(ti.lost, kBatches) << ti.tid;
}

// Plain files through the queue: the same events as appended directly.
TEST(WriteQueue, PlainFilesHoldEveryEvent) {
  TempDir tmp;
  const std::string dir = tmp / "t";
  const std::vector<Event> a = seq_events(0, 50000, 7);
  {
    auto w = TraceWriter::create(dir);
    ASSERT_TRUE(w.ok());
    WriteQueue q(*w, {.max_bytes = 64 << 10});  // smaller than the appends: append waits
    for (size_t i = 0; i < a.size(); i += 4096)
      q.append(7, 7, std::span(a).subspan(i, std::min<size_t>(4096, a.size() - i)));
    q.finish();
    EXPECT_EQ(w->stored_frames(), 0u);
    ASSERT_TRUE(w->finish(TraceInfo{}).ok());
  }
  auto r = TraceReader::open(dir);
  ASSERT_TRUE(r.ok());
  const auto got = read_all(*r->stream(7, 7));
  ASSERT_EQ(got.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(same(got[i], a[i])) << i;
}

// A write that fails cuts the trace at a frame's end: the part of the frame written is
// taken back, its events and those after it are counted as unsaved.
TEST(TraceDirZstd, AFailedWriteKeepsWholeFrames) {
  TempDir tmp;
  uint64_t frame1 = 0;  // compression is deterministic: the first frame's size, learnt
  {
    auto w = TraceWriter::create(tmp / "probe", Compression::zstd);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->append(1, 2, seq_events(0, kZstdFrameEvents)).ok());
    frame1 = std::filesystem::file_size(tmp / "probe" + "/events-1-2.bin");
  }
  const std::string dir = tmp / "t";
  auto w = TraceWriter::create(dir, Compression::zstd);
  ASSERT_TRUE(w.ok());
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto old_xfsz = signal(SIGXFSZ, SIG_IGN);
  const rlimit small{frame1 + 100, old.rlim_max};  // frame 1 and part of frame 2
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  auto cut = w->append(1, 2, seq_events(0, 2 * kZstdFrameEvents + 50));
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_xfsz);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.error().message.find("events-1-2.bin: File too large"), std::string::npos) << cut.error().message;
  EXPECT_EQ(w->cut_time(), kZstdFrameEvents);  // the first event not saved
  ASSERT_TRUE(w->finish(TraceInfo{}).ok());
  EXPECT_EQ(std::filesystem::file_size(dir + "/events-1-2.bin"), frame1);
  auto r = TraceReader::open(dir);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->warnings().size() == 1 && has_warning(*r, "the recording was cut")) << all_warnings(*r);
  EXPECT_EQ(r->info().threads[0].events, kZstdFrameEvents);
  EXPECT_EQ(r->info().threads[0].unsaved, kZstdFrameEvents + 50);
  const auto events = read_all(*r->stream(1, 2));
  ASSERT_EQ(events.size(), kZstdFrameEvents + 1);
  EXPECT_EQ(events.back().type, static_cast<uint8_t>(EventType::lost));
  EXPECT_EQ(events.back().data, kZstdFrameEvents + 50);
}

