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

#include "temp_dir.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

const char* const kPrometheus = "/usr/bin/prometheus";

// A child with stdout and stderr on pipes (read here), stdin from /dev/null; stopped with
// SIGTERM (then SIGKILL) and reaped when destroyed.
class Child {
 public:
  explicit Child(const std::vector<std::string>& args, const std::string& log = "") {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return;
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      const int in = open("/dev/null", O_RDONLY);
      dup2(in, STDIN_FILENO);
      if (!log.empty()) {  // a server's chatter goes to a file, not a pipe nobody drains
        const int l = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(l, STDOUT_FILENO);
        dup2(l, STDERR_FILENO);
      } else {
        dup2(out[1], STDOUT_FILENO);
        dup2(err[1], STDERR_FILENO);
      }
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    close(err[1]);
    out_ = out[0];
    err_ = err[0];
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGTERM);
      if (!wait_for(10)) {
        kill(pid_, SIGKILL);
        (void)wait_for(10);
      }
    }
    if (out_ >= 0) close(out_);
    if (err_ >= 0) close(err_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  // Reads both pipes until `done(out, err)` or the deadline; false on timeout.
  template <typename F>
  bool read_until(F done, clock_type::time_point deadline) {
    while (!done(out, err)) {
      if (clock_type::now() >= deadline) return false;
      pollfd p[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
      if (poll(p, 2, 50) <= 0) continue;
      char buf[4096];
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP))) continue;
        const ssize_t n = read(p[i].fd, buf, sizeof buf);
        if (n > 0) (i ? err : out).append(buf, size_t(n));
      }
    }
    return true;
  }
  // Waits (reading its output) at most `seconds` for it to end; its wait status.
  bool wait_for(int seconds) {
    const auto deadline = clock_type::now() + std::chrono::seconds(seconds);
    for (;;) {
      const pid_t r = waitpid(pid_, &status_, WNOHANG);
      if (r == pid_) {
        reaped_ = true;
        drain();
        return true;
      }
      if (clock_type::now() >= deadline) return false;
      (void)read_until([](const std::string&, const std::string&) { return false; },
                       clock_type::now() + std::chrono::milliseconds(20));
    }
  }
  int status() const { return status_; }
  // What is left in the pipes once it ended (until EOF, or 2 s: a child of its own
  // may still hold them).
  void drain() {
    const auto deadline = clock_type::now() + std::chrono::seconds(2);
    for (int* fd : {&out_, &err_}) {
      char buf[4096];
      while (clock_type::now() < deadline) {
        pollfd p{*fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        const ssize_t n = read(*fd, buf, sizeof buf);
        if (n <= 0) break;
        (fd == &out_ ? out : err).append(buf, size_t(n));
      }
    }
  }

  std::string out, err;

 private:
  pid_t pid_ = -1;
  int out_ = -1, err_ = -1;
  int status_ = 0;
  bool reaped_ = false;
};

// A loopback port nobody listens on now (the kernel's pick, released at once).
int free_port() {
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(s);
  return port;
}

// The value of an instant query that gives exactly one series, or none yet.
std::optional<double> query(httplib::Client& c, const std::string& q) {
  auto r = c.Get("/api/v1/query", httplib::Params{{"query", q}}, httplib::Headers{});
  if (!r || r->status != 200) return std::nullopt;
  const auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") return std::nullopt;
  const auto& res = j["data"]["result"];
  if (!res.is_array() || res.size() != 1) return std::nullopt;
  return std::stod(res[0]["value"][1].get<std::string>());
}

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
  const int web = free_port();
  ASSERT_GT(web, 0);
  {
    std::ofstream cfg(dir.path + "/prometheus.yml");
    cfg << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        << "scrape_configs:\n  - job_name: utramp\n    static_configs:\n"
        << "      - targets: ['127.0.0.1:" << port << "']\n";
  }
  Child prom({kPrometheus, "--config.file=" + dir.path + "/prometheus.yml",
              "--storage.tsdb.path=" + dir.path + "/data", "--web.listen-address=127.0.0.1:" + std::to_string(web),
              "--log.level=warn"},
             dir.path + "/prometheus.log");
  ASSERT_TRUE(prom.started());

  // What the target did, as the maps must show it: n = 0..kCalls-1 each counted once.
  struct Want {
    std::string q;
    double v;
  };
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

  httplib::Client client("127.0.0.1", web);
  client.set_connection_timeout(1);
  client.set_read_timeout(2);
  std::vector<std::string> missing;
  const auto deadline = clock_type::now() + std::chrono::seconds(12);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    missing.clear();
    for (const Want& w : want) {
      const auto v = query(client, w.q);
      if (!v || *v != w.v)
        missing.push_back(w.q + " = " + (v ? std::to_string(*v) : "(none)") + ", want " + std::to_string(w.v));
    }
  } while (!missing.empty() && clock_type::now() < deadline);
  std::string why;
  for (const auto& s : missing) why += s + "\n";
  EXPECT_TRUE(missing.empty()) << why << "prometheus log:\n"
                               << [&] {
                                    std::ifstream l(dir.path + "/prometheus.log");
                                    return std::string(std::istreambuf_iterator<char>(l), {});
                                  }();

  // The target ends when told; run ends with it, and so does the endpoint.
  { std::ofstream(stop).put('\n'); }
  ASSERT_TRUE(run.wait_for(20)) << run.err;
  EXPECT_TRUE(WIFEXITED(run.status()) && WEXITSTATUS(run.status()) == 0) << run.err;
  httplib::Client gone("127.0.0.1", port);
  gone.set_connection_timeout(1);
  EXPECT_FALSE(gone.Get("/metrics")) << "the endpoint still answers after the target ended";
  kill(prom.pid(), SIGTERM);
  EXPECT_TRUE(prom.wait_for(10));
}

}  // namespace
