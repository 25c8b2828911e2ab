// The flame graph's layout and drawing (tools/utramp/flame.*) on call trees made by
// hand, the call tree built from a synthetic trace (tools/utramp/call_tree.*), and the
// options of `dump --flamegraph` through the CLI. Drawn in a browser:
// tests/record/flame_e2e_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "call_tree.hpp"
#include "cli_runner.hpp"
#include "flame.hpp"
#include "synth_trace.hpp"
#include "ring_util.hpp"

using namespace utramp;
using namespace utramp::cli;

namespace {

CallNode* add(CallNode& parent, const std::string& name, double self_ns, uint64_t calls = 1) {
  CallNode* n = parent.child(name);
  n->self_ns += self_ns;
  n->calls += calls;
  return n;
}

// all { main(10) { b(60) { c(20) } a(30) } }: children added out of name order.
struct Tree {
  CallNode root;
  CallNode *main, *a, *b, *c;
  Tree() {
    root.name = "all";
    main = add(root, "main", 10);
    b = add(*main, "b", 60, 3);
    c = add(*b, "c", 20, 7);
    a = add(*main, "a", 30, 2);
  }
};

const FlameFrame& frame(const FlameLayout& l, const std::string& name) {
  for (const auto& f : l.frames)
    if (f.node->name == name) return f;
  ADD_FAILURE() << "no frame " << name;
  return l.frames[0];
}

TEST(FlameLayout, WidthsAreProportionalToTimeAndChildrenSitWithinParents) {
  Tree t;
  const FlameLayout l = layout_flame(t.root, FlameWeight::time, 0);
  EXPECT_DOUBLE_EQ(l.total, 120);
  ASSERT_EQ(l.frames.size(), 5u);
  EXPECT_EQ(l.max_depth, 3u);
  EXPECT_EQ(l.omitted, 0u);
  EXPECT_EQ(l.frames[0].node, &t.root);
  EXPECT_DOUBLE_EQ(l.frames[0].w, 1);
  // Width = own self time plus the children's, as a fraction of the root.
  EXPECT_DOUBLE_EQ(frame(l, "main").w, 120.0 / 120);
  EXPECT_DOUBLE_EQ(frame(l, "a").w, 30.0 / 120);
  EXPECT_DOUBLE_EQ(frame(l, "b").w, 80.0 / 120);
  EXPECT_DOUBLE_EQ(frame(l, "c").w, 20.0 / 120);
  // Sorted by name, whatever the order seen: a left of b.
  EXPECT_DOUBLE_EQ(frame(l, "a").x, 0);
  EXPECT_DOUBLE_EQ(frame(l, "b").x, 30.0 / 120);
  EXPECT_DOUBLE_EQ(frame(l, "c").x, 30.0 / 120);
  for (size_t i = 1; i < l.frames.size(); ++i) {
    const FlameFrame& f = l.frames[i];
    ASSERT_GE(f.parent, 0);
    const FlameFrame& p = l.frames[static_cast<size_t>(f.parent)];
    EXPECT_EQ(f.depth, p.depth + 1) << f.node->name;
    EXPECT_GE(f.x, p.x - 1e-12) << f.node->name;
    EXPECT_LE(f.x + f.w, p.x + p.w + 1e-12) << f.node->name;
    // Depth-first: a frame's parent comes before it.
    EXPECT_LT(static_cast<size_t>(f.parent), i);
  }
}

TEST(FlameLayout, SameTreeSameLayoutWhateverTheOrderSeen) {
  Tree t;
  CallNode other;
  other.name = "all";
  CallNode* m = add(other, "main", 10);
  add(*m, "a", 30, 2);
  add(*add(*m, "b", 60, 3), "c", 20, 7);
  const FlameLayout l1 = layout_flame(t.root, FlameWeight::time, 0);
  const FlameLayout l2 = layout_flame(other, FlameWeight::time, 0);
  ASSERT_EQ(l1.frames.size(), l2.frames.size());
  for (size_t i = 0; i < l1.frames.size(); ++i) {
    EXPECT_EQ(l1.frames[i].node->name, l2.frames[i].node->name);
    EXPECT_EQ(l1.frames[i].x, l2.frames[i].x);
    EXPECT_EQ(l1.frames[i].w, l2.frames[i].w);
  }
  EXPECT_EQ(flame_svg(l1, {}, true), flame_svg(l2, {}, true));
}

TEST(FlameLayout, NarrowFramesAreLeftOutButKeepTheirPlace) {
  Tree t;
  add(*t.main, "0_tiny", 0.01);  // sorts first: the others must not move
  const FlameLayout all = layout_flame(t.root, FlameWeight::time, 0);
  const FlameLayout l = layout_flame(t.root, FlameWeight::time, 0.001);
  EXPECT_EQ(all.frames.size(), 6u);
  EXPECT_EQ(l.frames.size(), 5u);
  EXPECT_EQ(l.omitted, 1u);
  EXPECT_DOUBLE_EQ(frame(l, "a").x, frame(all, "a").x);
  EXPECT_GT(frame(l, "a").x, 0);
}

TEST(FlameLayout, WeightByCalls) {
  Tree t;
  const FlameLayout l = layout_flame(t.root, FlameWeight::calls, 0);
  EXPECT_DOUBLE_EQ(l.total, 1 + 3 + 7 + 2);
  EXPECT_DOUBLE_EQ(frame(l, "b").weight, 10);
  EXPECT_DOUBLE_EQ(frame(l, "b").w, 10.0 / 13);
}

TEST(FlameLayout, EmptyTreeIsOneRoot) {
  CallNode root;
  root.name = "all";
  const FlameLayout l = layout_flame(root, FlameWeight::time, 0.001);
  EXPECT_EQ(l.frames.size(), 1u);
  EXPECT_EQ(l.total, 0);
}

TEST(FlameLayout, InvertedPutsSelfTimeAtTheBottomAndCallersAbove) {
  CallNode root;
  root.name = "all";
  CallNode* m = add(root, "main", 1);
  add(*add(*m, "a", 0), "leaf", 5, 2);
  add(*add(*m, "b", 3), "leaf", 7, 4);
  const auto inv = inverted(root);
  const FlameLayout l = layout_flame(*inv, FlameWeight::time, 0);
  EXPECT_DOUBLE_EQ(l.total, 16);  // all self time, once
  ASSERT_EQ(inv->children.size(), 3u);  // leaf, main, b (a has none of its own)
  const CallNode* leaf = inv->child("leaf");
  EXPECT_EQ(leaf->calls, 6u);
  EXPECT_DOUBLE_EQ(flame_weight(*leaf, FlameWeight::time), 12);
  EXPECT_DOUBLE_EQ(flame_weight(*leaf->children[0], FlameWeight::time), 5);  // a: first seen
  EXPECT_EQ(leaf->children[0]->name, "a");
  EXPECT_EQ(leaf->children[0]->children[0]->name, "main");
  EXPECT_DOUBLE_EQ(flame_weight(*inv->child("b"), FlameWeight::time), 3);
  EXPECT_EQ(inv->child("b")->children[0]->name, "main");
}

TEST(FlameSvg, EscapesNamesAndKeepsUtf8) {
  EXPECT_EQ(xml_escape("std::vector<int, A&>::operator<"),
            "std::vector&lt;int, A&amp;&gt;::operator&lt;");
  EXPECT_EQ(xml_escape("say \"it's\""), "say &quot;it&#39;s&quot;");
  EXPECT_EQ(xml_escape("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x94\xA5"),
            "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x94\xA5");
  const std::string bad = "\xEF\xBF\xBD";
  EXPECT_EQ(xml_escape(std::string("a\x01z")), "a" + bad + "z");     // control character
  EXPECT_EQ(xml_escape("a\xFFz"), "a" + bad + "z");                  // not UTF-8
  EXPECT_EQ(xml_escape("\xC0\xAF"), bad + bad);                      // overlong '/'
  EXPECT_EQ(xml_escape("\xED\xA0\x80"), bad + bad + bad);            // a surrogate
  EXPECT_EQ(xml_escape("\xE2\x82"), bad + bad);                      // cut short
  EXPECT_EQ(xml_escape("\xF4\x90\x80\x80"), bad + bad + bad + bad);  // past U+10FFFF
}

TEST(FlameSvg, DrawsEachFrameWithItsGeometryAndEscapedName) {
  CallNode root;
  root.name = "all";
  CallNode* m = add(root, "main", 100);
  add(*m, "ns::Box<int&>::get", 300);
  add(*m, "f\x01", 600);
  FlameOptions o;
  o.title = "T<&>";
  o.width = 1020;  // 1000 pixels inside the margins
  const FlameLayout l = layout_flame(root, FlameWeight::time, 0);
  const std::string svg = flame_svg(l, o, false);
  EXPECT_EQ(svg.find("Box<int"), std::string::npos);
  EXPECT_NE(svg.find("data-n=\"ns::Box&lt;int&amp;&gt;::get\""), std::string::npos);
  EXPECT_NE(svg.find(">T&lt;&amp;&gt;</text>"), std::string::npos);
  EXPECT_EQ(svg.find('\x01'), std::string::npos);
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  // Each frame's rectangle: x and width in pixels from the layout.
  const std::regex re(
      R"re(<g class="f" data-d="(\d+)"[^>]*data-n="([^"]*)"><title>[^<]*</title><rect x="([0-9.]+)" y="(\d+)" width="([0-9.]+)")re");
  std::map<std::string, std::pair<double, double>> seen;
  std::map<std::string, int> ys;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator(); ++it)
    seen[(*it)[2]] = {std::stod((*it)[3]), std::stod((*it)[5])}, ys[(*it)[2]] = std::stoi((*it)[4]);
  ASSERT_EQ(seen.size(), 4u) << svg;
  EXPECT_NEAR(seen["all"].second, 1000, 0.01);
  EXPECT_NEAR(seen["main"].second, 1000, 0.01);
  EXPECT_NEAR(seen["ns::Box&lt;int&amp;&gt;::get"].second, 300, 0.01);
  EXPECT_NEAR(seen["f\xEF\xBF\xBD"].second, 600, 0.01);
  EXPECT_NEAR(seen["f\xEF\xBF\xBD"].first, 10, 0.01);  // "f\x01" < "ns::..."
  EXPECT_NEAR(seen["ns::Box&lt;int&amp;&gt;::get"].first, 610, 0.01);
  // A flame graph grows up; an icicle down.
  EXPECT_LT(ys["main"], ys["all"]);
  o.icicle = true;
  const std::string ice = flame_svg(l, o, false);
  EXPECT_GT(ice.find("data-n=\"main\""), 0u);
  std::smatch mm, ma;
  ASSERT_TRUE(std::regex_search(ice, mm, std::regex(R"re(data-n="main"><title>[^<]*</title><rect x="[0-9.]+" y="(\d+)")re")));
  ASSERT_TRUE(std::regex_search(ice, ma, std::regex(R"re(data-n="all"><title>[^<]*</title><rect x="[0-9.]+" y="(\d+)")re")));
  EXPECT_GT(std::stoi(mm[1]), std::stoi(ma[1]));
  // The standalone document carries the script, which must not end its CDATA early.
  const std::string doc = flame_svg_document(l, o);
  EXPECT_EQ(doc.rfind("<?xml", 0), 0u);
  EXPECT_EQ(std::string(flame_script()).find("]]>"), std::string::npos);
  EXPECT_EQ(std::string(flame_script()).find("</script"), std::string::npos);
}

TEST(FlameSvg, ColoursAreStableAndWarm) {
  EXPECT_EQ(flame_colour("main"), flame_colour(std::string("ma") + "in"));
  EXPECT_NE(flame_colour("main"), flame_colour("mainx"));
  const std::regex rgb(R"(rgb\((\d+),(\d+),(\d+)\))");
  for (const char* n : {"main", "a", "std::sort", "", "\xFF"}) {
    std::smatch m;
    const std::string c = flame_colour(n);
    ASSERT_TRUE(std::regex_match(c, m, rgb)) << c;
    EXPECT_GE(std::stoi(m[1]), 205);
    EXPECT_GE(std::stoi(m[1]), std::stoi(m[2]));
    EXPECT_GE(std::stoi(m[2]), std::stoi(m[3]));
  }
}

// The builder on a real walk: paths merged, recursion one level deeper, self time less
// the callees', a call whose exit is missing untimed, threads grouped.
TEST(CallTree, BuiltFromATrace) {
  test::TempDir tmp;
  test::Synth s;
  const uint32_t p = s.id(1), w = s.id(2);
  auto m = s.thread(p, p);
  m.in(0, "main", 0);
  m.in(10, "rec", 1).in(20, "rec", 2).out(50, "rec", 2).out(60, "rec", 1);
  m.in(100, "rec", 1).out(110, "rec", 1);
  m.out(200, "main", 0);
  auto k = s.thread(p, w);
  k.in(5, "worker", 0).in(10, "rec", 1);  // never returns
  const std::string dir = tmp / "t";
  s.write(dir);
  auto r = trace::TraceReader::open(dir);
  ASSERT_TRUE(r.ok()) << r.error().message;
  Names names(*r, symbols::Style::simple);
  const ThreadSelection everyone({}, {});
  for (Grouping g : {Grouping::none, Grouping::thread}) {
    CallNode root;
    CallTreeBuilder b(*r, names, grouped_root(root, *r, everyone, g));
    Walker walker(b);
    walker.run(*r, false);
    CallNode* top = &root;
    if (g == Grouping::thread) {
      ASSERT_EQ(root.children.size(), 2u);
      top = root.child(std::to_string(p) + "/" + std::to_string(p) + " (app)");
      EXPECT_EQ(root.child(std::to_string(p) + "/" + std::to_string(w) + " (app)")->children.size(), 1u);
    } else {
      ASSERT_EQ(root.children.size(), 2u);  // main, worker
    }
    CallNode* main = top->child("main");
    EXPECT_EQ(main->calls, 1u);
    EXPECT_DOUBLE_EQ(main->total_ns, 200);
    EXPECT_DOUBLE_EQ(main->self_ns, 200 - 50 - 10);
    CallNode* rec = main->child("rec");
    EXPECT_EQ(rec->calls, 2u);
    EXPECT_DOUBLE_EQ(rec->total_ns, 60);
    EXPECT_DOUBLE_EQ(rec->self_ns, 20 + 10);
    EXPECT_EQ(rec->child("rec")->calls, 1u);
    EXPECT_DOUBLE_EQ(rec->child("rec")->total_ns, 30);
    EXPECT_TRUE(rec->timed);
    if (g == Grouping::none) {
      CallNode* worker = root.child("worker");
      EXPECT_FALSE(worker->timed);
      EXPECT_FALSE(worker->child("rec")->timed);
      EXPECT_EQ(worker->child("rec")->calls, 1u);
      EXPECT_DOUBLE_EQ(worker->total_ns, 0);
    }
  }
  // A thread the selection leaves out is not in the tree.
  const ThreadSelection one({w}, {});
  CallNode root;
  CallTreeBuilder b(*r, names, grouped_root(root, *r, one, Grouping::none));
  Walker walker(b);
  walker.run(*r, false);
  ASSERT_EQ(root.children.size(), 1u);
  EXPECT_EQ(root.children[0]->name, "worker");
}

// The CLI's options: what goes together, per-thread stacks, the inverted graph.
TEST(FlameCli, OptionsAndGrouping) {
  test::TempDir tmp;
  test::Synth s;
  const uint32_t p = s.id(1), w = s.id(2);
  s.thread(p, p).in(0, "main", 0).leaf(10, 40, "work", 1).out(100, "main", 0);
  s.thread(p, w).in(0, "worker", 0).leaf(10, 30, "work", 1).out(50, "worker", 0);
  const std::string dir = tmp / "t";
  s.write(dir);
  auto refused = [&](std::vector<std::string> args, const std::string& why) {
    args.push_back(dir);
    const auto r = test::run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args[1];
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty());
  };
  refused({"dump", "--flamegraph", "--by", "self", "--count"}, "not with --count");
  refused({"dump", "--flamegraph", "--by", "calls"}, "unknown --by 'calls'");
  refused({"dump", "--per-thread"}, "go with --folded or --flamegraph");
  refused({"dump", "--chrome", "--flamegraph"}, "--chrome and --flamegraph exclude each other");
  refused({"dump", "--folded", "--icicle"}, "go with --flamegraph");
  refused({"dump", "--flamegraph", "--per-thread", "--per-process"}, "exclude each other");
  refused({"report", "--html", "--hist", "main"}, "--html and --hist exclude each other");

  // Folded stacks per thread: the thread first, self times in ns.
  const auto folded = test::run_cli({"dump", "--folded", "--per-thread", dir});
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  const std::string t1 = std::to_string(p) + "/" + std::to_string(p) + " (app)";
  const std::string t2 = std::to_string(p) + "/" + std::to_string(w) + " (app)";
  EXPECT_EQ(folded.out, t1 + ";main 70\n" + t1 + ";main;work 30\n" + t2 + ";worker 30\n" + t2 +
                            ";worker;work 20\n");
  // Only the second thread.
  const auto one = test::run_cli({"dump", "--folded", "--tid", std::to_string(w), dir});
  EXPECT_EQ(one.out, "worker 30\nworker;work 20\n");
  // A thread with no calls: no graph, and why.
  const auto none = test::run_cli({"dump", "--flamegraph", "--tid", "1", dir});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("no timed calls in the threads chosen"), std::string::npos) << none.err;
  // Inverted: work's self time (50) at the bottom with main and worker above it.
  const auto inv = test::run_cli({"dump", "--flamegraph", "--by", "self", dir});
  ASSERT_EQ(inv.exit_code, 0) << inv.err;
  const std::regex frame_re(R"re(<g class="f" data-d="(\d+)" data-x="[^"]*" data-w="([^"]*)" data-p="-?\d+" data-n="([^"]*)")re");
  std::vector<std::tuple<int, double, std::string>> frames;
  for (auto it = std::sregex_iterator(inv.out.begin(), inv.out.end(), frame_re);
       it != std::sregex_iterator(); ++it)
    frames.emplace_back(std::stoi((*it)[1]), std::stod((*it)[2]), (*it)[3]);
  using F = std::tuple<int, double, std::string>;
  const std::vector<F> expected = {F{0, 1.0, "all"},          F{1, 70.0 / 150, "main"},
                                   F{1, 50.0 / 150, "work"},  F{2, 30.0 / 150, "main"},
                                   F{2, 20.0 / 150, "worker"}, F{1, 30.0 / 150, "worker"}};
  ASSERT_EQ(frames.size(), expected.size()) << inv.out;
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_EQ(std::get<0>(frames[i]), std::get<0>(expected[i])) << i;
    EXPECT_NEAR(std::get<1>(frames[i]), std::get<1>(expected[i]), 1e-9) << i;
    EXPECT_EQ(std::get<2>(frames[i]), std::get<2>(expected[i])) << i;
  }
}

}  // namespace
