#pragma once
// The server's counters and the Prometheus text page of GET /metrics (docs/server.md lists the
// metrics). Thread-safe: request threads, the connection guard and the engine thread all count.
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "experts/offload_stats.h"

namespace moeflow {

struct TextGenResult;

class ServerMetrics {
 public:
  // An answered request; path is one of the served routes or "other".
  void http_request(const std::string& path, int status);
  // A generation that ended (error: it failed; r is then ignored).
  void generation(const TextGenResult& r, bool error);
  void rejected();
  // A request ended before its generation did: "client_gone" (its client disconnected) or
  // "shutdown" (the server stopped after --shutdown-timeout).
  void cancelled(const std::string& reason);
  // A connection the guard closed without a worker seeing it: "header_timeout",
  // "idle_timeout", "evicted" (too many connections), "too_large", "bad_request".
  void connection_dropped(const std::string& reason);

  struct Gauges {
    size_t queue_length = 0;
    bool busy = false;
    int64_t n_ctx = 0;
    size_t open_connections = 0;
  };
  std::string render(const Gauges& g, const std::optional<OffloadStats>& offload) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> http_requests_;
  std::map<std::string, uint64_t> finished_;  // by finish_reason ("error" for failures)
  std::map<std::string, uint64_t> dropped_;
  std::map<std::string, uint64_t> cancelled_;
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, generated_tokens_ = 0, rejected_ = 0;
  double prefill_s_ = 0, decode_s_ = 0;
};

}  // namespace moeflow
