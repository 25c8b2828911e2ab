#include "metrics_http.hpp"

#include <sys/socket.h>
#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

namespace utramp::cli {

namespace {

class Server final : public MetricsHttp {
 public:
  httplib::Server server;
  std::thread thread;
  int bound = 0;
  std::atomic<bool> ended{false};  // listen_after_bind returned

  ~Server() override {
    server.stop();
    if (thread.joinable()) thread.join();
  }
  int port() const override { return bound; }
};

}  // namespace

}  // namespace utramp::cli

void utramp_metrics_http_start(utramp::cli::MetricsHttpStart* s) {
  using namespace utramp;
  using cli::Server;
  auto impl = std::make_unique<Server>();
  // Scrapes come one at a time from a Prometheus server: two workers are plenty (the
  // library's default is one per CPU, at least eight).
  impl->server.new_task_queue = [] { return new httplib::ThreadPool(2); };
  // The library's default sets SO_REUSEPORT, which lets a second socket of the same
  // user bind the port too and take a share of the connections, and a bind to a port
  // another such server holds succeed: SO_REUSEADDR only (a quick restart past TIME_WAIT).
  impl->server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  impl->server.Get("/metrics", [render = s->render](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  errno = 0;
  const int port = s->port == 0 ? impl->server.bind_to_any_port(s->host) :
                   (impl->server.bind_to_port(s->host, s->port) ? s->port : -1);
  if (port <= 0) {
    s->error = make_error(Errc::io, fmt::format("cannot listen on {}:{}{}", s->host, s->port,
                                                errno ? fmt::format(": {}", std::strerror(errno)) : ""));
    return;
  }
  impl->bound = port;
  Server* p = impl.get();
  impl->thread = std::thread([p] {
    p->server.listen_after_bind();
    p->ended = true;
  });
  // stop() does nothing to a server not yet listening (whose loop would then never
  // end): the destructor may stop it only once it runs, or once it gave up.
  while (!impl->server.is_running() && !impl->ended) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  s->server = std::move(impl);
}
