#include "trace_walk.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace utramp::cli {

using trace::Event;
using trace::EventType;
using trace::ValueFormat;

std::optional<trace::TraceReader> open_trace(const std::string& cmd, const std::string& dir) {
  auto r = trace::TraceReader::open(dir);
  if (!r) {
    fmt::print(stderr, "utramp {}: {}\n", cmd, r.error().message);
    return std::nullopt;
  }
  for (const auto& w : r->warnings()) fmt::print(stderr, "utramp {}: {}/{}\n", cmd, dir, w);
  return std::move(r).value();
}

// ---------------------------------------------------------------------------------
// Values and durations

namespace {

// S between Q quotes, with C escapes for the quote, backslash and what does not print.
std::string quote(const std::string& s, char q = '"') {
  std::string out(1, q);
  for (unsigned char c : s) {
    switch (c) {
      case '"':
      case '\'':
        if (c == static_cast<unsigned char>(q)) out += '\\';
        out += static_cast<char>(c);
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c >= 0x7f)
          out += fmt::format("\\x{:02x}", c);
        else
          out += static_cast<char>(c);
    }
  }
  return out + q;
}

}  // namespace

std::string format_value(const Value& v) {
  switch (v.format) {
    case ValueFormat::none:
      return "";
    case ValueFormat::integer:
      return std::to_string(static_cast<int64_t>(v.raw));
    case ValueFormat::pointer:
      return v.raw ? fmt::format("{:#x}", v.raw) : "0";
    case ValueFormat::dbl: {
      const double d = std::bit_cast<double>(v.raw);
      return fmt::format("{}", d);
    }
    case ValueFormat::flt:
      return fmt::format("{}", std::bit_cast<float>(static_cast<uint32_t>(v.raw)));
    case ValueFormat::uinteger:
      return std::to_string(v.raw);
    case ValueFormat::character:
      return quote(std::string(1, static_cast<char>(v.raw)), '\'');
    case ValueFormat::string:
      if (v.raw == 0) return "NULL";
      if (v.unreadable) return fmt::format("{:#x}", v.raw);
      return quote(v.str) + (v.str.size() < v.str_len ? "..." : "");
  }
  return fmt::format("{:#x}", v.raw);
}

bool valid_unit(const std::string& unit) {
  return unit.empty() || unit == "auto" || unit == "ns" || unit == "us" || unit == "ms" ||
         unit == "s";
}

std::string format_duration(double ns, const std::string& unit) {
  static const struct {
    const char* name;
    double scale;
  } units[] = {{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
  size_t u = 0;
  if (unit.empty() || unit == "auto") {
    // The largest unit in which the value, rounded to 3 decimals, is at least 1.
    while (u + 1 < std::size(units) && std::round(ns / units[u + 1].scale * 1000) >= 1000) ++u;
  } else {
    while (u + 1 < std::size(units) && unit != units[u].name) ++u;
  }
  return fmt::format("{:7.3f} {:<2}", ns / units[u].scale, units[u].name);
}

// ---------------------------------------------------------------------------------
// Names

const Names::Entry& Names::entry(uint32_t pid, uint64_t addr, uint64_t time) {
  const trace::SymbolTable* tab = &r_.symbols(pid, time);
  auto key = std::make_pair(tab, addr);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  const trace::Function* f = tab->find(addr);
  Entry e{symbols::Name(f ? f->name : fmt::format("{:#x}", addr)), {}};
  e.shown = e.name.in(style_);
  if (f && addr != f->addr) e.shown += fmt::format("+{:#x}", addr - f->addr);
  return cache_.emplace(key, std::move(e)).first->second;
}

const std::string& Names::get(uint32_t pid, uint64_t addr, uint64_t time) { return entry(pid, addr, time).shown; }

std::string Names::containing(uint32_t pid, uint64_t addr, uint64_t time) {
  if (const trace::Function* f = r_.symbols(pid, time).find(addr)) return get(pid, f->addr, time);
  // Not a traced function: the symbol tables of the process's mapped files.
  const std::string sym = r_.object_symbol(pid, addr, time);
  if (!sym.empty()) return symbols::Name(sym).in(style_);
  return fmt::format("{:#x}", addr);
}

bool Names::matches(uint32_t pid, uint64_t addr, const symbols::Globs& globs, uint64_t time) {
  return globs.matches(entry(pid, addr, time).name);
}

// ---------------------------------------------------------------------------------
// Walker

WalkThread& Walker::thread(uint32_t pid, uint32_t tid) {
  const uint64_t key = (uint64_t{pid} << 32) | tid;
  auto [it, fresh] = stacks_.try_emplace({key, current_[key]});
  if (fresh) {
    it->second = std::make_unique<WalkThread>();
    it->second->pid = pid;
    it->second->tid = tid;
    it->second->index = next_index_++;
    it->second->context = contexts_[key]++;
  }
  return *it->second;
}

// A `context` event on T's thread: T, the stack left, takes the name it is kept under
// (replacing a stale stack of that name, whose calls end here), and the thread goes on
// with the stack named `data`.
WalkThread& Walker::switch_stack(WalkThread& t, const Event& e) {
  const uint64_t key = (uint64_t{t.pid} << 32) | t.tid;
  const uint64_t name = current_[key];
  if (name != e.addr) {
    auto stale = stacks_.find({key, e.addr});
    if (stale != stacks_.end()) {
      close_to(*stale->second, 0, e.time);
      retired_.push_back(std::move(stale->second));
      stacks_.erase(stale);
    }
    auto node = stacks_.extract({key, name});
    node.key() = {key, e.addr};
    stacks_.insert(std::move(node));
  }
  if (e.flags & 1) close_to(t, 0, e.time);  // not kept by the tracer
  current_[key] = e.data;
  WalkThread& n = thread(t.pid, t.tid);
  n.last_time = e.time;
  return n;
}

namespace {

void pop_frame(Walker::Handler& h, WalkThread& t, const Exit& x) {
  h.exit(t, t.stack.back(), x);
  const Frame f = std::move(t.stack.back());
  t.stack.pop_back();
  if (x.timed && !t.stack.empty() && !f.synthetic && x.time >= f.entry)
    t.stack.back().child_ticks += x.time - f.entry;
}

}  // namespace

void Walker::close_to(WalkThread& t, size_t keep, uint64_t time) {
  while (t.stack.size() > keep) {
    Exit x;
    x.kind = ExitKind::not_recorded;
    x.time = time;
    pop_frame(h_, t, x);
  }
}

void Walker::flush() {
  filling_ = nullptr;
  if (pending_ == Pending::entry) {
    pending_ = Pending::none;
    pending_thread_->stack.push_back(std::move(pending_frame_));
    h_.enter(*pending_thread_, pending_thread_->stack.back());
  } else if (pending_ == Pending::call) {
    pending_ = Pending::none;
    h_.call(*pending_thread_, pending_frame_);
  } else if (pending_ == Pending::exit) {
    pending_ = Pending::none;
    pop_frame(h_, *pending_thread_, pending_exit_);
  }
  pending_frame_ = Frame{};
}

void Walker::feed(uint32_t pid, uint32_t tid, const Event& e) {
  WalkThread& t = thread(pid, tid);
  ++t.events;
  const auto type = static_cast<EventType>(e.type);

  if (type == EventType::arg) {
    if ((pending_ == Pending::entry || pending_ == Pending::call) && pending_thread_ == &t) {
      Value v;
      v.format = static_cast<ValueFormat>(e.flags);
      v.raw = e.data;
      pending_frame_.args.emplace_back(static_cast<uint8_t>(e.aux & 0xff), v);
      filling_ = v.format == ValueFormat::string ? &pending_frame_.args.back().second : nullptr;
    } else if (!t.after_loss) {
      h_.corrupt(
          t, fmt::format("event #{}: an argument with no function entry before it", t.events - 1));
    }
    return;
  }
  if (type == EventType::string) {
    if (filling_ && pending_thread_ == &t) {
      // 16 bytes per event in addr and data; aux = length << 8 | chunk index.
      Value& v = *filling_;
      v.str_len = e.aux >> 8;
      v.unreadable = (e.flags & 1) != 0;
      const size_t off = size_t{e.aux & 0xff} * 16;
      if (off == v.str.size() && off < v.str_len) {
        char bytes[16];
        std::memcpy(bytes, &e.addr, 8);
        std::memcpy(bytes + 8, &e.data, 8);
        v.str.append(bytes, std::min<size_t>(16, v.str_len - off));
      }
      if (v.str.size() >= v.str_len) filling_ = nullptr;
    } else if (!t.after_loss) {
      h_.corrupt(t, fmt::format("event #{}: string bytes with no value before them", t.events - 1));
    }
    return;
  }

  flush();
  switch (type) {
    case EventType::entry: {
      t.after_loss = false;
      if (flat_) {
        Frame f;
        f.addr = e.addr;
        f.depth = e.depth;
        f.entry = e.time;
        f.caller = e.data;
        pending_ = Pending::call;
        pending_thread_ = &t;
        pending_frame_ = std::move(f);
        break;
      }
      // Frames at this depth or deeper have ended without their exit in the trace.
      size_t keep = t.stack.size();
      while (keep > 0 && t.stack[keep - 1].depth >= e.depth) --keep;
      close_to(t, keep, e.time);
      pending_ = Pending::entry;
      pending_thread_ = &t;
      pending_frame_ = Frame{};
      pending_frame_.addr = e.addr;
      pending_frame_.depth = e.depth;
      pending_frame_.entry = e.time;
      pending_frame_.caller = e.data;
      break;
    }
    case EventType::exit:
    case EventType::exit_unwound:
    case EventType::exit_longjmp: {
      t.after_loss = false;
      size_t keep = t.stack.size();
      while (keep > 0 && t.stack[keep - 1].depth > e.depth) --keep;
      close_to(t, keep, e.time);
      if (!t.stack.empty() && t.stack.back().depth == e.depth && t.stack.back().addr != e.addr)
        close_to(t, t.stack.size() - 1, e.time);
      Exit x;
      x.kind = type == EventType::exit           ? ExitKind::normal
               : type == EventType::exit_unwound ? ExitKind::unwound
                                                 : ExitKind::longjmp;
      x.time = e.time;
      x.timed = true;
      if (t.stack.empty() || t.stack.back().depth != e.depth) {
        Frame f;
        f.addr = e.addr;
        f.depth = e.depth;
        f.synthetic = true;
        t.stack.push_back(std::move(f));
        x.timed = false;
      }
      x.ret.format = static_cast<ValueFormat>(e.flags);
      x.ret.raw = e.data;
      pending_ = Pending::exit;
      pending_thread_ = &t;
      pending_exit_ = std::move(x);
      if (pending_exit_.ret.format == ValueFormat::string) filling_ = &pending_exit_.ret;
      break;
    }
    case EventType::lost:
      t.after_loss = true;
      h_.marker(t, e);
      break;
    case EventType::fork:
    case EventType::depth_overrun:
      h_.marker(t, e);
      break;
    case EventType::context:
      if (flat_) break;
      if (e.flags & 2) {  // no switch: a stack the tracer will not follow
        h_.marker(t, e);
        break;
      }
      h_.marker(switch_stack(t, e), e);
      return;
    default:
      h_.corrupt(t, fmt::format("event #{}: unknown type {}", t.events - 1, e.type));
      return;
  }
  t.last_time = e.time;
}

std::string context_text(const WalkThread& t, const Event& e) {
  if (e.flags & 2)
    return fmt::format("stack of context {:#x} not followed: more execution stacks than the tracer keeps",
                       e.addr);
  return fmt::format("switch to context {}{}", t.context,
                     e.flags & 1 ? " (the stack left was not kept: more execution stacks than the tracer keeps)" : "");
}

void Walker::finish_thread(WalkThread& t) {
  if (pending_thread_ == &t) flush();
  while (!t.stack.empty()) {
    Exit x;
    x.kind = ExitKind::trace_end;
    x.time = t.last_time;
    pop_frame(h_, t, x);
  }
}

void Walker::finish() {
  flush();
  std::vector<WalkThread*> order;
  for (auto& [k, t] : stacks_) order.push_back(t.get());
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->index < b->index; });
  for (WalkThread* t : order) finish_thread(*t);
}

void Walker::run(const trace::TraceReader& r, bool merge) {
  if (merge) {
    auto s = r.merged();
    while (auto e = s->next()) feed(s->pid(), s->tid(), *e);
  } else {
    for (auto [pid, tid] : r.threads()) {
      auto s = r.stream(pid, tid);
      if (!s) continue;
      while (auto e = s->next()) feed(pid, tid, *e);
      flush();
      finish_thread(thread(pid, tid));
    }
  }
  finish();
}

// ---------------------------------------------------------------------------------

std::vector<std::pair<std::string, std::string>> recording_summary(const trace::TraceReader& r) {
  const trace::TraceInfo& in = r.info();
  uint64_t events = 0, lost = 0, unsaved = 0;
  for (const auto& t : in.threads) {
    events += t.events;
    lost += t.lost;
    unsaved += t.unsaved;
  }
  auto known = [](const std::string& v) { return v.empty() ? std::string("(not recorded)") : v; };
  std::string command;
  for (const auto& w : in.command) command += (command.empty() ? "" : " ") + w;
  // The root process's end, from its process file: how long the recording ran.
  uint64_t end = 0;
  for (const auto& [pid, p] : r.processes())
    if (p.parent == 0) end = std::max(end, p.end_time);
  return {
      {"command line", command},
      {"binary", known(in.binary)},
      {"build id", known(in.build_id)},
      {"recorded", known(in.date)},
      {"tracer", in.tracer + ", " + in.buffer_mode + " mode"},
      {"state", in.state + (in.cut_reason.empty() ? "" : ": " + in.cut_reason)},
      {"exit status", known(in.exit)},
      {"elapsed time",
       end > in.start_time ? format_duration(r.to_ns(end - in.start_time)) : "(unknown)"},
      {"events", fmt::format("{} saved, {} lost{}", events, lost,
                             unsaved ? fmt::format(", {} not saved (cut)", unsaved) : "")},
      {"processes", std::to_string(std::max<size_t>(r.processes().size(), 1))},
      {"threads", std::to_string(in.threads.size())},
  };
}

std::string end_note(const trace::TraceReader& r, uint32_t pid, uint32_t tid) {
  std::string how;
  if (r.truncated(pid, tid)) {
    // The exits may be in what was lost.
  } else if (auto it = r.processes().find(pid); it != r.processes().end()) {
    how = it->second.exit;
  } else {
    // A trace without process files: info.json's exit is the first process's, the one
    // whose thread came first.
    const auto& th = r.info().threads;
    if (!th.empty() && th.front().pid == pid) how = r.info().exit;
  }
  if (how.empty()) return "not returned by the end of the trace";
  return "not returned: the target " + std::string(how.starts_with("killed") ? "was " : "") + how;
}

std::vector<uint64_t> function_durations(const trace::TraceReader& r, const symbols::Globs& globs) {
  struct H : Walker::Handler {
    const trace::TraceReader& r;
    Names names;
    const symbols::Globs& globs;
    std::vector<uint64_t> out;
    H(const trace::TraceReader& rr, const symbols::Globs& g)
        : r(rr), names(rr, symbols::Style::simple), globs(g) {}
    void enter(WalkThread&, const Frame&) override {}
    void exit(WalkThread& t, const Frame& f, const Exit& x) override {
      if (!x.timed || f.synthetic || x.time < f.entry) return;
      if (!names.matches(t.pid, f.addr, globs, f.entry)) return;
      out.push_back(static_cast<uint64_t>(std::llround(r.to_ns(x.time - f.entry))));
    }
    void marker(WalkThread&, const Event&) override {}
    void corrupt(WalkThread&, const std::string&) override {}
  } h(r, globs);
  Walker w(h);
  w.run(r, false);
  return std::move(h.out);
}

}  // namespace utramp::cli
