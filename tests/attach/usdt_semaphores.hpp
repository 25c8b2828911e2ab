// The USDT semaphores of a running process's program, read from its memory
// (/proc/PID/mem at each note's semaphore plus the load bias): what the run -p tests
// check while a USDT program is attached and after it is taken away.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <string>

#include "ebpf/usdt.hpp"
#include "os/elf_file.hpp"
#include "text_vs_file.hpp"

namespace utramp::test {

// "PROVIDER:NAME" -> the value of that probe's semaphore in process PID now, for each
// probe of PATH (the process's program) that has one; empty when they cannot be read.
inline std::map<std::string, uint16_t> usdt_semaphores(pid_t pid, const std::string& path) {
  std::map<std::string, uint16_t> out;
  auto elf = utramp::os::ElfFile::open(path);
  if (!elf) return out;
  const auto notes = utramp::ebpf::read_usdt_notes(**elf);
  const std::optional<uint64_t> bias = load_bias(pid, **elf);
  if (!notes || !bias) return out;
  const int fd = open(fmt::format("/proc/{}/mem", pid).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  for (const utramp::ebpf::UsdtSite& s : *notes) {
    uint16_t v = 0;
    if (s.semaphore && pread(fd, &v, sizeof v, static_cast<off_t>(*bias + s.semaphore)) == sizeof v)
      out[s.provider + ":" + s.name] = v;
  }
  close(fd);
  return out;
}

}  // namespace utramp::test
