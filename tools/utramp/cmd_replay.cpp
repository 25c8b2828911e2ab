// utramp replay [DIR]: the function graph as text, as uftrace replay and the kernel's
// function_graph tracer show it:
//
//   # DURATION     TID     FUNCTION
//               [  1234] | main() {
//               [  1234] |   parse(0x7ffd1c08, "x.conf") {
//     0.120 us [  1234] |     strlen();
//     3.210 us [  1234] |   } = 0;
//     9.876 us [  1234] | } /* main */
//
// An entry whose exit comes next in the output is one line; a closing brace carries
// the duration, and a comment with the name when the body is long or the exit is
// special (exception, longjmp, missing).
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "commands.hpp"
#include "record_run.hpp"
#include "trace_walk.hpp"

namespace utramp::cli {

namespace {

// Closing braces more than this many lines below their opening line name the function.
constexpr uint64_t kLongBody = 4;

struct Options {
  std::string dir = "utramp.data";
  std::vector<uint32_t> tids, pids;
  std::vector<std::string> filter, notrace;
  int depth = -1;
  bool no_merge = false;
  std::string demangle = "simple";
  symbols::Style names = symbols::Style::simple;  // from `demangle`
  std::string unit;
  std::string fields = "duration,tid";  // -f
  std::string time_range;               // --time-range START~STOP
  bool no_pager = false;                // accepted: replay has no pager
};

// The columns before the graph (-f, uftrace's names): what each shows and how wide.
enum class Field { duration, tid, time, elapsed, delta, addr };
struct FieldInfo {
  const char* name;
  const char* header;
  int width;
  Field field;
};
constexpr FieldInfo kFields[] = {
    {"duration", "DURATION", 10, Field::duration}, {"tid", "TID", 8, Field::tid},
    {"time", "TIMESTAMP", 15, Field::time},        {"elapsed", "ELAPSED", 10, Field::elapsed},
    {"delta", "DELTA", 10, Field::delta},          {"addr", "ADDRESS", 14, Field::addr}};

// "duration,tid", "+time" (added to the default), "none" -> the columns; "" with the
// message printed when a name is unknown.
std::optional<std::vector<FieldInfo>> parse_fields(std::string spec) {
  std::vector<FieldInfo> out;
  if (spec.starts_with("+")) spec = "duration,tid," + spec.substr(1);
  if (spec == "none") return out;
  for (size_t pos = 0; pos <= spec.size();) {
    const size_t c = std::min(spec.find(',', pos), spec.size());
    const std::string name = spec.substr(pos, c - pos);
    pos = c + 1;
    const FieldInfo* f = nullptr;
    for (const auto& k : kFields)
      if (name == k.name) f = &k;
    if (!f) {
      fmt::print(stderr, "utramp replay: -f '{}': unknown field '{}' (duration, tid, time, elapsed, "
                         "delta, addr, or none; +FIELD adds to duration,tid)\n",
                 spec, name);
      return std::nullopt;
    }
    if (std::none_of(out.begin(), out.end(), [&](const FieldInfo& o) { return o.field == f->field; }))
      out.push_back(*f);
  }
  return out;
}

// --time-range START~STOP: times since the recording started (a duration each, either
// may be left out); the calls that began in it, and the markers that fall in it.
bool parse_time_range(const std::string& s, uint64_t* from_ns, uint64_t* to_ns) {
  const size_t t = s.find('~');
  if (t == std::string::npos) return false;
  const std::string a = s.substr(0, t), b = s.substr(t + 1);
  *from_ns = 0;
  *to_ns = UINT64_MAX;
  if (!a.empty() && !parse_duration(a, from_ns)) return false;
  if (!b.empty() && !parse_duration(b, to_ns)) return false;
  return *from_ns <= *to_ns;
}

const char* exit_note(ExitKind k) {
  switch (k) {
    case ExitKind::normal:
      return nullptr;
    case ExitKind::unwound:
      return "unwound by exception";
    case ExitKind::longjmp:
      return "skipped by longjmp";
    case ExitKind::not_recorded:
      return "exit not recorded";
    case ExitKind::trace_end:
      return nullptr;  // end_note()
  }
  return nullptr;
}

class Replay final : public Walker::Handler {
 public:
  Replay(const trace::TraceReader& r, const Options& o)
      : r_(r),
        o_(o),
        names_(r, o.names),
        filter_(o.filter),
        notrace_(o.notrace),
        selection_(o.tids, o.pids) {}

  void header() {
    if (fields_.size() == 2 && fields_[0].field == Field::duration && fields_[1].field == Field::tid) {
      std::fputs("# DURATION     TID     FUNCTION\n", stdout);
      return;
    }
    std::string h = "#";
    for (size_t i = 0; i < fields_.size(); ++i)
      h += fmt::format("{:>{}} ", fields_[i].header, fields_[i].width - (i == 0 ? 1 : 0));
    std::fputs((h + "  FUNCTION\n").c_str(), stdout);
  }

  // Set once the options are checked (run()).
  void set_columns(std::vector<FieldInfo> f, uint64_t from_ns, uint64_t to_ns) {
    fields_ = std::move(f);
    from_ns_ = from_ns;
    to_ns_ = to_ns;
  }

  void enter(WalkThread& t, const Frame& f) override {
    ThreadView& tv = views_[&t];
    View v;
    const size_t idx = t.stack.size() - 1;
    if (selected(t)) {
      bool hidden = tv.hide_at >= 0;
      if (!hidden && !notrace_.empty() && names_.matches(t.pid, f.addr, notrace_, f.entry)) {
        tv.hide_at = static_cast<int>(idx);
        hidden = true;
      }
      if (!hidden && !filter_.empty() && tv.filter_at < 0) {
        if (names_.matches(t.pid, f.addr, filter_, f.entry)) {
          tv.filter_at = static_cast<int>(idx);
          tv.filter_base = f.depth;
        } else {
          hidden = true;
        }
      }
      v.shown_depth = f.depth - (tv.filter_at >= 0 ? tv.filter_base : 0);
      v.visible = !hidden && (o_.depth < 0 || v.shown_depth < o_.depth) && in_range(f.entry);
    }
    if (v.visible) flush_pending();  // the parent's line, before this frame's view is pushed
    tv.stack.push_back(v);
    if (!v.visible) return;
    pending_ = &t;
    pending_text_ = call_text(t, f);
    pending_time_ = f.entry;
    pending_addr_ = f.addr;
  }

  void exit(WalkThread& t, const Frame& f, const Exit& x) override {
    ThreadView& tv = views_[&t];
    View v;
    if (f.synthetic) {
      v.shown_depth = f.depth;
      v.visible = selected(t) && tv.hide_at < 0 && (o_.filter.empty() ? true : tv.filter_at >= 0) &&
                  (o_.depth < 0 || f.depth < o_.depth) && in_range(x.time);
      if (tv.filter_at >= 0) v.shown_depth = f.depth - tv.filter_base;
    } else {
      v = tv.stack.back();
      tv.stack.pop_back();
      const int idx = static_cast<int>(tv.stack.size());
      if (tv.hide_at == idx) tv.hide_at = -1;
      if (tv.filter_at == idx) tv.filter_at = -1;
    }
    if (!v.visible) return;

    const std::string dur =
        x.timed && x.time >= f.entry ? format_duration(r_.to_ns(x.time - f.entry), o_.unit) : "";
    const std::string ret = x.ret.has() ? " = " + format_value(x.ret) : "";
    std::string end;
    if (x.kind == ExitKind::trace_end) end = end_note(r_, t.pid, t.tid);
    const char* note = x.kind == ExitKind::trace_end ? end.c_str() : exit_note(x.kind);
    const std::string& name = names_.get(t.pid, f.addr, f.entry);
    if (pending_ == &t && !f.synthetic) {
      // Nothing was printed since the entry: one line.
      pending_ = nullptr;
      std::string text = pending_text_ + ret + ";";
      if (note) text += fmt::format(" /* {} */", note);
      line(dur, t.tid, v.shown_depth, text, f.entry, f.addr);
      return;
    }
    flush_pending();
    std::string text = "}" + ret + (ret.empty() ? "" : ";");
    if (f.synthetic)
      text += fmt::format(" /* {}: entry not recorded */", name);
    else if (note)
      text += fmt::format(" /* {}: {} */", name, note);
    else if (line_no_ - v.open_line - 1 > kLongBody)
      text += fmt::format(" /* {} */", name);
    line(dur, t.tid, v.shown_depth, text, x.time, f.addr);
  }

  // The function tracer: one line per call, with its caller, as ftrace shows it.
  void call(WalkThread& t, const Frame& f) override {
    if (!selected(t)) return;
    if (!notrace_.empty() && names_.matches(t.pid, f.addr, notrace_, f.entry)) return;
    if (!filter_.empty() && !names_.matches(t.pid, f.addr, filter_, f.entry)) return;
    std::string text = call_text(t, f);
    if (f.caller) text += " <- " + names_.containing(t.pid, f.caller, f.entry);
    if (!in_range(f.entry)) return;
    line("", t.tid, 0, text, f.entry, f.addr);
  }

  void marker(WalkThread& t, const trace::Event& e) override {
    if (!selected(t)) return;
    ThreadView& tv = views_[&t];
    const bool inside = tv.stack.empty() ? o_.filter.empty() : tv.stack.back().visible;
    int depth =
        tv.stack.empty() ? (o_.filter.empty() ? e.depth : 0) : tv.stack.back().shown_depth + 1;
    std::string text;
    switch (static_cast<trace::EventType>(e.type)) {
      case trace::EventType::lost:
        text = fmt::format("<lost {} event{}>", e.data, e.data == 1 ? "" : "s");
        break;
      case trace::EventType::fork:
        if (!inside) return;
        text = fmt::format("/* fork: child {} */", e.data);
        break;
      case trace::EventType::depth_overrun:
        if (!inside) return;
        text = fmt::format("/* {} call{} below the depth limit not recorded */", e.data,
                           e.data == 1 ? "" : "s");
        break;
      case trace::EventType::context:
        if (!inside) return;
        text = "/* " + context_text(t, e) + " */";
        break;
      default:
        return;
    }
    if (o_.depth >= 0 && depth >= o_.depth) depth = o_.depth;
    if (!in_range(e.time)) return;
    flush_pending();
    line("", t.tid, depth, text, e.time, 0);
  }

  void corrupt(WalkThread& t, const std::string& what) override {
    if (++corrupt_[&t] <= 5)
      fmt::print(stderr, "utramp replay: {}/events-{}-{}.bin: {}\n", o_.dir, t.pid, t.tid, what);
  }

  void done() {
    flush_pending();
    std::fflush(stdout);
    for (auto& [t, n] : corrupt_)
      if (n > 5)
        fmt::print(stderr, "utramp replay: {}/events-{}-{}.bin: {} more problems like these\n",
                   o_.dir, t->pid, t->tid, n - 5);
  }

 private:
  struct View {
    bool visible = false;
    int shown_depth = 0;
    uint64_t open_line = 0;
  };
  struct ThreadView {
    std::vector<View> stack;
    int hide_at = -1;     // stack index of the frame a -N glob hid, with all below it
    int filter_at = -1;   // stack index of the outermost frame a -F glob selected
    int filter_base = 0;  // its depth: what -F shows is indented from there
  };

  bool selected(const WalkThread& t) const {
    return selection_(t.pid, t.tid);
  }

  // "parse(0x7ffd1c08, \"x.conf\")". A full C++ name has its parameter types already:
  // "parse(char const*, char const*) (0x7ffd1c08, \"x.conf\")", the values only when
  // some were recorded.
  std::string call_text(const WalkThread& t, const Frame& f) {
    const std::string& name = names_.get(t.pid, f.addr, f.entry);
    std::string values;
    for (size_t i = 0; i < f.args.size(); ++i) {
      if (i) values += ", ";
      values += format_value(f.args[i].second);
    }
    if (o_.names == symbols::Style::full && name.find('(') != std::string::npos)
      return values.empty() ? name : name + " (" + values + ")";
    return name + "(" + values + ")";
  }

  void flush_pending() {
    if (!pending_) return;
    WalkThread& t = *pending_;
    pending_ = nullptr;
    View& v = views_[&t].stack.back();
    line("", t.tid, v.shown_depth, pending_text_ + " {", pending_time_, pending_addr_);
    v.open_line = line_no_ - 1;
  }

  bool in_range(uint64_t time) const {
    if (from_ns_ == 0 && to_ns_ == UINT64_MAX) return true;
    const uint64_t start = r_.info().start_time;
    const double ns = time >= start ? r_.to_ns(time - start) : 0;
    return ns >= static_cast<double>(from_ns_) && ns <= static_cast<double>(to_ns_);
  }

  // One line: the columns (-f), then the graph. TIME: the event's (an entry's, or its
  // exit's for a closing brace), ADDR: the function's (0: none, a marker).
  void line(const std::string& dur, uint32_t tid, int depth, const std::string& text, uint64_t time,
            uint64_t addr) {
    std::string s;
    for (const FieldInfo& f : fields_) {
      std::string v;
      switch (f.field) {
        case Field::duration: v = dur; break;
        case Field::tid: v = fmt::format("[{:>6}]", tid); break;
        case Field::time: {
          const uint64_t start = r_.info().start_time;
          const double ns = time >= start ? r_.to_ns(time - start) : 0;
          v = fmt::format("{:.9f}", ns / 1e9);
          break;
        }
        case Field::elapsed: {
          if (!first_time_) first_time_ = time;
          v = format_duration(r_.to_ns(time - std::min(time, first_time_)), o_.unit);
          break;
        }
        case Field::delta:
          v = last_time_ ? format_duration(r_.to_ns(time - std::min(time, last_time_)), o_.unit) : "";
          break;
        case Field::addr: v = addr ? fmt::format("{:#x}", addr) : ""; break;
      }
      s += fmt::format("{:>{}} ", v, f.width);
    }
    last_time_ = time;
    s += fmt::format("| {:{}}{}\n", "", 2 * std::max(depth, 0), text);
    std::fwrite(s.data(), 1, s.size(), stdout);
    ++line_no_;
  }

  const trace::TraceReader& r_;
  const Options& o_;
  Names names_;
  symbols::Globs filter_, notrace_;
  ThreadSelection selection_;
  std::map<const WalkThread*, ThreadView> views_;
  std::map<const WalkThread*, uint64_t> corrupt_;
  WalkThread* pending_ = nullptr;  // its top frame's entry is not printed yet
  std::string pending_text_;
  uint64_t pending_time_ = 0, pending_addr_ = 0;
  uint64_t line_no_ = 0;
  std::vector<FieldInfo> fields_;
  uint64_t from_ns_ = 0, to_ns_ = UINT64_MAX;
  uint64_t first_time_ = 0, last_time_ = 0;
};

int run(const Options& o) {
  if (!valid_unit(o.unit)) {
    fmt::print(stderr, "utramp replay: unknown unit '{}' (auto, ns, us, ms, s)\n", o.unit);
    return 2;
  }
  auto fields = parse_fields(o.fields);
  if (!fields) return 2;
  uint64_t from = 0, to = UINT64_MAX;
  if (!o.time_range.empty() && !parse_time_range(o.time_range, &from, &to)) {
    fmt::print(stderr, "utramp replay: --time-range '{}': expected START~STOP, times since the "
                       "recording started (10us, 1.5ms, 2s; either may be left out), START <= STOP\n",
               o.time_range);
    return 2;
  }
  auto r = open_trace("replay", o.dir);
  if (!r) return 1;
  if (r->threads().empty()) fmt::print(stderr, "utramp replay: {}: no events recorded\n", o.dir);
  Replay replay(*r, o);
  replay.set_columns(std::move(*fields), from, to);
  replay.header();
  Walker w(replay, r->info().tracer == "function");
  w.run(*r, !o.no_merge);
  replay.done();
  return 0;
}

}  // namespace

int replay_trace(const std::string& dir) {
  Options o;
  o.dir = dir;
  return run(o);
}

void add_replay(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("replay", "Show a recorded trace as a function call graph");
  sub->add_option("dir", o->dir, "trace directory")->capture_default_str();
  sub->add_option("--tid", o->tids, "only these threads, by id")
      ->delimiter(',')
      ->allow_extra_args(false);
  sub->add_option("--pid", o->pids, "only the threads of these processes, by id")
      ->delimiter(',')
      ->allow_extra_args(false);
  sub->add_option("-F,--filter", o->filter,
                  "only these functions (glob) and what they call; repeatable")
      ->allow_extra_args(false);
  sub->add_option("-N,--notrace", o->notrace,
                  "hide these functions (glob) and what they call; wins over -F; repeatable")
      ->allow_extra_args(false);
  sub->add_option("-D,--depth", o->depth, "show calls down to this depth only")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--no-merge", o->no_merge, "one thread after the other instead of by time");
  add_name_options(sub, &o->demangle);
  sub->add_option("--unit", o->unit, "duration unit: auto (default), ns, us, ms, s");
  sub->add_option("-f,--output-fields", o->fields,
                  "columns: duration,tid (default), time, elapsed, delta, addr, none; +FIELD adds to "
                  "the default");
  sub->add_option("--time-range", o->time_range,
                  "START~STOP: calls that began then (times since the recording started: 1ms~2ms)");
  sub->add_flag("--no-pager", o->no_pager, "accepted for uftrace's users: replay never uses a pager");
  sub->callback([o] {
    if (!name_style("replay", o->demangle, &o->names)) std::exit(2);
    std::exit(run(*o));
  });
}

}  // namespace utramp::cli
