#include "record_run.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "agent/trust.hpp"
#include "arch/cpu.hpp"
#include "commands.hpp"
#include "launch.hpp"
#include "os/dwarf.hpp"
#include "sites/object.hpp"
#include "symbols/glob.hpp"
#include "trace/shm_buffers.hpp"
#include "trace/trace_dir.hpp"
#include "trace/write_queue.hpp"

namespace utramp::cli {

namespace {

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// "; N events lost (why)": for want of room (the remedy is a larger ring, or block
// mode), because a signal handler's calls came while its thread ran the tracer's own
// code, or (block mode) because the recorder made no drain pass for as long as a
// producer waits.
std::string lost_summary(uint64_t lost, uint64_t nested, uint64_t timed_out, trace::BufferMode mode) {
  if (lost == 0) return {};
  nested = std::min(nested, lost);
  timed_out = std::min(timed_out, lost - nested);
  const uint64_t full = lost - nested - timed_out;
  std::vector<std::pair<uint64_t, std::string>> why;
  if (full)
    why.emplace_back(full, mode == trace::BufferMode::overwrite
                               ? "overwritten: raise --buffer-size"
                               : "buffers full: raise --buffer-size, or --mode block");
  if (timed_out)
    why.emplace_back(timed_out, fmt::format("the recorder made no drain pass for {} s while the "
                                            "program waited for room",
                                            trace::kBlockWaitNs / 1'000'000'000));
  if (nested) why.emplace_back(nested, "calls made by signal handlers that interrupted the tracer");
  if (why.size() == 1) return fmt::format("; {} events lost ({})", lost, why[0].second);
  std::string parts;
  for (const auto& [n, text] : why) parts += fmt::format("{}{}: {}", parts.empty() ? "" : "; ", n, text);
  return fmt::format("; {} events lost ({})", lost, parts);
}

}  // namespace

bool parse_wait(const std::string& s, double* seconds) {
  if (s == "forever") {
    *seconds = -1;
    return true;
  }
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end || errno == ERANGE || !std::isfinite(v) || v < 0 || v > 86400.0 * 366 ||
      s.find_first_not_of("0123456789.") != std::string::npos)
    return false;
  *seconds = v;
  return true;
}

bool parse_duration(const std::string& s, uint64_t* ns) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  // strtod reads "nan", "inf" and hexadecimal floats too: only decimal numbers here.
  if (end == s.c_str() || errno == ERANGE || !std::isfinite(v) || v < 0 ||
      s.find_first_not_of("0123456789.eE+-") < static_cast<size_t>(end - s.c_str()))
    return false;
  const std::string unit = end;
  double mul = 1;
  if (unit.empty() || unit == "ns") mul = 1;
  else if (unit == "us") mul = 1e3;
  else if (unit == "ms") mul = 1e6;
  else if (unit == "s") mul = 1e9;
  else return false;
  const double total = v * mul;
  if (total >= 9.2e18) return false;  // beyond uint64_t nanoseconds, with margin
  *ns = static_cast<uint64_t>(total);
  return true;
}

namespace {

// The processes the program started that run under the agent (forked children, what
// they exec'd with --follow-exec), learnt from the trace while it is drained (`fork`
// events, the rings' owners, the process files the agents write) and from the process
// tree: the recorder is a child subreaper (PR_SET_CHILD_SUBREAPER), so every process
// the program started, and theirs, stays below it whoever of them exits first — a
// daemon() child, a posix_spawn child (no fork event, no atfork handler), whose files
// may not exist yet when their parent is seen gone. The kernel reparents a process's
// children before its exit can be seen, so a scan of the tree made after the last
// traced process was seen gone finds every orphan it left. Each is known by its pid and
// start time (/proc/PID/stat), which tell it from a later process given the same pid;
// no descriptor is held per process, so a program that forks thousands of children
// cannot use up the CLI's descriptors (the trace files need them). One that does not
// map the agent (an exec without --follow-exec) is not waited for: it records nothing;
// one whose environment names this recording's agent but that has not mapped it yet
// (still in the dynamic loader after exec) is waited for until it does, for a second at
// most (a program the loader will not preload into never does).
class Descendants {
 public:
  Descendants(uint32_t root, std::string dir, std::string agent_env)
      : root_(root), dir_(std::move(dir)), agent_env_(std::move(agent_env)) {}
  Descendants(const Descendants&) = delete;
  Descendants& operator=(const Descendants&) = delete;
  void learn(uint32_t pid) {
    if (pid == 0 || pid == root_ || watched_.count(pid)) return;
    Watched& w = watched_[pid];
    const Stat st = stat_of(pid);
    w.start = st.start;
    if (!st.alive) w.gone = true;
    else if (!maps_agent(pid)) {
      if (names_agent(pid)) w.loading_until = mono_ns() + kLoadingNs;
      else w.gone = true;
    }
  }

  // The processes whose files say they have not ended (those the agent saw `exit` have).
  void learn_from_files() {
    DIR* d = ::opendir(dir_.c_str());
    if (!d) return;
    std::vector<uint32_t> pids;
    while (dirent* e = ::readdir(d)) {
      unsigned long pid = 0;
      int used = 0;
      if (std::sscanf(e->d_name, "process-%lu.json%n", &pid, &used) == 1 &&
          e->d_name[used] == '\0' && pid <= UINT32_MAX && !watched_.count(static_cast<uint32_t>(pid)))
        pids.push_back(static_cast<uint32_t>(pid));
    }
    ::closedir(d);
    for (uint32_t pid : pids)
      if (auto p = trace::read_process_file(dir_, pid); p && p->exit.empty()) learn(pid);
  }

  // Every process below `top` (this process, a subreaper) in the process tree.
  void learn_from_tree(uint32_t top) {
    std::multimap<uint32_t, uint32_t> children;  // parent -> child
    DIR* d = ::opendir("/proc");
    if (!d) return;
    while (dirent* e = ::readdir(d)) {
      char* end = nullptr;
      const unsigned long pid = std::strtoul(e->d_name, &end, 10);
      if (end == e->d_name || *end || pid == 0 || pid > UINT32_MAX) continue;
      if (const uint32_t ppid = parent_of(static_cast<uint32_t>(pid)))
        children.emplace(ppid, static_cast<uint32_t>(pid));
    }
    ::closedir(d);
    std::vector<uint32_t> todo{top};
    while (!todo.empty()) {
      const uint32_t p = todo.back();
      todo.pop_back();
      for (auto [it, last] = children.equal_range(p); it != last; ++it) {
        learn(it->second);
        todo.push_back(it->second);
      }
    }
  }

  // Forgets the processes that no longer map the agent: a child that exec'd a program
  // without --follow-exec since it was learnt (fork then exec: a daemon, system())
  // records nothing more, and is not waited for.
  void drop_untraced() {
    for (auto& [pid, w] : watched_)
      if (!w.gone && !w.loading_until && !maps_agent(pid)) w.gone = true;
  }

  std::vector<uint32_t> running() {
    std::vector<uint32_t> out;
    for (auto& [pid, w] : watched_) {
      if (w.gone) continue;
      const Stat st = stat_of(pid);
      if (!st.alive || st.start != w.start) {
        w.gone = true;  // ended (its pid maybe reused)
        continue;
      }
      if (w.loading_until) {
        if (maps_agent(pid)) {
          w.loading_until = 0;
        } else if (mono_ns() >= w.loading_until) {
          w.gone = true;
          continue;
        }
      }
      out.push_back(pid);
    }
    return out;
  }

 private:
  static constexpr uint64_t kLoadingNs = 1'000'000'000;
  struct Watched {
    uint64_t start = 0;  // start time (clock ticks after boot): the process's identity
    uint64_t loading_until = 0;  // not mapping the agent yet, but it should: until then
    bool gone = false;
  };
  // Whether PID runs (not a zombie) and since when.
  struct Stat {
    bool alive = false;
    uint64_t start = 0;
  };
  // /proc/PID/stat after the command's closing parenthesis: its fields from the third.
  static std::string stat_fields(uint32_t pid) {
    std::ifstream in(fmt::format("/proc/{}/stat", pid));
    std::string stat;
    if (!std::getline(in, stat)) return {};
    const size_t paren = stat.rfind(')');
    return paren == std::string::npos ? std::string() : stat.substr(paren + 1);
  }
  static Stat stat_of(uint32_t pid) {
    // state (field 3) ... starttime (field 22).
    std::istringstream rest(stat_fields(pid));
    std::string state, field;
    rest >> state;
    for (int i = 4; i < 22 && rest >> field;) ++i;
    uint64_t start = 0;
    if (!(rest >> start)) return {};
    return {state != "Z" && state != "X", start};
  }
  static uint32_t parent_of(uint32_t pid) {
    std::istringstream rest(stat_fields(pid));
    std::string state;
    uint32_t ppid = 0;
    rest >> state >> ppid;
    return ppid;
  }
  static bool maps_agent(uint32_t pid) {
    std::ifstream in(fmt::format("/proc/{}/maps", pid));
    if (!in) return false;
    for (std::string line; std::getline(in, line);)
      if (line.find("/libutramp-agent") != std::string::npos) return true;
    return false;
  }
  // Its environment (as exec gave it) holds UTRAMP_AGENT=this recording's configuration.
  bool names_agent(uint32_t pid) const {
    std::ifstream in(fmt::format("/proc/{}/environ", pid), std::ios::binary);
    for (std::string var; std::getline(in, var, '\0');)
      if (var == agent_env_) return true;
    return false;
  }
  uint32_t root_;
  std::string dir_;
  std::string agent_env_;
  std::map<uint32_t, Watched> watched_;
};

volatile sig_atomic_t g_stop_waiting = 0;

std::string since_start(uint64_t t, uint64_t start, double ticks_per_ns) {
  return fmt::format("+{:.3f} ms", t > start ? static_cast<double>(t - start) / ticks_per_ns / 1e6 : 0.0);
}

// "2026-12-02T03:04:05Z".
std::string utc_now() {
  const time_t now = time(nullptr);
  struct tm tm {};
  gmtime_r(&now, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

int run_record(const RecordOptions& o, RecordResult* out) {
  if (o.command.empty()) {
    fmt::print(stderr, "utramp record: no program given (utramp record [options] -- PROGRAM [ARGS])\n");
    return 2;
  }
  auto target = resolve_target(o.command[0]);
  if (!target) {
    fmt::print(stderr, "utramp record: {}\n", target.error().message);
    return 2;
  }
  const std::string prog = target->binary;
  if (const std::string note = unfollowed_exec_note(*target, o.agent.follow_exec); !note.empty())
    fmt::print(stderr, "utramp record: {}\n", note);
  // Say which patterns match nothing in the program itself (still run: library calls,
  // libraries and dlopen'ed objects are only known at run time), and when it has no
  // compiler sites. Each function is analysed (decoded) only for that: for a program
  // whose outline shows it was built to be traced and no pattern to check, that was a
  // millisecond per 1,000 functions of the CLI's start for nothing.
  const bool patterns = !o.agent.filters.empty() || !o.agent.notrace.empty() || !o.agent.only.empty() ||
                        !o.agent.skip.empty();
  bool built_for_tracing = false;
  if (!patterns)
    if (auto outline = os::read_outline(prog); outline) built_for_tracing = sites::built_for_tracing(*outline);
  if (!built_for_tracing) {
    auto obj = sites::analyse_file(prog);
    if (!obj) {
      fmt::print(stderr, "utramp record: {}: {}\n", prog, obj.error().message);
      return 2;
    }
    const std::pair<const char*, const std::vector<std::string>*> lists[] = {
        {"-F", &o.agent.filters}, {"-N", &o.agent.notrace}, {"--only", &o.agent.only}, {"--skip", &o.agent.skip}};
    for (const auto& [opt, globs] : lists)
      for (const auto& g : *globs) {
        const bool hit = std::any_of(obj->functions.begin(), obj->functions.end(), [&](const auto& f) {
          return symbols::glob_matches(g, symbols::Name(f.name));
        });
        if (!hit)
          fmt::print(stderr, "utramp record: {} '{}' matches no function of {} (running anyway: it "
                             "may name a library function)\n",
                     opt, g, prog);
      }
    size_t attachable = 0;
    bool compiler_sites = obj->has_patchable_entries || obj->has_mcount_loc;
    for (const auto& f : obj->functions) {
      attachable += f.attachable;
      compiler_sites = compiler_sites || (f.attachable && f.kind != sites::SiteKind::prologue);
    }
    // A -finstrument-functions build needs no site: it reports its calls.
    if (!compiler_sites && !obj->reports_calls)
      fmt::print(stderr, "utramp record: {} has no compiler patch sites: {} functions get "
                         "relocated prologues, the rest are skipped (see {}/agent-*.log)\n",
                 prog, attachable, o.output);
  }
  trace::TraceInfo info;
  info.command = o.command;
  info.binary = target->binary;
  info.build_id = os::build_id_hex(target->binary);
  const Target launched = *target;
  return record(
      o, std::move(info),
      [&](const agent::Config& cfg, const std::string& config_path, int* exit_code) -> std::unique_ptr<RecordTarget> {
        auto launch = Launch::start(launched, o.command, cfg, config_path);
        if (!launch) {
          fmt::print(stderr, "utramp record: {}\n", launch.error().message);
          *exit_code = launch.error().code == Errc::not_found ? 2 : 127;
          return nullptr;
        }
        struct Launched : RecordTarget {
          explicit Launched(Launch l) : launch(std::move(l)) {}
          pid_t pid() const override { return launch.pid(); }
          Ended wait(const std::function<bool()>& work, int idle_ms) override { return launch.wait(work, idle_ms); }
          Launch launch;
        };
        return std::make_unique<Launched>(std::move(*launch));
      },
      out);
}

int record(const RecordOptions& o, trace::TraceInfo info, const StartTarget& start, RecordResult* out) {
  // DIR: created 0700 or checked to be the user's, locked against a second recording,
  // emptied of an older trace (TraceWriter).
  auto writer = trace::TraceWriter::create(o.output, o.compression);
  if (!writer) {
    fmt::print(stderr, "utramp record: {}\n", writer.error().message);
    return 2;
  }
  // The agent writes into DIR from the target, whose working directory may change.
  std::string dir_path = o.output;
  if (char* abs = realpath(o.output.c_str(), nullptr)) {
    dir_path = abs;
    free(abs);
  }
  // The rings: an anonymous file, so that nothing of them outlives the processes that
  // map them, whatever ends the CLI (the agent maps it through /proc/CLI/fd/N).
  trace::ShmConfig sc;
  sc.events_per_buffer = o.events_per_buffer;
  sc.max_buffers = o.max_buffers;
  sc.mode = o.mode;
  auto shm = trace::ShmBuffers::create_anonymous(sc);
  if (!shm) {
    fmt::print(stderr, "utramp record: {}\n", shm.error().message);
    return 2;
  }

  // The time base: TSC ticks, rated against the monotonic clock over the whole run
  // (a first rate over 20 ms for the agent's -t filter).
  const uint64_t ns0 = mono_ns(), tsc0 = arch::cycles();
  // Only the -t filter needs a good rate before the target starts.
  std::this_thread::sleep_for(std::chrono::milliseconds(o.agent.min_duration_ns ? 20 : 2));
  const double rate0 = static_cast<double>(arch::cycles() - tsc0) / static_cast<double>(mono_ns() - ns0);

  agent::Config cfg = o.agent;
  cfg.shm_path = shm->agent_path();
  cfg.trace_dir = dir_path;
  cfg.ticks_per_ns = rate0;

  // Written first as "recording": what a recording whose CLI was killed keeps.
  info.date = utc_now();
  info.time_unit = "tsc";
  info.ticks_per_ns = rate0;
  info.start_time = arch::cycles();
  info.buffer_mode = o.mode == trace::BufferMode::overwrite ? "overwrite"
                     : o.mode == trace::BufferMode::block  ? "block"
                                                           : "discard";
  info.compression = o.compression == trace::Compression::zstd ? "zstd" : "none";
  info.tracer = cfg.tracer;
  info.state = "recording";
  info.recorder_pid = static_cast<uint32_t>(getpid());
  if (auto w = writer->write_info(info); !w) {
    fmt::print(stderr, "utramp record: {}\n", w.error().message);
    return 2;
  }

  // Every process the program starts stays below this one, whoever exits first
  // (Descendants). Set before the program starts; only this process and its threads
  // are affected, and it reaps what it adopts.
  (void)prctl(PR_SET_CHILD_SUBREAPER, 1);
  // By its absolute path too: a program exec'd under --follow-exec after a chdir reads it.
  const std::string agent_config = dir_path + "/agent.json";
  int start_failed = 0;
  std::unique_ptr<RecordTarget> launch = start(cfg, agent_config, &start_failed);
  if (!launch) return start_failed;
  const pid_t child = launch->pid();
  Descendants descendants(static_cast<uint32_t>(child), dir_path, "UTRAMP_AGENT=" + agent_config);

  std::vector<uint32_t> still_running;
  // The drain copies the rings' events into the queue, whose thread writes (and
  // compresses) them: the drain's pass frees ring space at the cost of a copy
  // (trace/write_queue.hpp; docs/tracing.md, "Losses"). The writer is the queue's until
  // queue.finish().
  trace::WriteQueue queue(*writer);
  auto drain = [&](bool final = false) {
    const size_t n = shm->drain(
        [&](uint32_t pid, uint32_t tid, std::span<const trace::Event> ev, uint64_t lost) {
          // A write that fails cuts the trace (TraceWriter): said at the end.
          queue.append(pid, tid, ev);
          queue.add_lost(pid, tid, lost);
          out->lost += lost;
          for (const trace::Event& e : ev)
            if (e.type == static_cast<uint8_t>(trace::EventType::fork) && e.data <= UINT32_MAX)
              descendants.learn(static_cast<uint32_t>(e.data));
        },
        final, still_running);
    out->events += n;
    return n;
  };
  // Every millisecond, or back to back while a ring had a batch waiting
  // (trace::drain_again_at(): why not closer, and why not a share of the ring).
  // Compressed files: frames not yet full are written every second, so that a recorder
  // killed loses little of what it drained (a write that fails cuts the trace: said at
  // the end).
  const uint64_t again_at = trace::drain_again_at(sc.events_per_buffer);
  uint64_t next_flush = mono_ns() + 1'000'000'000;
  const Ended ended = launch->wait(
      [&] {
        drain();
        if (shm->largest_backlog() >= again_at) return true;
        if (const uint64_t now = mono_ns(); now >= next_flush) {
          queue.flush();
          next_flush = now + 1'000'000'000;
        }
        return false;
      },
      1);
  const uint64_t child_end = arch::cycles();  // when it was seen gone, in the trace's time base

  // The processes it started that are traced may still be writing: drained until none
  // is left, or for --wait-children seconds (Ctrl-C ends the wait: the CLI ignores
  // SIGINT while the program runs, so that the program gets it).
  {
    g_stop_waiting = 0;
    struct sigaction stop {}, ignore {};
    stop.sa_handler = [](int) { g_stop_waiting = 1; };
    sigaction(SIGINT, &stop, nullptr);
    const uint64_t give_up =
        o.wait_children_s < 0 ? UINT64_MAX : mono_ns() + static_cast<uint64_t>(o.wait_children_s * 1e9);
    uint64_t next_scan = 0;
    for (;;) {
      const size_t n = drain();
      for (uint32_t pid : shm->producer_pids()) descendants.learn(pid);
      // Orphans adopted (Descendants): reaped, so that none is left a zombie.
      pid_t reaped;
      while ((reaped = waitpid(-1, nullptr, WNOHANG)) > 0) {
      }
      // No child at all: nothing lives below this subreaper (an orphan is adopted by it
      // before its parent can be reaped), and a scan of every process in /proc would find
      // none — it was 2 ms of a recording of a program that does nothing.
      const bool childless = reaped < 0 && errno == ECHILD;
      const bool scanned = mono_ns() >= next_scan;
      if (scanned) {
        descendants.learn_from_files();
        if (!childless) descendants.learn_from_tree(static_cast<uint32_t>(getpid()));
        descendants.drop_untraced();
        next_scan = mono_ns() + 200'000'000;
      }
      std::vector<uint32_t> running = descendants.running();
      if (running.empty()) {
        // Done only by a scan made after the last one was seen gone: it finds the
        // orphans that one left (reparented before its end could be seen).
        if (scanned) break;
        next_scan = 0;
        continue;
      }
      if (g_stop_waiting || mono_ns() >= give_up) {
        still_running = std::move(running);
        break;
      }
      if (n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGINT, &ignore, nullptr);  // Launch restores the CLI's own when it goes
  }
  // Losses still pending at the end are marked where they happened (not in the rings of
  // processes still running: they may still be writing there).
  drain(true);
  queue.finish();  // everything drained is written: the writer is ours again
  out->exit_code = ended.exit_code;
  out->ended = ended.how;
  set_exit_on_broken_pipe(out->exit_code);
  const uint64_t ns1 = mono_ns(), tsc1 = arch::cycles();
  info.ticks_per_ns = static_cast<double>(tsc1 - tsc0) / static_cast<double>(ns1 - ns0);
  info.exit = out->ended;
  info.exit_code = out->exit_code;
  info.unclaimed_threads = shm->unclaimed();
  info.still_running = still_running;

  info.threads.clear();
  std::vector<std::string> notes;  // said after the summary line
  for (const auto& w : shm->overwritten()) {
    const std::string what =
        w.pid ? fmt::format("{}, after {}", w.what, since_start(w.time, info.start_time, info.ticks_per_ns)) : w.what;
    if (w.pid) {
      trace::ThreadInfo t;
      t.pid = w.pid;
      t.tid = w.tid;
      t.overwritten = what;
      info.threads.push_back(t);
      notes.push_back(fmt::format("thread {}/{}: the program overwrote its ring buffer ({}): its events "
                                  "from there on may be missing",
                                  w.pid, w.tid, what));
    } else {
      info.rings_overwritten.push_back(what);
      notes.push_back(fmt::format("the program overwrote its ring buffers: {}", what));
    }
  }
  if (!shm->header_overwritten().empty()) {
    info.rings_overwritten.push_back("header: " + shm->header_overwritten());
    notes.push_back(fmt::format("the ring buffers' header was overwritten by the program ({}); the "
                                "recorder used its own copy of their layout",
                                shm->header_overwritten()));
  }
  for (uint32_t pid : still_running)
    notes.push_back(fmt::format("process {} was still running {}: its recording stops there "
                                "(--wait-children=SECONDS|forever waits longer)",
                                pid, g_stop_waiting ? "when the wait was interrupted"
                                                    : fmt::format("{} s after the program ended", o.wait_children_s)));
  bool saved_whole = true;
  if (auto w = writer->finish(info); !w) {
    notes.push_back(fmt::format("cannot finish the trace: {}; replay will say the recording did not finish",
                                w.error().message));
    saved_whole = false;
  }
  for (const auto& t : writer->threads()) out->saved += t.events;
  out->cut = writer->cut_reason();
  if (!out->cut.empty()) {
    notes.push_back(fmt::format("{}: the trace was cut there, at {}: {} of {} events saved, {} not saved",
                                out->cut, since_start(writer->cut_time(), info.start_time, info.ticks_per_ns),
                                out->saved, out->events, out->events - out->saved));
    saved_whole = false;
  }
  // The agent wrote the started process's file (parent, command, start); how it ended
  // only we know. Without the agent (it never ran), what we know of it.
  trace::ProcessInfo root;
  if (auto p = trace::read_process_file(o.output, static_cast<uint32_t>(child))) {
    root = std::move(*p);
  } else {
    root.pid = static_cast<uint32_t>(child);
    root.command = info.command;
    root.start_time = info.start_time;
    // No process file: the agent did not start. If it refused its configuration (one
    // changed after we wrote it, agent/trust.hpp), the same check says why.
    if (auto trusted = agent::load_trusted_config(o.output + "/agent.json"); !trusted)
      fmt::print(stderr, "utramp record: the agent did not start in the target, nothing was traced: {}\n",
                 trusted.error().message);
  }
  root.end_time = child_end;
  root.exit = out->ended;
  if (auto w = trace::write_process_file(o.output, root); !w)
    notes.push_back(w.error().message);
  if (!o.quiet) {
    fmt::print(stderr, "utramp: {} events recorded in {}; target {}{}\n", out->events, o.output,
               out->ended, lost_summary(out->lost, shm->nested_lost(), shm->timed_out_lost(), o.mode));
    // Where: each thread that lost events (the most first; info.json has them all).
    std::vector<trace::ThreadInfo> lossy;
    for (const auto& t : writer->threads())
      if (t.lost) lossy.push_back(t);
    std::stable_sort(lossy.begin(), lossy.end(), [](const auto& a, const auto& b) { return a.lost > b.lost; });
    constexpr size_t kShown = 8;
    for (size_t i = 0; i < lossy.size() && i < kShown; ++i)
      fmt::print(stderr, "utramp:   thread {}/{}: {} events lost, {} recorded\n", lossy[i].pid, lossy[i].tid,
                 lossy[i].lost, lossy[i].events);
    if (lossy.size() > kShown)
      fmt::print(stderr, "utramp:   and {} more threads that lost events (info.json: threads)\n",
                 lossy.size() - kShown);
    if (info.unclaimed_threads)
      fmt::print(stderr, "utramp: {} threads were not traced: all {} buffers were in use "
                         "(--max-threads)\n",
                 info.unclaimed_threads, o.max_buffers);
  }
  for (const auto& n : notes) fmt::print(stderr, "utramp record: {}\n", n);
  if (!saved_whole) out->exit_code = kExitSaveFailed;
  return out->exit_code;
}

}  // namespace utramp::cli
