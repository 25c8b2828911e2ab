#include "record_run.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "agent/trust.hpp"
#include "arch/cpu.hpp"
#include "commands.hpp"
#include "launch.hpp"
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

  trace::TraceInfo info;
  info.command = o.command;
  info.time_unit = "tsc";
  info.ticks_per_ns = rate0;
  info.start_time = arch::cycles();
  info.buffer_mode = o.overwrite ? "overwrite" : "discard";
  info.tracer = cfg.tracer;
  (void)writer->write_info(info);

  auto launch = Launch::start(*target, o.command, cfg, o.output + "/agent.json");
  if (!launch) {
    fmt::print(stderr, "utramp record: {}\n", launch.error().message);
    unlink(shm_path.c_str());
    return launch.error().code == Errc::not_found ? 2 : 127;
  }
  const pid_t child = launch->pid();

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
  // Every millisecond, or back to back while a ring is more than a quarter full. Not
  // closer: a consumer right behind the producer reads the cache lines it is writing
  // (two events a line, the control page's head), and each such read costs the traced
  // thread a cache miss — it doubled the per-call cost in a tight loop.
  const Ended ended = launch->wait([&] { return drain() >= sc.events_per_buffer / 4; }, 1);
  const uint64_t child_end = arch::cycles();  // when it was seen gone, in the trace's time base
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
  out->exit_code = ended.exit_code;
  out->ended = ended.how;
  set_exit_on_broken_pipe(out->exit_code);
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
    // No process file: the agent did not start. If it refused its configuration (one
    // changed after we wrote it, agent/trust.hpp), the same check says why.
    if (auto trusted = agent::load_trusted_config(o.output + "/agent.json"); !trusted)
      fmt::print(stderr, "utramp record: the agent did not start in the target, nothing was traced: {}\n",
                 trusted.error().message);
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
