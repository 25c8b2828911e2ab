// The HTTP side of `utramp run --metrics`, in a library of its own (libutramp-metrics.so,
// beside the agent): cpp-httplib and what it links (OpenSSL, brotli, zlib) are loaded by
// a CLI asked for metrics, not by every command (their loading was 7 ms of each
// `utramp record`'s start-up: docs/benchmarks.md, "Start-up"). metrics_server.* loads it.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/result.hpp"

namespace utramp::cli {

// A server answering GET /metrics from a thread of its own until it is destroyed.
class MetricsHttp {
 public:
  virtual ~MetricsHttp() = default;
  virtual int port() const = 0;
};

// The library's one entry point: binds HOST:PORT (port 0: any) and starts serving
// `render`'s text, giving the server, or the error (that names the address).
struct MetricsHttpStart {
  std::string host;
  int port = 0;
  std::function<std::string()> render;
  std::unique_ptr<MetricsHttp> server;
  std::optional<Error> error;
};

inline constexpr const char* kMetricsLibrary = "libutramp-metrics.so";
inline constexpr const char* kMetricsStartSymbol = "utramp_metrics_http_start";

}  // namespace utramp::cli

extern "C" __attribute__((visibility("default"))) void utramp_metrics_http_start(
    utramp::cli::MetricsHttpStart* s);
