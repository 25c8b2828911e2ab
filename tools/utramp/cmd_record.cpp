// utramp record [options] -- PROGRAM [ARGS]: runs PROGRAM under the agent and saves a
// trace directory (default utramp.data) for replay, report, dump.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "commands.hpp"
#include "agent/config.hpp"
#include "attach.hpp"
#include "record_run.hpp"

namespace utramp::cli {

namespace {

// -A 'func@arg1,arg2/s' and -R 'func[/fmt]' into captures; the forms are
// agent::parse_arg_capture's and agent::parse_value_format's.
bool parse_captures(RecordFlags& f) {
  for (const auto& a : f.args) {
    const size_t at = a.find('@');
    if (at == std::string::npos || at == 0 || at + 1 == a.size()) {
      fmt::print(stderr, "utramp record: -A '{}': expected FUNC@arg1[,fparg1,arg2/s,retval...]\n", a);
      return false;
    }
    agent::ArgSpec s;
    s.glob = a.substr(0, at);
    const std::string list = a.substr(at + 1);
    for (size_t pos = 0; pos <= list.size();) {
      const size_t c = std::min(list.find(',', pos), list.size());
      const std::string one = list.substr(pos, c - pos);
      if (one == "retval" || one.starts_with("retval/")) {  // uftrace's: -A takes the return value too
        s.retval = true;
        s.retfmt = one.substr(std::min<size_t>(one.size(), 7));
        auto fm = agent::parse_value_format(s.retfmt);
        if (!fm || one == "retval/") {
          fmt::print(stderr, "utramp record: -A '{}': {}\n", a, fm ? "retval/ needs a format" : fm.error().message);
          return false;
        }
        pos = c + 1;
        continue;
      }
      if (auto cap = agent::parse_arg_capture(one); !cap) {
        fmt::print(stderr, "utramp record: -A '{}': {}\n", a, cap.error().message);
        return false;
      }
      s.args.push_back(one);
      pos = c + 1;
    }
    if (s.args.size() > static_cast<size_t>(agent::kMaxArgsPerFunction)) {
      fmt::print(stderr, "utramp record: -A '{}': at most {} arguments per function\n", a,
                 agent::kMaxArgsPerFunction);
      return false;
    }
    f.rec.agent.captures.push_back(std::move(s));
  }
  for (const auto& r : f.rets) {
    agent::ArgSpec s;
    const size_t slash = r.rfind('/');
    s.glob = slash == std::string::npos ? r : r.substr(0, slash);
    s.retfmt = slash == std::string::npos ? "" : r.substr(slash + 1);
    if (auto fm = agent::parse_value_format(s.retfmt); !fm || s.glob.empty() ||
                                                          (slash != std::string::npos && s.retfmt.empty())) {
      fmt::print(stderr, "utramp record: -R '{}': expected FUNC[/F], {}\n", r,
                 fm ? "FUNC and F not empty" : fm.error().message);
      return false;
    }
    s.retval = true;
    f.rec.agent.captures.push_back(std::move(s));
  }
  return true;
}

}  // namespace

std::shared_ptr<RecordFlags> add_record_options(CLI::App* sub) {
  auto f = std::make_shared<RecordFlags>();
  sub->add_option("-o,--output", f->rec.output, "trace directory (default utramp.data)");
  // One value per option (allow_extra_args(false)): CLI11 would also take "[abc]" for a
  // list and strip its brackets, which a glob needs.
  sub->add_option("-F,--filter", f->rec.agent.filters,
                  "record only inside calls of functions matching GLOB: the call and all it calls "
                  "(uftrace's -F; repeatable)")
      ->allow_extra_args(false);
  sub->add_option("-N,--notrace", f->rec.agent.notrace,
                  "record nothing inside calls of functions matching GLOB: neither the call nor "
                  "what it calls (uftrace's -N; wins over -F)")
      ->allow_extra_args(false);
  sub->add_option("--only", f->rec.agent.only,
                  "trace only the functions matching GLOB, not what they call (the others are "
                  "not patched: the kernel's set_ftrace_filter; repeatable)")
      ->allow_extra_args(false);
  sub->add_option("--skip", f->rec.agent.skip,
                  "do not trace the functions matching GLOB (not patched; wins over --only)")
      ->allow_extra_args(false);
  sub->add_option("-D,--depth", f->rec.agent.max_depth,
                  "record calls only down to this depth (with -F: levels from each matching call)");
  sub->add_option("-t,--time-filter", f->time_filter, "keep only calls at least this long (e.g. 10us)");
  sub->add_option("--tid", f->rec.agent.tids, "trace only these thread ids (repeatable)")
      ->check(CLI::Range(1u, 4194304u));  // the kernel's pid_max at most
  sub->add_option("-A,--argument", f->args, "record arguments: FUNC@arg1,fparg1,arg2/s,retval (formats d i u x s c f, "
              "i8..i64 u8..u64 x8..x64 f32 f64)")
      ->allow_extra_args(false);
  sub->add_option("-R,--retval", f->rets, "record the return value: FUNC[/F] (the formats of -A)")
      ->allow_extra_args(false);
  sub->add_option("--tracer", f->rec.agent.tracer, "function_graph (default) or function")
      ->check(CLI::IsMember({"function", "function_graph"}));
  sub->add_flag("--libs", f->rec.agent.libraries, "trace the shared libraries' functions too");
  sub->add_flag("--no-libcall{false}", f->rec.agent.libcalls,
                "do not trace the program's calls into shared libraries (through the PLT/GOT)");
  sub->add_flag("--nest-libcall", f->rec.agent.nest_libcalls,
                "trace the libraries' calls into other libraries too");
  sub->add_option("--buffer-size", f->rec.events_per_buffer, "events per thread buffer (power of two)");
  sub->add_option("--max-threads", f->rec.max_buffers, "thread buffers in all (default 256)");
  sub->add_option("--mode", f->mode,
                  "block (default: a thread whose buffer is full waits for the recorder: nothing "
                  "lost while it drains), discard (a full buffer drops new events, counted) or "
                  "overwrite (flight recorder)")
      ->check(CLI::IsMember({"discard", "block", "overwrite"}));
  sub->add_option("--compress", f->compress,
                  "the events files: none (default: plain 32-byte records) or zstd (compressed "
                  "by the recorder, not the program: 2 to 20 times smaller, at some recording speed)")
      ->check(CLI::IsMember({"none", "zstd"}));
  sub->add_flag("--follow-exec", f->rec.agent.follow_exec, "keep tracing across exec");
  sub->add_option("--wait-children", f->wait_children,
                  "once the program ended, wait this long for the traced processes it started "
                  "(SECONDS, default 10, or forever)");
  sub->add_option("command", f->rec.command, "-- PROGRAM [ARGS]")->required();
  return f;
}

bool finish_record_flags(RecordFlags& f, const char* cmd) {
  if (f.rec.agent.tracer == "function" && (!f.rec.agent.filters.empty() || !f.rec.agent.notrace.empty())) {
    fmt::print(stderr, "utramp {}: -F and -N need --tracer function_graph (they record what the "
                       "matching calls call, which the function tracer cannot tell without exits); "
                       "--only and --skip choose the functions it traces\n",
               cmd);
    return false;
  }
  if (!f.time_filter.empty() && !parse_duration(f.time_filter, &f.rec.agent.min_duration_ns)) {
    fmt::print(stderr, "utramp {}: -t '{}': expected a duration: a number and one of ns (the "
                       "default), us, ms, s (10us, 1.5ms, 2s), at most 292 years\n",
               cmd, f.time_filter);
    return false;
  }
  if (!parse_captures(f)) return false;
  if (!parse_wait(f.wait_children, &f.rec.wait_children_s)) {
    fmt::print(stderr, "utramp {}: --wait-children '{}': expected SECONDS or forever (a decimal "
                       "number of seconds, at most a year: 0, 2.5, 60)\n",
               cmd, f.wait_children);
    return false;
  }
  const uint32_t n = f.rec.events_per_buffer;
  if (n < 64 || (n & (n - 1))) {
    fmt::print(stderr, "utramp {}: --buffer-size {}: must be a power of two >= 64\n", cmd, n);
    return false;
  }
  f.rec.mode = f.mode == "overwrite" ? trace::BufferMode::overwrite
               : f.mode == "block"   ? trace::BufferMode::block
                                     : trace::BufferMode::discard;
  f.rec.compression = f.compress == "none" ? trace::Compression::none : trace::Compression::zstd;
  return true;
}

void add_record(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("record", "Run a program and record its function calls");
  auto f = add_record_options(sub);
  sub->add_flag("-q,--quiet", f->rec.quiet, "no summary line at the end");
  // -p PID instead of a program: attach to a running process (docs/attach.md).
  auto pid = std::make_shared<int>(0);
  sub->add_option("-p,--pid", *pid, "attach to the running process PID instead of starting a program");
  auto duration = std::make_shared<std::string>();
  sub->add_option("--duration", *duration, "with -p: record this long, then detach (e.g. 10s; default: until Ctrl-C)");
  sub->get_option("command")->required(false);  // run_record says when neither is given
  sub->callback([f, pid, duration] {
    if (!finish_record_flags(*f, "record")) std::exit(2);
    double duration_s = 0;
    if (!parse_attach_duration(*duration, *pid, "utramp record", &duration_s)) std::exit(2);
    if (*pid) {
      RecordResult r;
      std::exit(run_record_attach(*pid, f->rec, duration_s, &r));
    }
    RecordResult r;
    std::exit(run_record(f->rec, &r));
  });
}

}  // namespace utramp::cli
