#include "record_run.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "arch/cpu.hpp"
#include "sites/object.hpp"
#include "symbols/glob.hpp"
#include "trace/shm_buffers.hpp"
#include "trace/trace_dir.hpp"

namespace utramp::cli {

namespace {

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// "; N events lost (why)": for want of room (the remedy is a larger ring), or because a
// signal handler's calls came while its thread ran the tracer's own code.
std::string lost_summary(uint64_t lost, uint64_t nested) {
  if (lost == 0) return {};
  constexpr const char* kFull = "buffers full: raise --buffer-size";
  constexpr const char* kNested = "calls made by signal handlers that interrupted the tracer";
  if (nested == 0) return fmt::format("; {} events lost ({})", lost, kFull);
  if (nested == lost) return fmt::format("; {} events lost ({})", lost, kNested);
  return fmt::format("; {} events lost ({}: {}; {}: {})", lost, lost - nested, kFull, nested, kNested);
}

}  // namespace

std::string agent_library() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return {};
  std::string dir(self, static_cast<size_t>(n));
  dir = dir.substr(0, dir.rfind('/'));
  std::string dirs = UTRAMP_AGENT_DIRS, first;
  for (size_t pos = 0; pos <= dirs.size();) {
    const size_t c = std::min(dirs.find(':', pos), dirs.size());
    const std::string path = dir + "/" + dirs.substr(pos, c - pos) + "/libutramp-agent.so";
    if (first.empty()) first = path;
    if (access(path.c_str(), R_OK) == 0) return path;
    pos = c + 1;
  }
  return first;
}

bool parse_duration(const std::string& s, uint64_t* ns) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v < 0) return false;
  const std::string unit = end;
  double mul = 1;
  if (unit.empty() || unit == "ns") mul = 1;
  else if (unit == "us") mul = 1e3;
  else if (unit == "ms") mul = 1e6;
  else if (unit == "s") mul = 1e9;
  else return false;
  *ns = static_cast<uint64_t>(v * mul);
  return true;
}

std::string find_program(const std::string& prog, std::string* why) {
  auto check = [&](const std::string& p) -> bool {
    struct stat st;
    if (stat(p.c_str(), &st) != 0) return false;
    if (!S_ISREG(st.st_mode)) {
      *why = fmt::format("{}: not a regular file", p);
      return false;
    }
    if (access(p.c_str(), X_OK) != 0) {
      *why = fmt::format("{}: not executable", p);
      return false;
    }
    return true;
  };
  *why = fmt::format("{}: no such file", prog);
  if (prog.find('/') != std::string::npos) return check(prog) ? prog : std::string();
  const char* path = getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= p.size()) {
    size_t c = p.find(':', pos);
    std::string dir = p.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
    if (dir.empty()) dir = ".";
    if (check(dir + "/" + prog)) return dir + "/" + prog;
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  if (why->find("not ") == std::string::npos) *why = fmt::format("{}: not found in PATH", prog);
  return {};
}

int run_record(const RecordOptions& o, RecordResult* out) {
  if (o.command.empty()) {
    fmt::print(stderr, "utramp record: no program given (utramp record [options] -- PROGRAM [ARGS])\n");
    return 2;
  }
  std::string why;
  const std::string prog = find_program(o.command[0], &why);
  if (prog.empty()) {
    fmt::print(stderr, "utramp record: {}\n", why);
    return 2;
  }
  const std::string agent = agent_library();
  if (agent.empty() || access(agent.c_str(), R_OK) != 0) {
    fmt::print(stderr, "utramp record: the agent library {} is missing\n", agent);
    return 2;
  }
  // Say which filters match nothing in the program itself (still run: libraries and
  // dlopen'ed objects are only known at run time).
  if (auto obj = sites::analyse_file(prog); obj) {
    for (const auto& g : o.agent.filters) {
      const bool hit = std::any_of(obj->functions.begin(), obj->functions.end(), [&](const auto& f) {
        return symbols::glob_matches(g, symbols::Name(f.name));
      });
      if (!hit)
        fmt::print(stderr, "utramp record: -F '{}' matches no function of {} (running anyway)\n",
                   g, prog);
    }
    size_t attachable = 0;
    for (const auto& f : obj->functions) attachable += f.attachable;
    if (!obj->has_patchable_entries && !obj->has_mcount_loc)
      fmt::print(stderr, "utramp record: {} has no compiler patch sites: {} functions get "
                         "relocated prologues, the rest are skipped (see {}/agent-*.log)\n",
                 prog, attachable, o.output);
  } else {
    fmt::print(stderr, "utramp record: {}: {}\n", prog, obj.error().message);
    return 2;
  }

  auto writer = trace::TraceWriter::create(o.output);
  if (!writer) {
    fmt::print(stderr, "utramp record: {}\n", writer.error().message);
    return 2;
  }
  // The rings live in tmpfs (no write-back to disk while the target runs); the file is
  // removed when the recording ends. Without /dev/shm: in the trace directory.
  std::string shm_path = o.output + "/buffers.shm";
  if (access("/dev/shm", W_OK) == 0)
    shm_path = fmt::format("/dev/shm/utramp-{}-{}.buffers", getpid(), mono_ns() % 1000000007);
  trace::ShmConfig sc;
  sc.events_per_buffer = o.events_per_buffer;
  sc.max_buffers = o.max_buffers;
  sc.mode = o.overwrite ? trace::BufferMode::overwrite : trace::BufferMode::discard;
  auto shm = trace::ShmBuffers::create(shm_path, sc);
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
  cfg.shm_path = shm_path;
  cfg.trace_dir = o.output;
  cfg.ticks_per_ns = rate0;
  const std::string cfg_path = o.output + "/agent.json";
  {
    std::ofstream f(cfg_path);
    f << agent::dump_config(cfg);
  }

  trace::TraceInfo info;
  info.command = o.command;
  info.time_unit = "tsc";
  info.ticks_per_ns = rate0;
  info.start_time = arch::cycles();
  info.buffer_mode = o.overwrite ? "overwrite" : "discard";
  info.tracer = cfg.tracer;
  (void)writer->write_info(info);

  // The target keeps our stdin/stdout/stderr; Ctrl-C reaches it (same process group)
  // while we ignore it, to save what it recorded.
  struct sigaction ign {}, old_int{}, old_quit{};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ign, &old_int);
  sigaction(SIGQUIT, &ign, &old_quit);
  const pid_t child = fork();
  if (child < 0) {
    fmt::print(stderr, "utramp record: fork: {}\n", strerror(errno));
    return 2;
  }
  if (child == 0) {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGQUIT, &old_quit, nullptr);
    std::string preload = agent;
    if (const char* p = getenv("LD_PRELOAD"); p && *p) preload += std::string(":") + p;
    setenv("LD_PRELOAD", preload.c_str(), 1);
    setenv("UTRAMP_AGENT", cfg_path.c_str(), 1);
    std::vector<char*> argv;
    for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(prog.c_str(), argv.data());
    fmt::print(stderr, "utramp record: cannot execute {}: {}\n", prog, strerror(errno));
    _exit(127);
  }

  auto drain = [&](bool final = false) {
    const size_t n = shm->drain(
        [&](uint32_t pid, uint32_t tid, std::span<const trace::Event> ev, uint64_t lost) {
          if (!ev.empty()) (void)writer->append(pid, tid, ev);
          if (lost) writer->add_lost(pid, tid, lost);
          out->lost += lost;
        },
        final);
    out->events += n;
    return n;
  };
  int status = 0;
  uint64_t child_end = 0;  // when it was seen gone, in the trace's time base
  for (;;) {
    const pid_t r = waitpid(child, &status, WNOHANG);
    if (r == child) {
      child_end = arch::cycles();
      break;
    }
    // Every millisecond, or back to back while a ring is more than a quarter full. Not
    // closer: a consumer right behind the producer reads the cache lines it is writing
    // (two events a line, the control page's head), and each such read costs the traced
    // thread a cache miss — it doubled the per-call cost in a tight loop.
    if (drain() < sc.events_per_buffer / 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Children the target forked may still be writing: drain until no process that
  // owns a ring is left (bounded: 2 s without an event, 10 s in all).
  const uint64_t give_up = mono_ns() + 10'000'000'000ull;
  for (int quiet = 0; quiet < 400 && mono_ns() < give_up;) {
    if (drain() != 0) {
      quiet = 0;
      continue;
    }
    bool alive = false;
    for (uint32_t pid : shm->producer_pids())
      if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) alive = true;
    if (!alive) break;
    ++quiet;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  drain(true);  // losses still pending at the end are marked where they happened
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGQUIT, &old_quit, nullptr);

  if (WIFEXITED(status)) out->exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) out->exit_code = 128 + WTERMSIG(status);
  out->ended = trace::exit_description(status);
  const uint64_t ns1 = mono_ns(), tsc1 = arch::cycles();
  info.ticks_per_ns = static_cast<double>(tsc1 - tsc0) / static_cast<double>(ns1 - ns0);
  info.exit = out->ended;
  info.exit_code = out->exit_code;
  info.unclaimed_threads = shm->unclaimed();
  info.threads = writer->threads();
  (void)writer->write_info(info);
  // The agent wrote the started process's file (parent, command, start); how it ended
  // only we know. Without the agent (it never ran), what we know of it.
  trace::ProcessInfo root;
  if (auto p = trace::read_process_file(o.output, static_cast<uint32_t>(child))) {
    root = std::move(*p);
  } else {
    root.pid = static_cast<uint32_t>(child);
    root.command = o.command;
    root.start_time = info.start_time;
  }
  root.end_time = child_end;
  root.exit = out->ended;
  if (auto w = trace::write_process_file(o.output, root); !w)
    fmt::print(stderr, "utramp record: {}\n", w.error().message);
  unlink(shm_path.c_str());
  if (!o.quiet) {
    fmt::print(stderr, "utramp: {} events recorded in {}; target {}{}\n", out->events, o.output,
               out->ended, lost_summary(out->lost, std::min(shm->nested_lost(), out->lost)));
    if (info.unclaimed_threads)
      fmt::print(stderr, "utramp: {} threads were not traced: all {} buffers were in use "
                         "(--max-threads)\n",
                 info.unclaimed_threads, o.max_buffers);
  }
  return out->exit_code;
}

}  // namespace utramp::cli
