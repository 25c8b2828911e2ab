#include "flame.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace utramp::cli {

namespace {

// Geometry of the drawing, in pixels; the script reads kCharWidth from the SVG
// (data-char) so that labels are cut the same way before and after a zoom.
constexpr int kFrameHeight = 16;
constexpr int kPad = 10;
constexpr double kCharWidth = 7.2;  // monospace at 12px

double own_weight(const CallNode& n, FlameWeight w) {
  return w == FlameWeight::time ? n.self_ns : static_cast<double>(n.calls);
}

// Post-order: every node's weight, its own plus its children's, computed once.
double weigh(const CallNode& n, FlameWeight w, std::unordered_map<const CallNode*, double>& out) {
  double s = own_weight(n, w);
  for (const auto& c : n.children) s += weigh(*c, w, out);
  out[&n] = s;
  return s;
}

struct Placer {
  FlameWeight weight;
  double min_fraction;
  std::unordered_map<const CallNode*, double> weights;
  FlameLayout out;

  void place(const CallNode& n, int32_t index, uint32_t depth, double x) {
    for (const CallNode* c : n.sorted()) {
      const double cw = out.total > 0 ? weights[c] / out.total : 0;
      if (cw > 0 && cw >= min_fraction) {
        out.frames.push_back({c, depth + 1, x, cw, weights[c], index});
        out.max_depth = std::max(out.max_depth, depth + 1);
        place(*c, static_cast<int32_t>(out.frames.size() - 1), depth + 1, x);
      } else if (cw > 0) {
        ++out.omitted;
      }
      x += cw;
    }
  }
};

}  // namespace

// The script's label() is the same rule.
std::string flame_label(const std::string& name, double px) {
  const double fit = std::floor((px - 6) / kCharWidth);
  if (fit >= static_cast<double>(name.size())) return name;
  if (fit > 2) return name.substr(0, static_cast<size_t>(fit) - 2) + "..";
  return "";
}

namespace {

std::string duration(double ns) {
  std::string s = format_duration(ns);
  s.erase(0, s.find_first_not_of(' '));
  return s;
}

std::string tooltip(const FlameFrame& f, const FlameLayout& l, const FlameOptions& o) {
  const CallNode& n = *f.node;
  const double pct = l.total > 0 ? 100.0 * f.weight / l.total : 0;
  std::string s = n.name + "\n";
  if (o.weight == FlameWeight::calls) {
    s += fmt::format("calls: {}, with its callees': {:.0f}, {:.2f}%", n.calls, f.weight, pct);
  } else if (o.inverted) {
    s += f.depth == 0 ? fmt::format("self time: {}", duration(f.weight))
                      : fmt::format("self time spent through this path: {}, calls: {}, {:.2f}%",
                                    duration(f.weight), n.calls, pct);
  } else if (f.depth == 0) {
    s += fmt::format("total: {}", duration(f.weight));
  } else {
    s += fmt::format("calls: {}, total: {}, self: {}, {:.2f}%", n.calls, duration(n.total_ns),
                     duration(n.self_ns), pct);
  }
  if (!n.timed && o.weight == FlameWeight::time)
    s += "\n(some exits were not recorded: times are lower bounds)";
  return s;
}

}  // namespace

double flame_weight(const CallNode& n, FlameWeight weight) {
  std::unordered_map<const CallNode*, double> w;
  return weigh(n, weight, w);
}

FlameLayout layout_flame(const CallNode& root, FlameWeight weight, double min_fraction) {
  Placer p{weight, min_fraction, {}, {}};
  p.out.total = weigh(root, weight, p.weights);
  p.out.frames.push_back({&root, 0, 0, 1, p.out.total, -1});
  p.place(root, 0, 0, 0);
  return std::move(p.out);
}

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&#39;"; break;
        default:
          if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') out += "\xEF\xBF\xBD";
          else out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence is copied; anything else is one U+FFFD per byte.
    const size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) ok = (p[i + k] & 0xC0) == 0x80;
    if (ok) {
      const uint32_t cp =
          len == 2 ? (c & 0x1Fu) << 6 | (p[i + 1] & 0x3Fu)
          : len == 3 ? (c & 0x0Fu) << 12 | (p[i + 1] & 0x3Fu) << 6 | (p[i + 2] & 0x3Fu)
                     : (c & 0x07u) << 18 | (p[i + 1] & 0x3Fu) << 12 | (p[i + 2] & 0x3Fu) << 6 |
                           (p[i + 3] & 0x3Fu);
      // Overlong forms, surrogates, beyond U+10FFFF, and U+FFFE/U+FFFF are not XML.
      ok = (len == 3 ? cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF) && cp != 0xFFFE && cp != 0xFFFF
                     : true) &&
           (len == 4 ? cp >= 0x10000 && cp <= 0x10FFFF : true);
    }
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string flame_colour(const std::string& name) {
  // FNV-1a: stable across runs and builds (std::hash is neither).
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  const unsigned r = 205 + static_cast<unsigned>(h % 50);
  const unsigned g = static_cast<unsigned>((h >> 16) % 190) + 40;
  const unsigned b = static_cast<unsigned>((h >> 32) % 60);
  return fmt::format("rgb({},{},{})", r, g, b);
}

std::string flame_svg(const FlameLayout& l, const FlameOptions& o, bool with_script) {
  const int top = o.subtitle.empty() ? 32 : 46;
  const int bottom = 30;
  const int height = top + static_cast<int>(l.max_depth + 1) * kFrameHeight + bottom;
  const double inner = o.width - 2 * kPad;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" class=\"utramp-flame\" "
      "width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" data-width=\"{0}\" data-pad=\"{2}\" "
      "data-char=\"{3}\" data-weight=\"{4}\" font-family=\"monospace\" font-size=\"12\">\n",
      o.width, height, kPad, kCharWidth, o.weight == FlameWeight::time ? "time" : "calls");
  s +=
      "<style>.f{cursor:pointer}.f:hover rect{stroke:#222;stroke-width:.6}.anc rect{opacity:.5}"
      ".btn{cursor:pointer;fill:#1a4d99}.btn:hover{text-decoration:underline}</style>\n";
  s += fmt::format("<rect width=\"100%\" height=\"100%\" fill=\"#f6f6f2\"/>\n");
  s += fmt::format("<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
                   o.width / 2, xml_escape(o.title));
  if (!o.subtitle.empty())
    s += fmt::format("<text x=\"{}\" y=\"36\" text-anchor=\"middle\" fill=\"#555\">{}</text>\n",
                     o.width / 2, xml_escape(o.subtitle));
  s += fmt::format("<text class=\"btn reset\" x=\"{}\" y=\"20\" visibility=\"hidden\">Reset zoom</text>\n", kPad);
  s += fmt::format("<text class=\"btn search\" x=\"{}\" y=\"20\" text-anchor=\"end\">Search</text>\n",
                   o.width - kPad);
  s += fmt::format("<text class=\"details\" x=\"{}\" y=\"{}\">{}</text>\n", kPad, height - 10,
                   l.omitted ? fmt::format("{} narrow frames not drawn", l.omitted) : "");
  s += fmt::format("<text class=\"matched\" x=\"{}\" y=\"{}\" text-anchor=\"end\"></text>\n",
                   o.width - kPad, height - 10);
  s += "<g class=\"frames\">\n";
  for (size_t i = 0; i < l.frames.size(); ++i) {
    const FlameFrame& f = l.frames[i];
    const double x = kPad + f.x * inner, w = f.w * inner;
    const int y = o.icicle ? top + static_cast<int>(f.depth) * kFrameHeight
                           : top + static_cast<int>(l.max_depth - f.depth) * kFrameHeight;
    const std::string name = xml_escape(f.node->name);
    s += fmt::format(
        "<g class=\"f\" data-d=\"{}\" data-x=\"{:.10g}\" data-w=\"{:.10g}\" data-p=\"{}\" "
        "data-n=\"{}\"><title>{}</title><rect x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" "
        "height=\"{}\" rx=\"2\" fill=\"{}\"/><text x=\"{:.2f}\" y=\"{}\">{}</text></g>\n",
        f.depth, f.x, f.w, f.parent, name, xml_escape(tooltip(f, l, o)), x, y, w,
        kFrameHeight - 1, f.depth == 0 ? "rgb(200,200,190)" : flame_colour(f.node->name), x + 3,
        y + 12, xml_escape(flame_label(f.node->name, w)));
  }
  s += "</g>\n";
  if (with_script) {
    s += "<script><![CDATA[\n";
    s += flame_script();
    s += "\nutrampFlame(document.documentElement);\n]]></script>\n";
  }
  s += "</svg>\n";
  return s;
}

std::string flame_svg_document(const FlameLayout& l, const FlameOptions& o) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n" + flame_svg(l, o, true);
}

// The script. Frames are <g class="f"> in depth-first order (a frame's descendants are
// the frames right after it that are deeper), each with its depth (data-d), left edge
// and width as fractions of the root (data-x, data-w), its parent's index (data-p) and
// its name (data-n). A zoom shows the frame's subtree at full width and its ancestors
// full width and faded; everything else is hidden. Search colours the frames whose
// name matches a regular expression and shows the share of the root they cover, each
// matched frame counted once even when matched frames nest.
//
// `#selfcheck=NAME` in the page's address runs check(): zoom, search and reset on the
// first frame named NAME (or the first above the root), with the geometry the browser
// drew, written as JSON into an element with id utramp-selfcheck (the tests read it
// from the DOM). An uncaught error writes its message into one with id utramp-error.
const char* flame_script() {
  return R"JS(
function utrampMark(id, text) {
  var old = document.getElementById(id);
  if (old) old.parentNode.removeChild(old);
  var root = document.documentElement;
  var svg = root.namespaceURI === 'http://www.w3.org/2000/svg';
  var e = document.createElementNS(svg ? root.namespaceURI : 'http://www.w3.org/1999/xhtml',
                                   svg ? 'desc' : 'pre');
  e.setAttribute('id', id);
  e.textContent = text;
  (svg ? root : document.body || root).appendChild(e);
}
if (!window.utrampErrorHook) {
  window.utrampErrorHook = true;
  window.addEventListener('error', function (ev) {
    utrampMark('utramp-error', String(ev.message) + ' at ' + ev.lineno + ':' + ev.colno);
  });
}
// "#selfcheck" or "#selfcheck=NAME" in the address: the frame to check; else null.
function utrampCheckTarget() {
  var m = /^#selfcheck(?:=(.*))?$/.exec(location.hash);
  return m ? decodeURIComponent(m[1] || '') : null;
}
function utrampFlame(svg) {
  var W = +svg.getAttribute('data-width'), pad = +svg.getAttribute('data-pad');
  var cw = +svg.getAttribute('data-char'), inner = W - 2 * pad;
  var q = function (c) { return svg.querySelector('.' + c); };
  var reset = q('reset'), details = q('details'), matched = q('matched');
  var idle = details.textContent;
  var frames = Array.prototype.map.call(svg.querySelectorAll('g.f'), function (g, i) {
    var r = g.querySelector('rect');
    return {g: g, i: i, d: +g.getAttribute('data-d'), x: +g.getAttribute('data-x'),
            w: +g.getAttribute('data-w'), p: +g.getAttribute('data-p'),
            name: g.getAttribute('data-n'), rect: r, text: g.querySelector('text'),
            fill: r.getAttribute('fill'), tip: g.querySelector('title').textContent};
  });
  function label(name, px) {
    var fit = Math.floor((px - 6) / cw);
    return fit >= name.length ? name : fit > 2 ? name.slice(0, fit - 2) + '..' : '';
  }
  function place(f, x, w) {
    var px = pad + x * inner, pw = w * inner;
    f.rect.setAttribute('x', px.toFixed(2));
    f.rect.setAttribute('width', pw.toFixed(2));
    f.text.setAttribute('x', (px + 3).toFixed(2));
    f.text.textContent = label(f.name, pw);
  }
  function end(i) {  // one past the last descendant of frame i
    var j = i + 1;
    while (j < frames.length && frames[j].d > frames[i].d) j++;
    return j;
  }
  var zoomed = 0;
  function zoom(i) {
    var z = frames[i], last = end(i), anc = {};
    for (var a = z.p; a >= 0; a = frames[a].p) anc[a] = true;
    frames.forEach(function (f) {
      var inside = f.i >= i && f.i < last;
      f.g.style.display = inside || anc[f.i] ? '' : 'none';
      f.g.classList.toggle('anc', !!anc[f.i]);
      if (inside) place(f, (f.x - z.x) / z.w, f.w / z.w);
      else if (anc[f.i]) place(f, 0, 1);
    });
    zoomed = i;
    reset.setAttribute('visibility', i ? 'visible' : 'hidden');
  }
  var pattern = null;
  function search(re) {
    pattern = re ? new RegExp(re) : null;
    var covered = 0, pct = 0;
    frames.forEach(function (f) {
      var hit = !!pattern && pattern.test(f.name);
      f.rect.setAttribute('fill', hit ? 'rgb(225,0,225)' : f.fill);
      if (hit && f.i >= covered) {
        pct += f.w * 100;
        covered = end(f.i);
      }
    });
    matched.textContent = pattern ? 'Matched: ' + pct.toFixed(1) + '%' : '';
    return pct;
  }
  frames.forEach(function (f) {
    f.g.addEventListener('click', function () { zoom(f.i); });
    f.g.addEventListener('mouseover', function () { details.textContent = f.tip.replace(/\n/g, ' | '); });
    f.g.addEventListener('mouseout', function () { details.textContent = idle; });
  });
  reset.addEventListener('click', function () { zoom(0); });
  q('search').addEventListener('click', function () {
    var re = window.prompt('Search for functions (regular expression; empty clears)', pattern ? pattern.source : '');
    if (re !== null) search(re);
  });
  svg.ownerDocument.addEventListener('keydown', function (e) {
    if (e.key === 'Escape') { zoom(0); search(''); }
  });
  function geometry(f) {
    var box = f.rect.getBoundingClientRect();
    return {name: f.name, depth: f.d, parent: f.p, shown: f.g.style.display !== 'none',
            left: Math.round(box.left * 100) / 100, px: Math.round(box.width * 100) / 100,
            label: f.text.textContent};
  }
  // Zooms on the first frame named NAME (or the first above the root), searches for
  // that name, and reports the drawing before, while zoomed and after the reset.
  function check(name) {
    var out = {width: inner, before: frames.map(geometry)};
    var target = frames.filter(function (f) { return f.name === name; })[0] || frames[1];
    if (target) {
      out.target = target.name;
      zoom(target.i);
      out.zoomed = frames.map(geometry);
      zoom(0);
      out.search = {pattern: '^' + target.name.replace(/[\\^$.*+?()[\]{}|]/g, '\\$&') + '$'};
      out.search.pct = search(out.search.pattern);
      out.search.coloured = frames.filter(function (f) {
        return f.rect.getAttribute('fill') === 'rgb(225,0,225)';
      }).length;
      out.search.text = matched.textContent;
      search('');
    }
    out.after = frames.map(geometry);
    return out;
  }
  var api = {zoom: zoom, search: search, check: check, frames: frames};
  svg.utrampFlame = api;
  if (svg.ownerDocument.documentElement === svg && utrampCheckTarget() !== null)
    utrampMark('utramp-selfcheck', JSON.stringify(check(utrampCheckTarget())));
  return api;
}
)JS";
}

}  // namespace utramp::cli
