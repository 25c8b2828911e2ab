// What the map tests (maps_test.cpp, maps_stress_test.cpp) share: a map file's path,
// removed when the test ends.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <string>

namespace utramp::ebpf::test {

struct TmpFile {
  std::string path;
  TmpFile() {
    char t[] = "/tmp/utramp-maps-test-XXXXXX";
    const int fd = mkstemp(t);
    close(fd);
    path = t;
  }
  ~TmpFile() { unlink(path.c_str()); }
  TmpFile(const TmpFile&) = delete;
  TmpFile& operator=(const TmpFile&) = delete;
};

}  // namespace utramp::ebpf::test
