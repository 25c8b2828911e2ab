// `dump --flamegraph` and `report --html` loaded in headless Chromium (Debian's
// chromium; skipped, with the reason, where it is not installed): the page's own script
// runs its self-check when the address ends in #selfcheck=NAME (tools/utramp/flame.cpp)
// and writes what the browser drew as JSON into the DOM, which --dump-dom prints; an
// uncaught error writes a marker there instead. Checked: no error, each frame's drawn
// width against the times of the trace, children within their parents, zoom, search,
// and the function table sorted by each column.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "synth_trace.hpp"
#include "temp_dir.hpp"

using namespace utramp;
using nlohmann::json;

namespace {

std::string chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (access(p, X_OK) == 0) return p;
  return "";
}

#define REQUIRE_CHROMIUM()                                                                  \
  if (chromium().empty())                                                                   \
  GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh installs Debian's)"

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string unescape(std::string s) {
  const std::pair<const char*, const char*> entities[] = {
      {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#39;", "'"}, {"&amp;", "&"}};
  for (const auto& [from, to] : entities)
    for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += std::strlen(to))
      s.replace(at, std::strlen(from), to);
  return s;
}

// The text of the element with id ID in a DOM dump, unescaped; nullopt when absent.
std::optional<std::string> element_text(const std::string& dom, const std::string& id) {
  const size_t at = dom.find("id=\"" + id + "\"");
  if (at == std::string::npos) return std::nullopt;
  const size_t open = dom.find('>', at), close = dom.find("</", open);
  if (open == std::string::npos || close == std::string::npos) return std::nullopt;
  return unescape(dom.substr(open + 1, close - open - 1));
}

// A page to check: FILE loaded with #selfcheck=TARGET.
struct Page {
  std::string file, target;
};

// Loads every page in one headless Chromium (its start-up is most of the time), each in
// a frame of a harness page that collects the self-checks and error markers of all of
// them into its own DOM, and returns each page's self-check. The profile is made and
// removed in SCRATCH. A page with an error marker, no self-check, or an uncaught error
// on Chromium's log fails the test (its entry is then null).
std::vector<json> self_checks(const std::vector<Page>& pages, const std::string& scratch) {
  std::string frames;
  for (const Page& p : pages)
    frames += "<iframe width=\"1300\" height=\"700\" src=\"file://" + p.file + "#selfcheck=" +
              p.target + "\"></iframe>\n";
  const std::string harness = scratch + "/harness.html";
  std::ofstream(harness) << "<!DOCTYPE html><html><body>\n" << frames << R"(<script>
window.addEventListener('load', function () {
  var out = Array.prototype.map.call(document.querySelectorAll('iframe'), function (f) {
    var d = f.contentDocument;
    var text = function (id) { var e = d && d.getElementById(id); return e ? e.textContent : null; };
    return {reachable: !!d, check: text('utramp-selfcheck'), error: text('utramp-error')};
  });
  var pre = document.createElement('pre');
  pre.id = 'harness';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script></body></html>
)";
  const std::string profile = scratch + "/chromium-profile";
  test::RunOptions ro;
  ro.timeout_s = 240;
  // The harness reads its frames' documents: file:// pages are each an origin of their
  // own unless file access is allowed.
  const auto r = test::run_program(
      {chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + profile,
       "--no-first-run", "--no-default-browser-check", "--disable-extensions",
       "--disable-background-networking", "--disable-component-update", "--disable-sync",
       "--allow-file-access-from-files", "--enable-logging=stderr", "--v=0", "--dump-dom",
       "file://" + harness},
      ro);
  std::error_code ec;
  std::filesystem::remove_all(profile, ec);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("Uncaught"), std::string::npos) << r.err;
  std::vector<json> out(pages.size());
  const auto collected = element_text(r.out, "harness");
  if (!collected) {
    ADD_FAILURE() << "the harness wrote nothing:\n" << r.out.substr(0, 2000) << "\n" << r.err;
    return out;
  }
  const json all = json::parse(*collected);
  for (size_t i = 0; i < pages.size() && i < all.size(); ++i) {
    SCOPED_TRACE(pages[i].file);
    const json& p = all[i];
    EXPECT_TRUE(p["reachable"].get<bool>());
    EXPECT_TRUE(p["error"].is_null()) << p["error"];
    if (p["check"].is_string()) out[i] = json::parse(p["check"].get<std::string>());
    else ADD_FAILURE() << "no self-check";
  }
  return out;
}

const json& frame(const json& frames, const std::string& name) {
  for (const auto& f : frames)
    if (f["name"] == name) return f;
  ADD_FAILURE() << "no frame " << name;
  static const json none = json::object({{"px", -1}, {"left", -1}, {"shown", false}});
  return none;
}

// Every drawn frame inside its parent's box, at the same place before and after a zoom.
void expect_nested(const json& frames) {
  for (const auto& f : frames) {
    const int p = f["parent"];
    if (p < 0 || !f["shown"]) continue;
    const json& up = frames[static_cast<size_t>(p)];
    EXPECT_GE(f["left"].get<double>(), up["left"].get<double>() - 0.02) << f["name"];
    EXPECT_LE(f["left"].get<double>() + f["px"].get<double>(),
              up["left"].get<double>() + up["px"].get<double>() + 0.02)
        << f["name"];
  }
}

// The function table sorted by each column in turn: numbers largest first on the
// first click, names in order.
void expect_sorted(const json& sort) {
  ASSERT_FALSE(sort.empty());
  for (const auto& c : sort) {
    SCOPED_TRACE(c["column"].get<std::string>());
    const auto& v = c["values"];
    ASSERT_FALSE(v.empty());
    const bool numbers = v[0].is_number();
    EXPECT_EQ(c["order"], numbers ? "descending" : "ascending");
    for (size_t i = 1; i < v.size(); ++i) {
      if (numbers) EXPECT_GE(v[i - 1].get<double>(), v[i].get<double>());
      else EXPECT_LE(v[i - 1].get<std::string>(), v[i].get<std::string>());
    }
  }
}

// main 0..1000 { alpha 100..400 { gamma 150..250 } beta 500..900 { ns::Box<int&>::get
// 600..700 } }, and beta called once more from a second thread 0..200.
std::string synthetic(const std::string& dir) {
  test::Synth s;
  const uint32_t p = s.id(1);
  auto m = s.thread(p, p);
  m.in(0, "main", 0);
  m.in(100, "alpha", 1).leaf(150, 250, "gamma", 2).out(400, "alpha", 1);
  m.in(500, "beta", 1).leaf(600, 700, "_ZN2ns3BoxIRiE3getEv", 2).out(900, "beta", 1);
  m.out(1000, "main", 0);
  s.thread(p, s.id(2)).leaf(0, 200, "beta", 0);
  s.write(dir);
  return dir;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

void check_synthetic_svg(const json& c) {
  ASSERT_TRUE(c.is_object());
  const double W = c["width"];  // the root's width in pixels
  const json& before = c["before"];
  // all = main (1000) + the second thread's beta (200).
  EXPECT_NEAR(frame(before, "all")["px"].get<double>(), W, 0.05);
  EXPECT_NEAR(frame(before, "main")["px"].get<double>(), W * 1000 / 1200, 0.05);
  EXPECT_NEAR(frame(before, "alpha")["px"].get<double>(), W * 300 / 1200, 0.05);
  EXPECT_NEAR(frame(before, "gamma")["px"].get<double>(), W * 100 / 1200, 0.05);
  EXPECT_NEAR(frame(before, "ns::Box<int&>::get()")["px"].get<double>(), W * 100 / 1200, 0.05);
  EXPECT_EQ(frame(before, "alpha")["label"], "alpha");
  expect_nested(before);
  // Zoomed on alpha: alpha and gamma scaled to the full width, main and all below it,
  // beta hidden.
  const json& zoomed = c["zoomed"];
  EXPECT_NEAR(frame(zoomed, "alpha")["px"].get<double>(), W, 0.05);
  EXPECT_NEAR(frame(zoomed, "gamma")["px"].get<double>(), W * 100 / 300, 0.05);
  EXPECT_TRUE(frame(zoomed, "main")["shown"]);
  EXPECT_NEAR(frame(zoomed, "main")["px"].get<double>(), W, 0.05);
  EXPECT_FALSE(frame(zoomed, "beta")["shown"]);
  expect_nested(zoomed);
  // Search: alpha is 300 of 1200.
  EXPECT_NEAR(c["search"]["pct"].get<double>(), 25.0, 1e-6);
  EXPECT_EQ(c["search"]["text"], "Matched: 25.0%");
  EXPECT_EQ(c["search"]["coloured"], 1);
  EXPECT_EQ(c["after"], before);  // reset restores the drawing
}

void check_synthetic_html(const json& c) {
  ASSERT_TRUE(c.is_object());
  const json& fl = c["flame"];
  const double W = fl["width"];
  // The first frame named beta: the second thread's (sorted by name, beta < main).
  EXPECT_NEAR(frame(fl["before"], "beta")["px"].get<double>(), W * 200 / 1200, 0.05);
  EXPECT_NEAR(frame(fl["zoomed"], "beta")["px"].get<double>(), W, 0.05);
  // beta: 400 in main, 200 as the second thread's outermost call.
  EXPECT_NEAR(fl["search"]["pct"].get<double>(), 50.0, 1e-6);
  expect_nested(fl["before"]);
  expect_sorted(c["sort"]);
  // Calls, largest first: beta (2 calls) first; Total time: main first.
  for (const auto& col : c["sort"]) {
    if (col["column"] == "Calls") EXPECT_EQ(col["names"][0], "beta");
    if (col["column"] == "Total time") {
      EXPECT_EQ(col["names"][0], "main");
      EXPECT_EQ(col["values"][0], 1000);
    }
  }
  EXPECT_EQ(c["timelines"]["lanes"], 2);
  // Thread 1: main, then alpha and beta below it; thread 2: beta.
  EXPECT_EQ(c["timelines"]["bars"], 4);
}

void check_recorded(const json& f, const json& c, const std::string& dir) {
  ASSERT_TRUE(f.is_object());
  expect_nested(f["before"]);
  expect_nested(f["zoomed"]);
  EXPECT_NEAR(frame(f["zoomed"], "main")["px"].get<double>(), f["width"].get<double>(), 0.05);
  ASSERT_TRUE(c.is_object());
  expect_sorted(c["sort"]);
  // The table's functions and calls are `utramp report`'s.
  const auto text = test::run_cli({"report", "--sort", "name", dir});
  ASSERT_EQ(text.exit_code, 0);
  std::map<std::string, uint64_t> expected, shown;
  std::istringstream lines(text.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::vector<std::string> w;
    for (std::string x; in >> x;) w.push_back(x);
    // "1.234 us  0.2 us  ...  CALLS  NAME": the last two words (units make the rest vary).
    if (w.size() >= 6 && std::all_of(w[w.size() - 2].begin(), w[w.size() - 2].end(), ::isdigit))
      expected[w.back()] = std::stoull(w[w.size() - 2]);
  }
  for (const auto& col : c["sort"])
    if (col["column"] == "Calls")
      for (size_t i = 0; i < col["names"].size(); ++i)
        shown[col["names"][i].get<std::string>()] = col["values"][i].get<uint64_t>();
  EXPECT_FALSE(expected.empty());
  EXPECT_EQ(shown, expected);
  EXPECT_GE(c["timelines"]["lanes"].get<int>(), 1);
}

// One test, one browser: a synthetic trace with exact times, and a real recording (the
// fixture's `basic` scenario, whose output must be as without utramp), each rendered
// by `dump --flamegraph` and `report --html`.
TEST(FlameInChromium, FlameGraphsAndHtmlReports) {
  REQUIRE_CHROMIUM();
  test::TempDir tmp("utramp-flame");
  const std::string syn = synthetic(tmp.path + "/t");
  std::vector<Page> pages;
  auto render = [&](const std::vector<std::string>& args, const std::string& file,
                    const std::string& target) {
    const auto r = test::run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    write(tmp.path + "/" + file, r.out);
    pages.push_back({tmp.path + "/" + file, target});
  };
  render({"dump", "--flamegraph", "--demangle", "full", syn}, "syn.svg", "alpha");
  render({"report", "--html", syn}, "syn.html", "beta");
  const std::string html = slurp(tmp.path + "/syn.html");
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org"));  // nothing fetched
  EXPECT_EQ(html.find("https://"), std::string::npos);

  const std::string prog = std::string(UTRAMP_REC_DIR) + "/rec_gcc_O2_pfe";
  const bool recorded = access(prog.c_str(), X_OK) == 0;
  const std::string rec = tmp.path + "/rec";
  if (recorded) {
    const auto plain = test::run_program({prog, "basic"});
    const auto r = test::run_cli({"record", "-o", rec, "--", prog, "basic"});
    ASSERT_EQ(r.exit_code, plain.exit_code) << r.err;
    EXPECT_EQ(r.out, plain.out);
    render({"dump", "--flamegraph", "--per-thread", rec}, "rec.svg", "main");
    render({"report", "--html", rec}, "rec.html", "main");
  }
  const std::vector<json> checks = self_checks(pages, tmp.path);
  {
    SCOPED_TRACE("synthetic trace, dump --flamegraph");
    check_synthetic_svg(checks[0]);
  }
  {
    SCOPED_TRACE("synthetic trace, report --html");
    check_synthetic_html(checks[1]);
  }
  if (!recorded) GTEST_SKIP() << prog << " was not built (no gcc): the recorded case is skipped";
  SCOPED_TRACE("recorded fixture");
  check_recorded(checks[2], checks[3], rec);
}

}  // namespace
