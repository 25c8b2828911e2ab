// utramp run --metrics against Debian's real Prometheus server: the test starts
// `utramp run bpf/metrics_prom.bpf.o --metrics 127.0.0.1:0 -- metrics_target N STOP`,
// then a prometheus on loopback (a random free port, its own temporary storage, a
// scrape every second of the endpoint utramp printed), waits until the server has
// scraped what the target did, and compares the values its query API gives with the
// target's own count (it prints "calls N"). Everything started is stopped and reaped,
// and the temporary directory removed. Skipped only when there is no prometheus binary.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "prometheus.hpp"
#include "temp_dir.hpp"

namespace {

using utramp::test::Child;
using utramp::test::clock_type;
using utramp::test::kPrometheus;
using utramp::test::PromServer;
using Want = utramp::test::PromWant;

// Another address than loopback only when asked for: refused before the target starts.
TEST(PromE2E, PublicAddressNeedsItsFlag) {
  utramp::test::TempDir dir("utramp-prom");
  Child run({UTRAMP_CLI, "run", std::string(UTRAMP_BPF_BAD_DIR) + "/metrics_prom.bpf.o", "--metrics", "0.0.0.0:0",
             "--", UTRAMP_METRICS_TARGET, "1", dir.path + "/stop"});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for(30));
  EXPECT_TRUE(WIFEXITED(run.status()) && WEXITSTATUS(run.status()) == 2);
  EXPECT_NE(run.err.find("--metrics 0.0.0.0:0: 0.0.0.0 is not a loopback address"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("--metrics-public"), std::string::npos) << run.err;
  EXPECT_EQ(run.out.find("calls"), std::string::npos) << "the target ran: " << run.out;
}

TEST(PromE2E, PrometheusScrapesWhatTheTargetDid) {
  if (access(kPrometheus, X_OK) != 0)
    GTEST_SKIP() << kPrometheus << " is not installed (Debian package prometheus; scripts/install-deps.sh installs it)";
  utramp::test::TempDir dir("utramp-prom");
  const std::string stop = dir.path + "/stop";
  constexpr int kCalls = 300;
  const auto start = clock_type::now();

  Child run({UTRAMP_CLI, "run", std::string(UTRAMP_BPF_BAD_DIR) + "/metrics_prom.bpf.o", "--metrics",
             "127.0.0.1:0", "--", UTRAMP_METRICS_TARGET, std::to_string(kCalls), stop});
  ASSERT_TRUE(run.started());
  std::smatch m;
  const std::regex at(R"(metrics at http://127\.0\.0\.1:(\d+)/metrics)");
  ASSERT_TRUE(run.read_until(
      [&](const std::string& out, const std::string& err) {
        return std::regex_search(err, m, at) && out.find('\n') != std::string::npos;
      },
      start + std::chrono::seconds(20)))
      << "stdout: " << run.out << "\nstderr: " << run.err;
  const int port = std::stoi(m[1]);
  // The target's own count of its calls.
  int calls = -1;
  ASSERT_EQ(std::sscanf(run.out.c_str(), "calls %d", &calls), 1) << run.out;
  ASSERT_EQ(calls, kCalls);

  // prometheus on loopback, scraping that endpoint every second.
  PromServer prom(dir.path, port);
  ASSERT_TRUE(prom.started());

  // What the target did, as the maps must show it: n = 0..kCalls-1 each counted once.
  std::vector<Want> want{{"up{job=\"utramp\"}", 1}, {"utramp_global_total", double(calls)},
                         {"utramp_map_steps_total{key=\"0\"}", double(calls)},
                         {"utramp_map_arg_hist_count", double(calls)},
                         // log2 slots: le="7" holds n = 0..7
                         {"utramp_map_arg_hist_bucket{le=\"7\"}", 8},
                         {"utramp_map_arg_hist_bucket{le=\"+Inf\"}", double(calls)}};
  for (int mod = 0; mod < 3; ++mod) {
    for (int odd = 0; odd < 2; ++odd) {
      int n = 0;
      for (int i = 0; i < calls; ++i) n += (i % 3 == mod && (i & 1) == odd);
      want.push_back({"utramp_map_calls{mod=\"" + std::to_string(mod) + "\",kind=\"" + (odd ? "odd" : "even") + "\"}",
                      double(n)});
    }
    int n = 0;
    for (int i = 0; i < calls; ++i) n += i % 3 == mod;
    want.push_back({"utramp_map_hists_count{key=\"" + std::to_string(mod) + "\"}", double(n)});
  }
  want.push_back({"sum(utramp_map_hists_count)", double(calls)});
  want.push_back({"utramp_prog_runs_total{prog=\"on_step\"}", double(calls)});

  const std::string why = prom.wait_for(want, 12);
  EXPECT_TRUE(why.empty()) << why;

  // The target ends when told; run ends with it, and so does the endpoint.
  { std::ofstream(stop).put('\n'); }
  ASSERT_TRUE(run.wait_for(20)) << run.err;
  EXPECT_TRUE(WIFEXITED(run.status()) && WEXITSTATUS(run.status()) == 0) << run.err;
  httplib::Client gone("127.0.0.1", port);
  gone.set_connection_timeout(1);
  EXPECT_FALSE(gone.Get("/metrics")) << "the endpoint still answers after the target ended";
  kill(prom.child().pid(), SIGTERM);
  EXPECT_TRUE(prom.child().wait_for(10));
}

}  // namespace
