// A scratch directory for a test that runs the CLI: made under /tmp on construction,
// removed with all it holds on destruction.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace utramp::test {

struct TempDir {
  std::string path;
  // PREFIX names the test in the directory's name: /tmp/PREFIX-XXXXXX.
  explicit TempDir(const std::string& prefix) {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace utramp::test
