// Flame graphs of a CallNode tree: the layout (pure arithmetic, unit-tested), and an
// interactive SVG drawn from it with its script (zoom on click, reset, search with the
// share of time matched, tooltips). `dump --flamegraph` writes the SVG alone; `report
// --html` puts the same SVG and script into its page.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "call_tree.hpp"

namespace utramp::cli {

enum class FlameWeight : uint8_t {
  time,   // a frame's width: its self time plus its children's widths (= its total time)
  calls,  // the same with the number of calls ending in it (the function tracer's only)
};

// One frame: a node at DEPTH (the root is 0), X and W fractions of the root's width.
// Frames are in depth-first order, children sorted by name, each child placed right
// after its elder siblings from its parent's left edge: the layout depends on nothing
// but the tree.
struct FlameFrame {
  const CallNode* node = nullptr;
  uint32_t depth = 0;
  double x = 0, w = 0;
  double weight = 0;  // in the weight's unit (ns or calls)
  int32_t parent = -1;  // index of the parent frame, -1 for the root
};

struct FlameLayout {
  std::vector<FlameFrame> frames;  // frames[0] is the root
  double total = 0;                // the root's weight
  uint32_t max_depth = 0;
  uint64_t omitted = 0;  // frames left out as narrower than min_fraction (with what is above them)
};

// Frames narrower than MIN_FRACTION of the root are left out, with their children.
FlameLayout layout_flame(const CallNode& root, FlameWeight weight, double min_fraction);

// The weight of a node, its own and its children's.
double flame_weight(const CallNode& n, FlameWeight weight);

struct FlameOptions {
  std::string title = "Flame graph";
  std::string subtitle;  // e.g. the command line
  FlameWeight weight = FlameWeight::time;
  bool inverted = false;  // the tree is inverted(): tooltips say so
  bool icicle = false;    // the root at the top, callees below
  int width = 1200;       // pixels
};

// The <svg> element (no XML declaration), with its script when WITH_SCRIPT; the script's
// entry point is flame_script()'s utrampFlame(svg).
std::string flame_svg(const FlameLayout& l, const FlameOptions& o, bool with_script);
// A standalone SVG file: the XML declaration and the <svg> with its script.
std::string flame_svg_document(const FlameLayout& l, const FlameOptions& o);
// The script that makes a flame SVG interactive (no "</script>" or "]]>" inside).
const char* flame_script();

// S with &, <, >, " and ' escaped for XML text and attributes; bytes that are not UTF-8
// become U+FFFD, control characters (which XML 1.0 forbids) U+FFFD too.
std::string xml_escape(const std::string& s);
// The label that fits PX pixels of monospace text: the name, or its start and "..", or
// nothing.
std::string flame_label(const std::string& name, double px);
// A colour from a stable hash of the name: the same function has the same colour in
// every graph and every run ("rgb(r,g,b)", warm hues as flame graphs use).
std::string flame_colour(const std::string& name);

}  // namespace utramp::cli
