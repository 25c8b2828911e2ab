// Debian's real Prometheus server for the --metrics end-to-end tests (prom_e2e_test.cpp,
// tests/attach/run_pid_test.cpp): a child process on pipes, a free loopback port, an
// instant query, and a server on loopback (its own temporary storage) scraping one
// endpoint every second until the values wanted are there.
#pragma once

#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace utramp::test {

using clock_type = std::chrono::steady_clock;

inline const char* const kPrometheus = "/usr/bin/prometheus";

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
inline int free_port() {
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
inline std::optional<double> query(httplib::Client& c, const std::string& q) {
  auto r = c.Get("/api/v1/query", httplib::Params{{"query", q}}, httplib::Headers{});
  if (!r || r->status != 200) return std::nullopt;
  const auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") return std::nullopt;
  const auto& res = j["data"]["result"];
  if (!res.is_array() || res.size() != 1) return std::nullopt;
  return std::stod(res[0]["value"][1].get<std::string>());
}

// A query and the value it must give.
struct PromWant {
  std::string q;
  double v;
};

// prometheus on loopback (a free port), its storage, configuration and log in DIR,
// scraping 127.0.0.1:PORT every second; stopped when destroyed.
class PromServer {
 public:
  PromServer(const std::string& dir, int port) : dir_(dir), web_(free_port()) {
    if (web_ <= 0) return;
    {
      std::ofstream cfg(dir + "/prometheus.yml");
      cfg << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
          << "scrape_configs:\n  - job_name: utramp\n    static_configs:\n"
          << "      - targets: ['127.0.0.1:" << port << "']\n";
    }
    child_ = std::make_unique<Child>(
        std::vector<std::string>{kPrometheus, "--config.file=" + dir + "/prometheus.yml",
                                 "--storage.tsdb.path=" + dir + "/data",
                                 "--web.listen-address=127.0.0.1:" + std::to_string(web_), "--log.level=warn"},
        dir + "/prometheus.log");
  }
  bool started() const { return child_ && child_->started(); }
  Child& child() { return *child_; }
  // Queries WANT until every value is there or SECONDS passed; "" when all were, else
  // what was not, and the server's log.
  std::string wait_for(const std::vector<PromWant>& want, int seconds) {
    httplib::Client client("127.0.0.1", web_);
    client.set_connection_timeout(1);
    client.set_read_timeout(2);
    std::vector<std::string> missing;
    const auto deadline = clock_type::now() + std::chrono::seconds(seconds);
    do {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      missing.clear();
      for (const PromWant& w : want) {
        const auto v = query(client, w.q);
        if (!v || *v != w.v)
          missing.push_back(w.q + " = " + (v ? std::to_string(*v) : "(none)") + ", want " + std::to_string(w.v));
      }
    } while (!missing.empty() && clock_type::now() < deadline);
    if (missing.empty()) return {};
    std::string why;
    for (const auto& s : missing) why += s + "\n";
    std::ifstream l(dir_ + "/prometheus.log");
    return why + "prometheus log:\n" + std::string(std::istreambuf_iterator<char>(l), {});
  }

 private:
  std::string dir_;
  int web_ = -1;
  std::unique_ptr<Child> child_;
};

}  // namespace utramp::test
