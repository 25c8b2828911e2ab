// `utramp run OBJECT -p PID --json` in the background, for the attach tests
// (run_pid_test.cpp, clients_test.cpp), and the counts its object's `calls_total` map
// held at the end.
#pragma once

#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "counter_fixture.hpp"

namespace utramp::test {

class Runner : public AttachedCli {
 public:
  Runner(const std::string& object, pid_t target, const std::string& out, const std::vector<std::string>& args = {})
      : AttachedCli({"run", object}, target, with_json(args), out + ".err", out), out_(out) {}
  // The map's counts as printed at the end: {key 0's, key 1's} (-1: not printed).
  std::pair<long, long> counts() const {
    std::pair<long, long> c{-1, -1};
    std::istringstream in(read_file(out_));
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_object() || j.value("name", "") != "calls_total") continue;
      c = {0, 0};
      for (const nlohmann::json& e : j.at("entries"))
        (e.at("key") == 0 ? c.first : c.second) = e.at("value").get<long>();
    }
    return c;
  }

 private:
  static std::vector<std::string> with_json(std::vector<std::string> a) {
    a.push_back("--json");
    return a;
  }
  std::string out_;
};

}  // namespace utramp::test
