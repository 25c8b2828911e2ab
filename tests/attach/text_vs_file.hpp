// How far a running process's code is from its file's: what every attach test checks
// after a detach (docs/attach.md: the process's .text equals its file's, byte for byte).
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "os/elf_file.hpp"

namespace utramp::test {

// Where the program ELF is loaded in process PID (0 for a fixed-address executable),
// from /proc/PID/maps; nullopt when it cannot be told.
inline std::optional<uint64_t> load_bias(pid_t pid, const utramp::os::ElfFile& elf) {
  if (!elf.is_dyn()) return 0;
  char real[4096];
  const ssize_t n = readlink(fmt::format("/proc/{}/exe", pid).c_str(), real, sizeof real - 1);
  if (n <= 0) return std::nullopt;
  const std::string exe(real, static_cast<size_t>(n));
  std::ifstream maps(fmt::format("/proc/{}/maps", pid));
  for (std::string line; std::getline(maps, line);) {
    unsigned long lo = 0, off = 0;
    if (line.size() > exe.size() && line.ends_with(exe) && sscanf(line.c_str(), "%lx-%*x %*s %lx", &lo, &off) == 2 &&
        off == 0)
      return lo - (elf.first_load_vaddr() & ~uint64_t{0xfff});
  }
  return std::nullopt;
}

// How many bytes of the program's .text in process PID differ from its file's, and the
// first few places (from /proc/PID/mem; the load bias from /proc/PID/maps).
struct TextDiff {
  size_t bytes = 0;
  std::string where;
  bool read = false;
};
TextDiff text_vs_file(pid_t pid, const std::string& path) {
  TextDiff d;
  auto elf = utramp::os::ElfFile::open(path);
  if (!elf) return d;
  const utramp::os::ElfSection* text = (*elf)->section(".text");
  if (!text) return d;
  const std::optional<uint64_t> b = load_bias(pid, **elf);
  if (!b) return d;
  const uint64_t bias = *b;
  const auto file = (*elf)->bytes_at(text->addr, text->size);
  std::vector<uint8_t> mem(text->size);
  const int fd = open(fmt::format("/proc/{}/mem", pid).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return d;
  const ssize_t got = pread(fd, mem.data(), mem.size(), static_cast<off_t>(bias + text->addr));
  close(fd);
  if (got != static_cast<ssize_t>(mem.size()) || file.size() != mem.size()) return d;
  d.read = true;
  for (size_t i = 0; i < mem.size(); ++i)
    if (mem[i] != file[i]) {
      if (d.bytes < 4) d.where += fmt::format(" .text+{:#x} ({:02x}, file {:02x})", i, mem[i], file[i]);
      ++d.bytes;
    }
  return d;
}

}  // namespace utramp::test
