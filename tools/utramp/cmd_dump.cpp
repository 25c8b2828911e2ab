// utramp dump [DIR]: the trace in other forms.
//   --chrome   Chrome trace-event JSON ("B"/"E" events, ts in µs), for the Perfetto UI
//              and chrome://tracing;
//   --folded   folded stacks "main;foo;bar 1234" (self time in ns, or calls with
//              --count), for flamegraph.pl, inferno, speedscope;
//   (none)     every event as recorded, one per line, for debugging a trace.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "commands.hpp"
#include "trace_walk.hpp"

namespace utramp::cli {

namespace {

using trace::Event;
using trace::EventType;

struct Options {
  std::string dir = "utramp.data";
  bool chrome = false, folded = false, count = false, no_merge = false;
  std::string demangle = "simple";
  symbols::Style names = symbols::Style::simple;  // from `demangle`
};

std::string jstr(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// ---------------------------------------------------------------------------------
// Chrome trace-event format: a JSON object whose traceEvents are written as they come,
// in time order (the merged stream), so a large trace is never held whole.

class Chrome final : public Walker::Handler {
 public:
  Chrome(const trace::TraceReader& r, const Options& o) : r_(r), names_(r, o.names) {}

  void begin() {
    std::fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", stdout);
    std::set<uint32_t> pids;
    for (auto [pid, tid] : r_.threads()) pids.insert(pid);
    for (uint32_t pid : pids) {
      std::vector<std::string> cmd = r_.info().command;
      if (auto it = r_.processes().find(pid);
          it != r_.processes().end() && !it->second.command.empty())
        cmd = it->second.command;
      std::string name = cmd.empty() ? "pid " + std::to_string(pid) : cmd[0];
      emit(fmt::format(
          R"({{"name":"process_name","ph":"M","pid":{},"tid":{},"args":{{"name":{}}}}})", pid, pid,
          jstr(name)));
    }
  }

  void enter(WalkThread& t, const Frame& f) override {
    std::string args;
    for (const auto& [i, v] : f.args)
      args += fmt::format("{}\"arg{}\":{}", args.empty() ? "" : ",", i + 1, jstr(format_value(v)));
    emit(fmt::format(R"({{"name":{},"cat":"function","ph":"B","pid":{},"tid":{},"ts":{}{}}})",
                     jstr(names_.get(t.pid, f.addr, f.entry)), t.pid, t.tid, ts(f.entry),
                     args.empty() ? "" : ",\"args\":{" + args + "}"));
  }

  void exit(WalkThread& t, const Frame& f, const Exit& x) override {
    if (f.synthetic) return;  // no "B" to end
    std::string args;
    if (x.ret.has()) args = "\"return\":" + jstr(format_value(x.ret));
    const char* why = x.kind == ExitKind::unwound        ? "unwound by exception"
                      : x.kind == ExitKind::longjmp      ? "skipped by longjmp"
                      : x.kind == ExitKind::not_recorded ? "exit not recorded"
                                                         : nullptr;
    std::string end;
    if (x.kind == ExitKind::trace_end) {
      end = end_note(r_, t.pid, t.tid);
      why = end.c_str();
    }
    if (why) args += fmt::format("{}\"exit\":\"{}\"", args.empty() ? "" : ",", why);
    emit(fmt::format(R"({{"ph":"E","pid":{},"tid":{},"ts":{}{}}})", t.pid, t.tid,
                     ts(std::max(x.time, f.entry)),
                     args.empty() ? "" : ",\"args\":{" + args + "}"));
  }

  void call(WalkThread& t, const Frame& f) override {
    emit(fmt::format(
        R"({{"name":{},"cat":"function","ph":"i","s":"t","pid":{},"tid":{},"ts":{}{}}})",
        jstr(names_.get(t.pid, f.addr, f.entry)), t.pid, t.tid, ts(f.entry),
        f.caller ? ",\"args\":{\"caller\":" + jstr(names_.containing(t.pid, f.caller, f.entry)) + "}"
                 : std::string()));
  }

  void marker(WalkThread& t, const Event& e) override {
    std::string name;
    if (e.type == static_cast<uint8_t>(EventType::lost))
      name = fmt::format("lost {} events", e.data);
    else if (e.type == static_cast<uint8_t>(EventType::fork))
      name = fmt::format("fork: child {}", e.data);
    else if (e.type == static_cast<uint8_t>(EventType::context))
      name = context_text(t, e);
    else
      name = fmt::format("{} calls below the depth limit not recorded", e.data);
    emit(fmt::format(R"({{"name":{},"ph":"i","s":"t","pid":{},"tid":{},"ts":{}}})", jstr(name),
                     t.pid, t.tid, ts(e.time)));
  }

  void corrupt(WalkThread&, const std::string&) override { ++corrupt_; }

  void end() {
    std::fputs("\n]}\n", stdout);
    if (corrupt_)
      fmt::print(stderr, "utramp dump: {}: {} malformed event(s) ignored (see utramp replay)\n",
                 r_.dir(), corrupt_);
  }

 private:
  // Microseconds since the first event, as Chrome's "ts" wants them.
  std::string ts(uint64_t time) {
    if (!have_base_) {
      base_ = time;
      have_base_ = true;
    }
    const double us =
        time >= base_ ? r_.to_ns(time - base_) / 1000.0 : -r_.to_ns(base_ - time) / 1000.0;
    return fmt::format("{:.3f}", us);
  }
  void emit(const std::string& ev) {
    std::fputs(first_ ? "\n" : ",\n", stdout);
    first_ = false;
    std::fwrite(ev.data(), 1, ev.size(), stdout);
  }

  const trace::TraceReader& r_;
  Names names_;
  bool first_ = true, have_base_ = false;
  uint64_t base_ = 0;
  uint64_t corrupt_ = 0;
};

// ---------------------------------------------------------------------------------
// Folded stacks: one line per distinct stack, weighted by the self time of the calls
// that ended there (or their number).

class Folded final : public Walker::Handler {
 public:
  Folded(const trace::TraceReader& r, const Options& o) : r_(r), o_(o), names_(r, o.names) {}
  void enter(WalkThread&, const Frame&) override {}
  void exit(WalkThread& t, const Frame& f, const Exit& x) override {
    if (f.synthetic) return;
    uint64_t weight = 1;
    if (!o_.count) {
      if (!x.timed || x.time < f.entry) return;
      const uint64_t ticks = x.time - f.entry;
      weight = static_cast<uint64_t>(
          std::llround(r_.to_ns(ticks > f.child_ticks ? ticks - f.child_ticks : 0)));
      if (weight == 0) return;
    }
    std::string key;
    for (const Frame& g : t.stack) {
      if (!key.empty()) key += ';';
      key += names_.get(t.pid, g.addr, g.entry);
    }
    stacks_[key] += weight;
  }
  // The function tracer knows only caller -> callee: two-frame stacks, by count.
  void call(WalkThread& t, const Frame& f) override {
    std::string key = f.caller ? names_.containing(t.pid, f.caller, f.entry) + ";" : std::string();
    stacks_[key + names_.get(t.pid, f.addr, f.entry)] += 1;
  }
  void marker(WalkThread&, const Event&) override {}
  void corrupt(WalkThread&, const std::string&) override {}
  void print() {
    for (const auto& [k, v] : stacks_) fmt::print("{} {}\n", k, v);
  }

 private:
  const trace::TraceReader& r_;
  const Options& o_;
  Names names_;
  std::map<std::string, uint64_t> stacks_;
};

// ---------------------------------------------------------------------------------

const char* type_name(uint8_t t) {
  switch (static_cast<EventType>(t)) {
    case EventType::none:
      return "none";
    case EventType::entry:
      return "entry";
    case EventType::exit:
      return "exit";
    case EventType::exit_unwound:
      return "exit_unwound";
    case EventType::exit_longjmp:
      return "exit_longjmp";
    case EventType::arg:
      return "arg";
    case EventType::string:
      return "string";
    case EventType::lost:
      return "lost";
    case EventType::fork:
      return "fork";
    case EventType::depth_overrun:
      return "depth_overrun";
    case EventType::leaf:  // readers hand it out as entry + exit; kept for completeness
      return "leaf";
    case EventType::context:
      return "context";
  }
  return "unknown";
}

int raw(const trace::TraceReader& r, const Options& o) {
  Names names(r, o.names);
  fmt::print("# {:>18} {:>8} {:>8} {:<13} {:>5} {:>18} {:>18} {:>5} {:>8}  {}\n", "TIME", "PID",
             "TID", "TYPE", "DEPTH", "ADDRESS", "DATA", "FLAGS", "AUX", "FUNCTION");
  auto print = [&](uint32_t pid, uint32_t tid, const Event& e) {
    const bool has_addr = e.type == static_cast<uint8_t>(EventType::entry) ||
                          (e.type >= static_cast<uint8_t>(EventType::exit) &&
                           e.type <= static_cast<uint8_t>(EventType::exit_longjmp));
    fmt::print("  {:>18} {:>8} {:>8} {:<13} {:>5} {:>#18x} {:>#18x} {:>5} {:>#8x}  {}\n", e.time,
               pid, tid, type_name(e.type), e.depth, e.addr, e.data, e.flags, e.aux,
               has_addr ? names.get(pid, e.addr, e.time) : "");
  };
  if (o.no_merge) {
    for (auto [pid, tid] : r.threads()) {
      auto s = r.stream(pid, tid);
      while (auto e = s->next()) print(pid, tid, *e);
    }
  } else {
    auto s = r.merged();
    while (auto e = s->next()) print(s->pid(), s->tid(), *e);
  }
  return 0;
}

int run(const Options& o) {
  if (o.chrome && o.folded) {
    fmt::print(stderr, "utramp dump: --chrome and --folded exclude each other\n");
    return 2;
  }
  if (o.count && !o.folded) {
    fmt::print(stderr, "utramp dump: --count goes with --folded\n");
    return 2;
  }
  auto r = open_trace("dump", o.dir);
  if (!r) return 1;
  const bool flat = r->info().tracer == "function";
  if (o.chrome) {
    Chrome c(*r, o);
    c.begin();
    Walker w(c, flat);
    w.run(*r, true);
    c.end();
    return 0;
  }
  if (o.folded) {
    if (flat && !o.count) {
      fmt::print(stderr,
                 "utramp dump: a `function` tracer trace has no durations: use --folded --count\n");
      return 2;
    }
    Folded f(*r, o);
    Walker w(f, flat);
    w.run(*r, false);
    f.print();
    return 0;
  }
  return raw(*r, o);
}

}  // namespace

void add_dump(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "dump", "Write a trace as Chrome/Perfetto JSON, folded stacks, or raw events");
  sub->add_option("dir", o->dir, "trace directory")->capture_default_str();
  sub->add_flag("--chrome", o->chrome,
                "Chrome trace-event JSON (open in ui.perfetto.dev or chrome://tracing)");
  sub->add_flag("--folded", o->folded,
                "folded stacks for flame graphs, weighted by self time in ns");
  sub->add_flag("--count", o->count, "with --folded: weight by number of calls");
  sub->add_flag("--no-merge", o->no_merge, "raw events: one thread after the other");
  add_name_options(sub, &o->demangle);
  sub->callback([o] {
    if (!name_style("dump", o->demangle, &o->names)) std::exit(2);
    std::exit(run(*o));
  });
}

}  // namespace utramp::cli
