// See perf_map.hpp.
#include "os/perf_map.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "os/file.hpp"

namespace utramp::os {
namespace {

constexpr int kPerfUnset = -1;
std::atomic<int> g_perf_map{kPerfUnset};

}  // namespace

void set_perf_map(bool on) { g_perf_map.store(on ? 1 : 0, std::memory_order_relaxed); }

bool perf_map_enabled() {
  int v = g_perf_map.load(std::memory_order_relaxed);
  if (v == kPerfUnset) {
    const char* env = std::getenv("UTRAMP_PERF_MAP");
    const int from_env = env && std::string_view(env) == "1" ? 1 : 0;
    // A concurrent set_perf_map() wins over the environment.
    if (g_perf_map.compare_exchange_strong(v, from_env, std::memory_order_relaxed)) v = from_env;
  }
  return v == 1;
}

void perf_map_append(uint64_t start, uint64_t size, std::string_view name) {
  std::string line = fmt::format("{:x} {:x} ", start, size);
  for (char c : name) line.push_back(c == '\n' || c == '\r' || c == '\0' ? '_' : c);
  line.push_back('\n');
  auto fd = open_append_at(AT_FDCWD, "", fmt::format("/tmp/perf-{}.map", getpid()));
  if (!fd) return;
  [[maybe_unused]] const ssize_t n = write(*fd, line.data(), line.size());
  close(*fd);
}

}  // namespace utramp::os
