#include "metrics_server.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <dlfcn.h>

#include <charconv>

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
  std::unique_ptr<MetricsHttp> http;
};

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const Endpoint& at,
                                                            std::function<std::string()> render,
                                                            const std::string& library) {
  // Loaded for good: the server's code runs until it is destroyed, and nothing else
  // loads it in this process.
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    return make_error(Errc::not_found, fmt::format("cannot load the metrics server {}: {}", library,
                                                   why ? why : "unknown error"));
  }
  auto start = reinterpret_cast<void (*)(MetricsHttpStart*)>(dlsym(lib, kMetricsStartSymbol));
  if (!start)
    return make_error(Errc::not_found, fmt::format("{} has no {}", library, kMetricsStartSymbol));
  MetricsHttpStart s;
  s.host = at.host;
  s.port = at.port;
  s.render = std::move(render);
  start(&s);
  if (s.error) return std::move(*s.error);
  auto impl = std::make_unique<Impl>();
  impl->http = std::move(s.server);
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsServer::~MetricsServer() = default;  // the server stops and joins its thread

int MetricsServer::port() const { return impl_->http->port(); }

}  // namespace utramp::cli
