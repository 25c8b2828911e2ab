// The HTTP endpoint of `utramp run --metrics ADDR`: GET /metrics answers with the text
// the callback renders (Prometheus' text format 0.0.4), from a thread of its own, until
// the server is destroyed. Built on Debian's cpp-httplib, in a library loaded only here
// (metrics_http.hpp).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/result.hpp"
#include "metrics_http.hpp"

namespace utramp::cli {

// "HOST:PORT" ("[::1]:9464" for IPv6) parsed; port 0 asks the system for one.
struct Endpoint {
  std::string host;
  int port = 0;
  bool loopback = false;  // 127.0.0.0/8, ::1 or localhost
};
Result<Endpoint> parse_endpoint(const std::string& text);

class MetricsServer {
 public:
  // Loads LIBRARY (libutramp-metrics.so: the CLI's is beside its agent, launch.hpp's
  // cli_library), binds (an error names the address and the reason) and starts serving.
  static Result<std::unique_ptr<MetricsServer>> start(const Endpoint& at, std::function<std::string()> render,
                                                      const std::string& library);
  ~MetricsServer();  // stops serving and joins the thread
  int port() const;

  struct Impl;

 private:
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace utramp::cli
