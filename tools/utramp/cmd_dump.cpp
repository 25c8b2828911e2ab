// utramp dump [DIR]: the trace in other forms.
//   --chrome   Chrome trace-event JSON ("B"/"E" events, ts in µs), for the Perfetto UI
//              and chrome://tracing;
//   --folded   folded stacks "main;foo;bar 1234" (self time in ns, or calls with
//              --count), for flamegraph.pl, inferno, speedscope;
//   --flamegraph  an interactive SVG flame graph of the same tree (flame.hpp);
//   (none)     every event as recorded, one per line, for debugging a trace.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "call_tree.hpp"
#include "commands.hpp"
#include "flame.hpp"
#include "trace_walk.hpp"

namespace utramp::cli {

namespace {

using trace::Event;
using trace::EventType;

struct Options {
  std::string dir = "utramp.data";
  bool chrome = false, folded = false, flamegraph = false, count = false, no_merge = false;
  // --folded and --flamegraph
  std::vector<uint32_t> tids, pids;
  bool per_thread = false, per_process = false;
  // --flamegraph
  std::string by = "total";
  bool icicle = false;
  std::string title;
  int width = 1200;
  double min_width = 0.1;  // pixels
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
// Folded stacks and flame graphs: the call tree (call_tree.hpp) of the threads chosen.

std::unique_ptr<CallNode> call_tree(const trace::TraceReader& r, const Options& o, bool flat) {
  auto root = std::make_unique<CallNode>();
  root->name = "all";
  Names names(r, o.names);
  const ThreadSelection selection(o.tids, o.pids);
  const Grouping g = o.per_thread    ? Grouping::thread
                     : o.per_process ? Grouping::process
                                     : Grouping::none;
  CallTreeBuilder b(r, names, grouped_root(*root, r, selection, g));
  Walker w(b, flat);
  w.run(r, false);
  return root;
}

// One line per path, "main;foo;bar 1234", weighted by the self time (ns) of the calls
// that ended there (or their number), in the order of the lines.
void print_folded(const CallNode& root, bool count) {
  std::vector<std::pair<std::string, uint64_t>> lines;
  std::string path;
  auto walk = [&](auto& self, const CallNode& n) -> void {
    const size_t len = path.size();
    path += (path.empty() ? "" : ";") + n.name;
    const uint64_t weight = count ? n.calls : static_cast<uint64_t>(std::llround(n.self_ns));
    if (weight) lines.emplace_back(path, weight);
    for (const auto& c : n.children) self(self, *c);
    path.resize(len);
  };
  for (const auto& c : root.children) walk(walk, *c);
  std::sort(lines.begin(), lines.end());
  for (const auto& [k, v] : lines) fmt::print("{} {}\n", k, v);
}

int flamegraph(const trace::TraceReader& r, const Options& o, bool flat) {
  std::unique_ptr<CallNode> tree = call_tree(r, o, flat);
  if (o.by == "self") tree = inverted(*tree);
  FlameOptions fo;
  fo.weight = o.count ? FlameWeight::calls : FlameWeight::time;
  fo.inverted = o.by == "self";
  fo.icicle = o.icicle;
  fo.width = o.width;
  fo.title = !o.title.empty() ? o.title
             : fo.inverted    ? "Self time, callers above"
             : o.count        ? "Calls"
                              : "Total time";
  for (const auto& w : r.info().command) fo.subtitle += (fo.subtitle.empty() ? "" : " ") + w;
  const FlameLayout l = layout_flame(*tree, fo.weight, o.min_width / (o.width - 20.0));
  if (l.total <= 0) {
    fmt::print(stderr, "utramp dump: {}: no {} in the threads chosen: no flame graph\n", r.dir(),
               o.count ? "calls" : "timed calls");
    return 1;
  }
  const std::string svg = flame_svg_document(l, fo);
  std::fwrite(svg.data(), 1, svg.size(), stdout);
  return 0;
}

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
  if (o.chrome + o.folded + o.flamegraph > 1) {
    fmt::print(stderr, "utramp dump: {} exclude each other\n",
               o.flamegraph ? (o.chrome ? "--chrome and --flamegraph" : "--folded and --flamegraph")
                            : "--chrome and --folded");
    return 2;
  }
  if (o.count && !o.folded && !o.flamegraph) {
    fmt::print(stderr, "utramp dump: --count goes with --folded or --flamegraph\n");
    return 2;
  }
  if ((!o.tids.empty() || !o.pids.empty() || o.per_thread || o.per_process) && !o.folded &&
      !o.flamegraph) {
    fmt::print(stderr, "utramp dump: --tid, --pid, --per-thread and --per-process go with --folded or --flamegraph\n");
    return 2;
  }
  if (o.per_thread && o.per_process) {
    fmt::print(stderr, "utramp dump: --per-thread and --per-process exclude each other\n");
    return 2;
  }
  if ((o.icicle || o.by != "total" || !o.title.empty()) && !o.flamegraph) {
    fmt::print(stderr, "utramp dump: --icicle, --by and --title go with --flamegraph\n");
    return 2;
  }
  if (o.by != "total" && o.by != "self") {
    fmt::print(stderr, "utramp dump: unknown --by '{}' (total, self)\n", o.by);
    return 2;
  }
  if (o.by == "self" && o.count) {
    fmt::print(stderr, "utramp dump: --by self weighs by self time: not with --count\n");
    return 2;
  }
  if (o.width < 200 || o.width > 100000 || !(o.min_width >= 0)) {
    fmt::print(stderr, "utramp dump: --width is 200 to 100000 pixels, --min-width 0 or more\n");
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
  if (o.folded || o.flamegraph) {
    if (flat && !o.count) {
      fmt::print(stderr, "utramp dump: a `function` tracer trace has no durations: use {} --count\n",
                 o.folded ? "--folded" : "--flamegraph");
      return 2;
    }
    if (o.folded) {
      print_folded(*call_tree(*r, o, flat), o.count);
      return 0;
    }
    return flamegraph(*r, o, flat);
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
  sub->add_flag("--flamegraph", o->flamegraph,
                "an interactive SVG flame graph (zoom on click, search, tooltips)");
  sub->add_flag("--count", o->count, "with --folded or --flamegraph: weight by number of calls");
  sub->add_option("--tid", o->tids, "with --folded or --flamegraph: only these threads, by id")
      ->delimiter(',')
      ->allow_extra_args(false);
  sub->add_option("--pid", o->pids,
                  "with --folded or --flamegraph: only the threads of these processes, by id")
      ->delimiter(',')
      ->allow_extra_args(false);
  sub->add_flag("--per-thread", o->per_thread, "with --folded or --flamegraph: a stack per thread");
  sub->add_flag("--per-process", o->per_process,
                "with --folded or --flamegraph: a stack per process");
  sub->add_option("--by", o->by,
                  "flame graph of total time (default), or self: where the time was spent, its "
                  "callers above");
  sub->add_flag("--icicle", o->icicle, "flame graph upside down: the outermost calls at the top");
  sub->add_option("--title", o->title, "flame graph title");
  sub->add_option("--width", o->width, "flame graph width in pixels (default 1200)");
  sub->add_option("--min-width", o->min_width,
                  "flame graph: leave out frames narrower than this, in pixels (default 0.1)");
  sub->add_flag("--no-merge", o->no_merge, "raw events: one thread after the other");
  add_name_options(sub, &o->demangle);
  sub->callback([o] {
    if (!name_style("dump", o->demangle, &o->names)) std::exit(2);
    std::exit(run(*o));
  });
}

}  // namespace utramp::cli
