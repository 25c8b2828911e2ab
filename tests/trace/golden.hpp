// Text goldens with masking, as uftrace's tests do: what varies from run to run
// (thread and process ids, addresses, and for real recordings the times) is replaced by
// stable placeholders, the result is compared with tests/trace/golden/NAME.txt, and a
// mismatch fails with a unified diff. UTRAMP_UPDATE_GOLDENS=1 rewrites the goldens.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"

namespace utramp::test {

struct MaskOptions {
  bool times = true;  // durations ("1.234 us"), Chrome "ts", folded weights
  bool ids = true;    // thread and process ids: T1, T2... in order of appearance
  bool addrs = true;  // 0x and 6+ hex digits: ADDR1, ADDR2... in order of appearance
  std::vector<std::pair<std::string, std::string>> literal;  // e.g. the trace dir -> DIR
  std::vector<std::string> known_ids;  // ids to mask wherever they appear, named first
};

namespace detail {

// Replaces every match of `re` (group 1 is the value) by a placeholder numbered in order
// of first appearance, padded to the width of what it replaces where `keep_width`.
inline std::string number_matches(const std::string& text, const std::regex& re,
                                  std::map<std::string, std::string>& names,
                                  const std::string& prefix, bool keep_width) {
  std::string out;
  auto it = std::sregex_iterator(text.begin(), text.end(), re);
  size_t pos = 0;
  for (; it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    const std::string value = m[1].str();
    auto [n, fresh] = names.try_emplace(value, prefix + std::to_string(names.size() + 1));
    (void)fresh;
    const size_t vpos = static_cast<size_t>(m.position(1));
    out.append(text, pos, vpos - pos);
    std::string rep = n->second;
    if (keep_width && rep.size() < value.size())
      rep = std::string(value.size() - rep.size(), ' ') + rep;
    out += rep;
    pos = vpos + value.size();
  }
  out.append(text, pos, std::string::npos);
  return out;
}

}  // namespace detail

inline std::string mask(std::string text, const MaskOptions& o = {}) {
  for (const auto& [from, to] : o.literal) {
    for (size_t p = 0; (p = text.find(from, p)) != std::string::npos; p += to.size())
      text.replace(p, from.size(), to);
  }
  if (o.ids) {
    // Ids are learnt where they certainly are ids, then replaced everywhere as words.
    std::map<std::string, std::string> ids;
    static const std::regex where(
        R"(\[ *(\d+)\]|child (\d+)|"pid":(\d+)|"tid":(\d+)|events-(\d+)-(\d+))");
    std::vector<std::string> order;
    for (const auto& id : o.known_ids)
      if (text.find(id) != std::string::npos && !ids.count(id)) {
        ids.emplace(id, "T" + std::to_string(ids.size() + 1));
        order.push_back(id);
      }
    for (auto it = std::sregex_iterator(text.begin(), text.end(), where);
         it != std::sregex_iterator(); ++it)
      for (size_t g = 1; g < it->size(); ++g)
        if ((*it)[g].matched && !ids.count((*it)[g].str())) {
          ids.emplace((*it)[g].str(), "T" + std::to_string(ids.size() + 1));
          order.push_back((*it)[g].str());
        }
    for (const auto& id : order) {
      const std::regex word("\\b" + id + "\\b(?!\\.\\d)");  // not a duration's digits
      const std::string& name = ids[id];
      std::string out;
      size_t pos = 0;
      for (auto it = std::sregex_iterator(text.begin(), text.end(), word);
           it != std::sregex_iterator(); ++it) {
        const size_t p = static_cast<size_t>(it->position(0));
        out.append(text, pos, p - pos);
        // Keep columns: pad the placeholder to the width of the id after a space or '['.
        std::string rep = name;
        const bool column = !out.empty() && (out.back() == ' ' || out.back() == '[');
        if (rep.size() < id.size() && column) rep = std::string(id.size() - rep.size(), ' ') + rep;
        out += rep;
        pos = p + id.size();
      }
      out.append(text, pos, std::string::npos);
      text = std::move(out);
    }
  }
  if (o.addrs) {
    std::map<std::string, std::string> addrs;
    static const std::regex hex(R"(\b0x([0-9a-f]{6,})\b)");
    text = detail::number_matches(text, hex, addrs, "ADDR", false);
  }
  if (o.times) {
    static const std::regex dur(R"(\d+\.\d{3} (ns|us|ms|s ))");
    text = std::regex_replace(text, dur, "#.### $1");
    static const std::regex ts(R"("ts":-?\d+\.\d+)");
    text = std::regex_replace(text, ts, "\"ts\":#");
  }
  return text;
}

// A test binary whose goldens live elsewhere defines UTRAMP_GOLDEN_DIR (relative to the
// source tree) before including this header.
#ifndef UTRAMP_GOLDEN_DIR
#define UTRAMP_GOLDEN_DIR "tests/trace/golden"
#endif

inline std::string golden_path(const std::string& name) {
  return std::string(UTRAMP_SOURCE_DIR) + "/" UTRAMP_GOLDEN_DIR "/" + name + ".txt";
}

inline bool update_goldens() {
  const char* v = getenv("UTRAMP_UPDATE_GOLDENS");
  return v && *v && std::string(v) != "0";
}

// Compares `actual` with the golden NAME (or rewrites it in update mode).
inline void expect_golden(const std::string& name, const std::string& actual) {
  const std::string path = golden_path(name);
  if (update_goldens()) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << actual;
    ASSERT_TRUE(f.good()) << "cannot write " << path;
    std::printf("rewrote %s\n", path.c_str());
    return;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "no golden " << path
                  << "; run with UTRAMP_UPDATE_GOLDENS=1 to create it. Output:\n"
                  << actual;
    return;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str() == actual) return;
  char tmpl[] = "/tmp/utramp-golden-XXXXXX";
  const int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  {
    std::ofstream f(tmpl, std::ios::binary);
    f << actual;
  }
  close(fd);
  const RunResult d = run_program({"/usr/bin/diff", "-u", path, tmpl});
  unlink(tmpl);
  ADD_FAILURE() << "output differs from " << path << " (UTRAMP_UPDATE_GOLDENS=1 rewrites it):\n"
                << d.out << d.err;
}

}  // namespace utramp::test
