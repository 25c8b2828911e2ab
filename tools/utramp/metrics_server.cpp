#include "metrics_server.hpp"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstring>
#include <thread>

namespace utramp::cli {

Result<Endpoint> parse_endpoint(const std::string& text) {
  Endpoint e;
  std::string port;
  if (text.starts_with("[")) {  // [v6]:port
    const size_t close = text.find("]:");
    if (close == std::string::npos)
      return make_error(Errc::invalid_argument, fmt::format("'{}': expected [ADDRESS]:PORT", text));
    e.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos || text.find(':') != colon)
      return make_error(Errc::invalid_argument,
                        fmt::format("'{}': expected HOST:PORT (e.g. 127.0.0.1:9464; IPv6 as [::1]:9464)", text));
    e.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  unsigned p = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (e.host.empty() || port.empty() || ec != std::errc() || end != port.data() + port.size() || p > 65535)
    return make_error(Errc::invalid_argument, fmt::format("'{}': expected HOST:PORT with a port of 0 to 65535", text));
  e.port = int(p);
  in_addr a4{};
  in6_addr a6{};
  if (e.host == "localhost") e.loopback = true;
  else if (inet_pton(AF_INET, e.host.c_str(), &a4) == 1) e.loopback = (ntohl(a4.s_addr) >> 24) == 127;
  else if (inet_pton(AF_INET6, e.host.c_str(), &a6) == 1) e.loopback = IN6_IS_ADDR_LOOPBACK(&a6);
  else
    return make_error(Errc::invalid_argument,
                      fmt::format("'{}': '{}' is not an IPv4 or IPv6 address (or localhost)", text, e.host));
  return e;
}

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
  int port = 0;
  std::atomic<bool> ended{false};  // listen_after_bind returned
};

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const Endpoint& at,
                                                            std::function<std::string()> render) {
  auto impl = std::make_unique<Impl>();
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
  impl->server.Get("/metrics", [render](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  errno = 0;
  const int port = at.port == 0 ? impl->server.bind_to_any_port(at.host) :
                   (impl->server.bind_to_port(at.host, at.port) ? at.port : -1);
  if (port <= 0)
    return make_error(Errc::io, fmt::format("cannot listen on {}:{}{}", at.host, at.port,
                                            errno ? fmt::format(": {}", std::strerror(errno)) : ""));
  impl->port = port;
  Impl* p = impl.get();
  impl->thread = std::thread([p] {
    p->server.listen_after_bind();
    p->ended = true;
  });
  // stop() does nothing to a server not yet listening (whose loop would then never
  // end): the destructor may stop it only once it runs, or once it gave up.
  while (!impl->server.is_running() && !impl->ended) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsServer::~MetricsServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int MetricsServer::port() const { return impl_->port; }

}  // namespace utramp::cli
