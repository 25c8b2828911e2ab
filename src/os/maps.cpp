#include "os/maps.hpp"

#include <fmt/format.h>

#include <link.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <cstddef>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace utramp::os {

Result<std::vector<Mapping>> read_maps(int pid) {
  const std::string path = pid ? fmt::format("/proc/{}/maps", pid) : "/proc/self/maps";
  FILE* f = fopen(path.c_str(), "re");
  if (!f) return make_error(Errc::io, fmt::format("cannot open {}: {}", path, strerror(errno)));
  std::vector<Mapping> out;
  char* line = nullptr;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0) {
    Mapping m;
    char perms[5] = {};
    unsigned long long start, end, off;
    int name_at = 0;
    if (sscanf(line, "%llx-%llx %4s %llx %*s %*s %n", &start, &end, perms, &off, &name_at) < 4)
      continue;
    m.start = start;
    m.end = end;
    m.offset = off;
    m.r = perms[0] == 'r';
    m.w = perms[1] == 'w';
    m.x = perms[2] == 'x';
    m.shared = perms[3] == 's';
    if (name_at > 0) {
      m.path = line + name_at;
      while (!m.path.empty() && (m.path.back() == '\n' || m.path.back() == ' ')) m.path.pop_back();
    }
    out.push_back(std::move(m));
  }
  free(line);
  fclose(f);
  return out;
}

namespace {
std::atomic<uint64_t> g_own_unmaps{0};
}  // namespace

void bump_unmap_generation() { g_own_unmaps.fetch_add(1, std::memory_order_relaxed); }

uint64_t unmap_generation() {
  uint64_t subs = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t size, void* data) {
        if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs))
          *static_cast<uint64_t*>(data) = info->dlpi_subs;
        return 1;  // the counters are the same in every entry: stop at the first
      },
      &subs);
  return (subs << 32) ^ g_own_unmaps.load(std::memory_order_relaxed);
}

namespace {
struct Copy {
  std::mutex mu;
  std::shared_ptr<const std::vector<Mapping>> maps;
  uint64_t gen = 0;
};
// Made on first use (the agent's constructors run before this file's), never destroyed:
// a detach may run from an exit handler after static destructors.
Copy& copy() {
  static Copy* c = new Copy();
  return *c;
}
}  // namespace

Result<std::shared_ptr<const std::vector<Mapping>>> maps_copy(bool fresh) {
  const uint64_t gen = unmap_generation();
  Copy& c = copy();
  std::lock_guard lock(c.mu);
  if (!fresh && c.maps && c.gen == gen) return c.maps;
  auto m = read_maps();
  if (!m) return std::move(m).error();
  c.maps = std::make_shared<const std::vector<Mapping>>(std::move(*m));
  c.gen = gen;
  return c.maps;
}

void note_mapping(const Mapping& m) {
  Copy& c = copy();
  std::lock_guard lock(c.mu);
  if (!c.maps) return;
  auto next = std::make_shared<std::vector<Mapping>>(*c.maps);
  // The kernel placed it where nothing is mapped: what the copy still shows there is gone.
  std::erase_if(*next, [&](const Mapping& x) { return x.start < m.end && m.start < x.end; });
  auto it = std::upper_bound(next->begin(), next->end(), m.start,
                             [](uint64_t a, const Mapping& x) { return a < x.start; });
  next->insert(it, m);
  c.maps = std::move(next);
}

const Mapping* find_mapping(const std::vector<Mapping>& maps, uint64_t addr) {
  auto it = std::upper_bound(maps.begin(), maps.end(), addr,
                             [](uint64_t a, const Mapping& m) { return a < m.start; });
  if (it == maps.begin()) return nullptr;
  --it;
  return it->contains(addr) ? &*it : nullptr;
}

bool range_executable(const std::vector<Mapping>& maps, uint64_t addr, uint64_t len) {
  uint64_t a = addr;
  while (a < addr + len) {
    const Mapping* m = find_mapping(maps, a);
    if (!m || !m->x) return false;
    a = m->end;
  }
  return true;
}

}  // namespace utramp::os
