#include "html_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "call_tree.hpp"
#include "flame.hpp"
#include "function_stats.hpp"

namespace utramp::cli {

namespace {

// Hands each call to every handler, in order: one walk feeds the whole page.
class Tee final : public Walker::Handler {
 public:
  explicit Tee(std::vector<Walker::Handler*> hs) : hs_(std::move(hs)) {}
  void enter(WalkThread& t, const Frame& f) override {
    for (auto* h : hs_) h->enter(t, f);
  }
  void exit(WalkThread& t, const Frame& f, const Exit& x) override {
    for (auto* h : hs_) h->exit(t, f, x);
  }
  void marker(WalkThread& t, const trace::Event& e) override {
    for (auto* h : hs_) h->marker(t, e);
  }
  void corrupt(WalkThread& t, const std::string& what) override {
    for (auto* h : hs_) h->corrupt(t, what);
  }
  void call(WalkThread& t, const Frame& f) override {
    for (auto* h : hs_) h->call(t, f);
  }

 private:
  std::vector<Walker::Handler*> hs_;
};

// Each thread's calls at the two outermost levels (the thread's first function and what
// it calls), for the timelines.
class Timelines final : public Walker::Handler {
 public:
  static constexpr int kLevels = 2;
  static constexpr size_t kMaxBars = 50000;  // per thread and level; the rest is counted
  struct Bar {
    const std::string* name;  // Names' cache: stable
    uint64_t start, end;
    bool timed;
  };
  struct Lane {
    uint32_t pid = 0, tid = 0;
    std::vector<Bar> bars[kLevels];
    uint64_t dropped = 0;
  };

  Timelines(Names& names, const ThreadSelection& selection) : names_(names), selection_(selection) {}
  void enter(WalkThread& t, const Frame&) override { (void)lane(t); }
  void exit(WalkThread& t, const Frame& f, const Exit& x) override {
    const size_t level = t.stack.size() - 1;  // f is on top
    if (f.synthetic || level >= kLevels) return;
    Lane* l = lane(t);
    if (!l) return;
    const uint64_t end = std::max(x.time, f.entry);
    first_ = std::min(first_, f.entry);
    last_ = std::max(last_, end);
    if (l->bars[level].size() >= kMaxBars) {
      ++l->dropped;
      return;
    }
    l->bars[level].push_back({&names_.get(t.pid, f.addr, f.entry), f.entry, end, x.timed});
  }
  void marker(WalkThread&, const trace::Event&) override {}
  void corrupt(WalkThread&, const std::string&) override {}

  std::vector<Lane*> lanes() {
    std::vector<Lane*> v;
    for (auto& [k, l] : lanes_) v.push_back(&l);
    return v;
  }
  uint64_t first() const { return first_; }
  uint64_t last() const { return last_; }

 private:
  Lane* lane(const WalkThread& t) {
    if (!selection_(t.pid, t.tid)) return nullptr;
    Lane& l = lanes_[{t.pid, t.tid}];
    l.pid = t.pid;
    l.tid = t.tid;
    return &l;
  }
  Names& names_;
  const ThreadSelection& selection_;
  std::map<std::pair<uint32_t, uint32_t>, Lane> lanes_;
  uint64_t first_ = UINT64_MAX, last_ = 0;
};

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(' ');
  return b == std::string::npos ? s : s.substr(b);
}

// The timelines: one lane per thread, its outermost calls in the first row and their
// callees in the second, on one time axis from the first call to the last end. Calls
// narrower than a pixel next to each other are drawn as one grey bar that says how many.
std::string timelines_svg(const trace::TraceReader& r, Timelines& tl) {
  constexpr int kWidth = 1200, kLeft = 10, kRow = 14, kLaneGap = 22, kAxis = 24;
  const double inner = kWidth - 2 * kLeft;
  const auto lanes = tl.lanes();
  const uint64_t t0 = tl.first(), t1 = std::max(tl.last(), tl.first() + 1);
  const double span = static_cast<double>(t1 - t0);
  const int height = kAxis + static_cast<int>(lanes.size()) * (kLaneGap + Timelines::kLevels * kRow) + 6;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"utramp-timelines\" width=\"{0}\" "
      "height=\"{1}\" viewBox=\"0 0 {0} {1}\" font-family=\"monospace\" font-size=\"11\">\n",
      kWidth, height);
  for (int i = 0; i <= 4; ++i) {
    const double x = kLeft + inner * i / 4;
    s += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#ccc\"/>"
        "<text x=\"{0:.1f}\" y=\"12\" text-anchor=\"{3}\">+{4}</text>\n",
        x, kAxis - 8, height, i == 0 ? "start" : i == 4 ? "end" : "middle",
        trimmed(format_duration(r.to_ns(static_cast<uint64_t>(span * i / 4)))));
  }
  int y = kAxis;
  for (const Timelines::Lane* l : lanes) {
    size_t calls = l->bars[0].size();
    s += fmt::format("<g class=\"lane\" data-tid=\"{}\"><text x=\"{}\" y=\"{}\">thread {}/{}: {} outermost call{}{}</text>\n",
                     l->tid, kLeft, y + 14, l->pid, l->tid, calls, calls == 1 ? "" : "s",
                     l->dropped ? fmt::format(" ({} calls not drawn)", l->dropped) : "");
    y += kLaneGap - 4;
    for (int level = 0; level < Timelines::kLevels; ++level) {
      std::vector<Timelines::Bar> bars = l->bars[level];
      std::sort(bars.begin(), bars.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
      auto px = [&](uint64_t t) { return kLeft + inner * static_cast<double>(t - t0) / span; };
      for (size_t i = 0; i < bars.size();) {
        double x0 = px(bars[i].start), x1 = px(bars[i].end);
        size_t j = i + 1;
        // Narrow neighbours become one bar.
        while (j < bars.size() && x1 - x0 < 1 && px(bars[j].start) - x1 < 1 &&
               px(bars[j].end) - px(bars[j].start) < 1)
          x1 = std::max(x1, px(bars[j++].end));
        const double w = std::max(x1 - x0, 0.5);
        std::string tip;
        std::string fill = "#999";
        if (j - i == 1) {
          const auto& b = bars[i];
          tip = fmt::format("{}\nstart: +{}, duration: {}{}", *b.name,
                            trimmed(format_duration(r.to_ns(b.start - t0))),
                            trimmed(format_duration(r.to_ns(b.end - b.start))),
                            b.timed ? "" : " (exit not recorded: at least)");
          fill = flame_colour(*b.name);
        } else {
          tip = fmt::format("{} calls from +{} to +{}", j - i,
                            trimmed(format_duration(r.to_ns(bars[i].start - t0))),
                            trimmed(format_duration(r.to_ns(bars[j - 1].end - t0))));
        }
        s += fmt::format(
            "<rect class=\"call\" data-level=\"{}\" x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" "
            "height=\"{}\" fill=\"{}\"><title>{}</title></rect>\n",
            level, x0, y, w, kRow - 2, fill, xml_escape(tip));
        if (j - i == 1 && w > 30)
          s += fmt::format("<text x=\"{:.2f}\" y=\"{}\" pointer-events=\"none\">{}</text>\n",
                           x0 + 3, y + kRow - 4, xml_escape(flame_label(*bars[i].name, w)));
        i = j;
      }
      y += kRow;
    }
    y += 4;
    s += "</g>\n";
  }
  s += "</svg>\n";
  return s;
}

// Sorting the function table, and the page's self-check (`#selfcheck=NAME`: the flame
// graph's check() and every column sorted once by a click on its header, with the
// values in the order shown, written as JSON into #utramp-selfcheck).
const char* kPageScript = R"JS(
function utrampSortable(table) {
  var body = table.tBodies[0];
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  function value(row, col) {
    var c = row.cells[col];
    return c.hasAttribute('data-v') ? +c.getAttribute('data-v') : c.textContent;
  }
  function sortBy(col, dir) {
    var rows = Array.prototype.slice.call(body.rows);
    var sign = dir === 'asc' ? 1 : -1;
    rows.sort(function (a, b) {
      var x = value(a, col), y = value(b, col);
      if (x < y) return -sign;
      if (x > y) return sign;
      var n = a.cells[a.cells.length - 1].textContent, m = b.cells[b.cells.length - 1].textContent;
      return n < m ? -1 : n > m ? 1 : 0;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    heads.forEach(function (h, i) {
      if (i === col) h.setAttribute('aria-sort', dir === 'asc' ? 'ascending' : 'descending');
      else h.removeAttribute('aria-sort');
    });
  }
  heads.forEach(function (h, col) {
    h.addEventListener('click', function () {
      var now = h.getAttribute('aria-sort');
      var numeric = h.getAttribute('data-type') === 'num';
      sortBy(col, now ? (now === 'descending' ? 'asc' : 'desc') : (numeric ? 'desc' : 'asc'));
    });
  });
  function column(col) {
    return Array.prototype.map.call(body.rows, function (r) { return value(r, col); });
  }
  return {sortBy: sortBy, column: column, heads: heads};
}
(function () {
  var flame = document.querySelector('svg.utramp-flame');
  var api = flame ? utrampFlame(flame) : null;
  var input = document.getElementById('flame-search');
  if (input && api) input.addEventListener('input', function () {
    try { api.search(input.value); input.classList.remove('bad'); }
    catch (e) { input.classList.add('bad'); }
  });
  var table = utrampSortable(document.getElementById('functions-table'));
  var target = utrampCheckTarget();
  if (target === null) return;
  var out = {flame: api ? api.check(target) : null, sort: []};
  table.heads.forEach(function (h, col) {
    h.dispatchEvent(new MouseEvent('click', {bubbles: true}));
    out.sort.push({column: h.textContent, order: h.getAttribute('aria-sort'),
                   values: table.column(col), names: table.column(table.heads.length - 1)});
  });
  out.timelines = {lanes: document.querySelectorAll('svg.utramp-timelines g.lane').length,
                   bars: document.querySelectorAll('svg.utramp-timelines rect.call').length};
  utrampMark('utramp-selfcheck', JSON.stringify(out));
})();
)JS";

const char* kStyle = R"CSS(
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em auto;max-width:1240px;color:#222;background:#fff}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.15em;margin:1.4em 0 .4em;border-bottom:1px solid #ddd}
table{border-collapse:collapse}td,th{padding:2px 10px;text-align:left;vertical-align:top}
table.meta th{font-weight:normal;color:#555}
#functions-table th{cursor:pointer;background:#eee;position:sticky;top:0;user-select:none}
#functions-table th[aria-sort=descending]::after{content:" \25BC"}
#functions-table th[aria-sort=ascending]::after{content:" \25B2"}
#functions-table td.n{text-align:right;font-family:monospace}
#functions-table tbody tr:nth-child(even){background:#f6f6f6}
#functions-table td:last-child{font-family:monospace}
.note{color:#555}input.bad{background:#fdd}
)CSS";

std::string num_cell(double v, const std::string& shown) {
  return fmt::format("<td class=\"n\" data-v=\"{:.17g}\">{}</td>", v, xml_escape(shown));
}

}  // namespace

std::string html_report(const trace::TraceReader& r, const ThreadSelection& selection,
                        symbols::Style style) {
  const bool flat = r.info().tracer == "function";
  Names names(r, style);
  FunctionStats stats(r, names, selection);
  CallNode root;
  root.name = "all";
  CallTreeBuilder tree(r, names, grouped_root(root, r, selection, Grouping::none));
  Timelines timelines(names, selection);
  Tee tee({&stats, &tree, &timelines});
  Walker w(tee, flat);
  w.run(r, false);

  std::string command;
  for (const auto& a : r.info().command) command += (command.empty() ? "" : " ") + a;
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  h += fmt::format("<title>utramp report: {}</title>\n<style>{}</style>\n</head><body>\n",
                   xml_escape(command), kStyle);
  h += fmt::format("<h1>utramp report</h1>\n<p class=\"note\">{}</p>\n", xml_escape(r.dir()));

  h += "<section id=\"recording\"><h2>Recording</h2><table class=\"meta\">\n";
  for (const auto& [k, v] : recording_summary(r))
    h += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", xml_escape(k), xml_escape(v));
  h += "</table></section>\n";

  h += "<section id=\"losses\"><h2>Losses</h2>\n";
  const auto lost = stats.lost();
  uint64_t total_lost = 0;
  for (const auto& [who, n] : lost) total_lost += n;
  std::string notes;
  if (stats.overruns())
    notes += fmt::format("<li>calls below the depth limit, not recorded: {}</li>\n", stats.overruns());
  if (stats.untimed())
    notes += fmt::format("<li>calls without a recorded exit (not timed): {}</li>\n", stats.untimed());
  if (r.info().unclaimed_threads)
    notes += fmt::format("<li>threads not traced for lack of a buffer: {}</li>\n",
                         r.info().unclaimed_threads);
  if (stats.corrupt())
    notes += fmt::format("<li>malformed events ignored: {} (see <code>utramp replay</code>)</li>\n",
                         stats.corrupt());
  if (total_lost) {
    h += fmt::format("<p>{} events lost:</p><table class=\"meta\">\n", total_lost);
    for (const auto& [who, n] : lost)
      if (n) h += fmt::format("<tr><th>thread {}/{}</th><td>{}</td></tr>\n", who.first, who.second, n);
    h += "</table>\n";
  } else {
    h += "<p>No events were lost.</p>\n";
  }
  if (!notes.empty()) h += "<ul>\n" + notes + "</ul>\n";
  h += "</section>\n";

  h += "<section id=\"flame\"><h2>Flame graph</h2>\n";
  FlameOptions fo;
  fo.weight = flat ? FlameWeight::calls : FlameWeight::time;
  fo.title = flat ? "Calls (the function tracer: caller and callee)" : "Total time";
  const FlameLayout l = layout_flame(root, fo.weight, 0.1 / 1180);
  if (l.total > 0) {
    h += "<p class=\"note\">Click a frame to zoom, <i>Reset zoom</i> or Escape to go back. "
         "<input id=\"flame-search\" placeholder=\"search (regular expression)\" size=\"32\"></p>\n";
    h += flame_svg(l, fo, false);
  } else {
    h += "<p>No timed calls.</p>\n";
  }
  h += "</section>\n";

  h += "<section id=\"timelines\"><h2>Threads over time</h2>\n";
  if (flat) h += "<p>The function tracer records no exits: no timelines.</p>\n";
  else if (timelines.last() == 0) h += "<p>No calls.</p>\n";
  else h += timelines_svg(r, timelines);
  h += "</section>\n";

  h += "<section id=\"functions\"><h2>Functions</h2>\n"
       "<p class=\"note\">Click a column's header to sort by it. Total time counts a recursive "
       "function once per outermost call; self time leaves out the traced calls it made.</p>\n"
       "<table id=\"functions-table\"><thead><tr>";
  if (!flat)
    h += "<th data-type=\"num\">Total time</th><th data-type=\"num\">Self time</th>"
         "<th data-type=\"num\">Average</th><th data-type=\"num\">Max</th>";
  h += "<th data-type=\"num\">Calls</th><th>Function</th></tr></thead><tbody>\n";
  std::vector<std::pair<std::string, FunctionStat>> rows(stats.stats().begin(), stats.stats().end());
  std::stable_sort(rows.begin(), rows.end(), [flat](const auto& a, const auto& b) {
    const double ka = flat ? static_cast<double>(a.second.calls) : a.second.total;
    const double kb = flat ? static_cast<double>(b.second.calls) : b.second.total;
    return ka != kb ? ka > kb : a.first < b.first;
  });
  for (const auto& row : rows) {
    const std::string& name = row.first;
    const FunctionStat& s = row.second;  // named: clang 14 captures no structured binding
    h += "<tr>";
    if (!flat) {
      auto cell = [&](double ns) { return num_cell(ns, s.timed ? trimmed(format_duration(ns)) : "-"); };
      h += cell(s.total) + cell(s.self) + cell(s.avg()) + cell(s.max);
    }
    h += num_cell(static_cast<double>(s.calls), std::to_string(s.calls));
    h += fmt::format("<td>{}</td></tr>\n", xml_escape(name));
  }
  h += "</tbody></table></section>\n";

  h += "<script>\n";
  h += flame_script();
  h += kPageScript;
  h += "</script>\n</body></html>\n";
  return h;
}

}  // namespace utramp::cli
