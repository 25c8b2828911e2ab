// A synthetic trace written with TraceWriter, for the tests of the read-side CLI: events
// of any shape at exact times (ticks are ns), ids and addresses that depend on the run
// as real ones do.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "trace/trace_dir.hpp"

namespace utramp::test {

using namespace utramp::trace;

// A synthetic trace. Ids and addresses depend on the run (pid, ASLR), as real ones do.
struct Synth {
  uint32_t base = 100000 + static_cast<uint32_t>(getpid() % 80000) * 10;
  uint64_t abase = (reinterpret_cast<uint64_t>(&mix_anchor) & ~0xfffffull) + 0x100000;
  std::map<std::pair<uint32_t, uint32_t>, std::vector<Event>> events;
  std::map<std::string, uint64_t> addrs;
  std::vector<Function> functions;
  TraceInfo info;
  std::vector<ProcessInfo> processes;
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> lost;

  static void mix_anchor() {}

  uint32_t id(uint32_t k) const { return base + k; }
  uint64_t addr(const std::string& name) {
    auto it = addrs.find(name);
    if (it != addrs.end()) return it->second;
    const uint64_t a = abase + 0x100 * (addrs.size() + 1);
    functions.push_back({a, 0x80, name, "/usr/bin/app"});
    return addrs[name] = a;
  }
  uint64_t ptr(uint64_t off) const { return abase + 0x7f0000000000ull + off; }

  struct Thread {
    Synth* s;
    std::vector<Event>* v;
    uint64_t last = 0;
    Event& add(EventType type, uint64_t time, uint64_t addr, uint16_t depth, uint64_t data = 0,
               uint8_t flags = 0, uint32_t aux = 0) {
      v->push_back(Event{time, addr, data, depth, static_cast<uint8_t>(type), flags, aux});
      last = time;
      return v->back();
    }
    Thread& in(uint64_t t, const std::string& fn, uint16_t d, uint64_t caller = 0) {
      add(EventType::entry, t, s->addr(fn), d, caller);
      return *this;
    }
    Thread& out(uint64_t t, const std::string& fn, uint16_t d, EventType type = EventType::exit) {
      add(type, t, s->addr(fn), d);
      return *this;
    }
    Thread& ret(uint64_t t, const std::string& fn, uint16_t d, ValueFormat f, uint64_t value) {
      add(EventType::exit, t, s->addr(fn), d, value, static_cast<uint8_t>(f));
      return *this;
    }
    Thread& leaf(uint64_t t0, uint64_t t1, const std::string& fn, uint16_t d) {
      return in(t0, fn, d).out(t1, fn, d);
    }
    // An argument of the entry just added (time and addr of the call).
    Thread& arg(uint8_t index, ValueFormat f, uint64_t value) {
      const Event call = v->back();
      add(EventType::arg, call.time, call.addr, call.depth, value, static_cast<uint8_t>(f), index);
      return *this;
    }
    // The bytes of the string value just added: 16 per event in addr and data.
    Thread& str(const std::string& text, bool unreadable = false) {
      const Event call = v->back();
      const size_t len = text.size();
      for (size_t off = 0; off < len || off == 0; off += 16) {
        uint64_t w[2] = {0, 0};
        std::memcpy(w, text.data() + off, std::min<size_t>(16, len - off));
        add(EventType::string, call.time, w[0], call.depth, w[1], unreadable ? 1 : 0,
            static_cast<uint32_t>(len << 8 | off / 16));
        if (len == 0) break;
      }
      return *this;
    }
    Thread& marker(EventType type, uint64_t t, uint64_t data, uint16_t d) {
      add(type, t, 0, d, data);
      return *this;
    }
  };
  Thread thread(uint32_t pid, uint32_t tid) { return Thread{this, &events[{pid, tid}]}; }

  void write(const std::string& dir) {
    auto w = TraceWriter::create(dir);
    ASSERT_TRUE(w.ok()) << w.error().message;
    for (auto& [k, v] : events) ASSERT_TRUE(w->append(k.first, k.second, v).ok());
    for (auto& [k, n] : lost) w->add_lost(k.first, k.second, n);
    std::set<uint32_t> pids;
    for (auto& [k, v] : events) pids.insert(k.first);
    // Forked children have no table of their own: they use their parent's.
    for (uint32_t pid : pids) {
      bool child = false;
      for (auto& p : processes) child |= p.pid == pid && p.parent != 0;
      if (!child) {
        ASSERT_TRUE(write_functions_file(dir, pid, functions).ok());
      }
    }
    for (auto& p : processes) ASSERT_TRUE(write_process_file(dir, p).ok());
    if (info.command.empty()) info.command = {"/usr/bin/app", "--flag"};
    ASSERT_TRUE(w->write_info(info).ok());
  }
};

}  // namespace utramp::test
