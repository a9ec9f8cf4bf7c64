#pragma once
// OpenAI-compatible HTTP server (cpp-httplib + nlohmann-json) over one Engine:
//   POST /v1/chat/completions, POST /v1/completions   (JSON, or SSE with "stream": true)
//   GET  /v1/models, /v1/models/{id}, /health, /metrics (Prometheus text format)
// Connections wait in a guard thread until their request is complete (http_guard.h); requests
// are parsed and validated (request_parse.h) and tokenized on worker threads; generation runs on
// one engine thread that takes requests from a bounded FIFO queue (full -> 503) and keeps the KV
// cache of the previous request for the next one's common prefix. A client that goes away
// (streaming or not) cancels its generation between tokens. See docs/server.md.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "experts/offload_stats.h"
#include "sampling/sampler.h"
#include "server/request_parse.h"

namespace moeflow {

class Engine;
class Tokenizer;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;              // 0: any free port (see Server::port())
  std::string model_id;         // the name /v1/models reports and requests may give as "model"
  int max_queue = 8;            // requests waiting behind the running one; beyond that: 503
  int http_threads = 0;         // workers for generation requests; 0: max_queue + 4
  SamplerParams sampling;       // defaults for the sampling fields a request leaves out
  bool random_seed = true;      // a request without "seed" gets a random one (else sampling.seed)
  int default_max_tokens = -1;  // max_tokens when a request gives none (-1: up to the context)
  std::string chat_template;    // Jinja text overriding the model's ("" = the model's)
  bool log_requests = false;    // one line per request on stderr
  bool prefix_cache = true;     // reuse the KV cache of the longest common prefix across requests
  // Connection guard (http_guard.h) and request limits (request_parse.h).
  double header_timeout_s = 10;  // a request must arrive whole within this of its first byte
  double idle_timeout_s = 5;     // keep-alive connections without a next request are closed
  double write_timeout_s = 30;
  size_t max_connections = 512;
  // stop_gracefully(): how long queued and running requests may go on before they are cut.
  double shutdown_timeout_s = 5;
  RequestLimits limits;
};

class Server {
 public:
  // The engine and tokenizer must outlive the server; only the server's engine thread uses the
  // engine. offload_stats (optional) is called from request threads for /metrics.
  Server(Engine& engine, const Tokenizer& tok, ServerOptions opt,
         std::function<std::optional<OffloadStats>()> offload_stats = nullptr);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port; returns the port (the chosen one when port is 0). Throws on failure.
  int bind();
  // Serves until stop() (binds first if bind() was not called). Blocks.
  void listen();
  // bind() + listen() on a background thread; returns once the server accepts connections.
  void start();
  // Stops accepting, cancels queued and running requests, joins the threads. Idempotent; a
  // second caller returns once the first has finished.
  void stop();
  // SIGTERM: stops accepting connections (listen() returns) and refuses new requests (503),
  // lets queued and running ones finish for up to shutdown_timeout_s, then stop(): a stream
  // still open ends each choice with finish_reason "cancelled", its usage, an error event and
  // [DONE]; a plain request still waiting gets a 503. Blocks; stop() from another thread (a
  // second signal) cuts the wait short. An idle server returns at once.
  void stop_gracefully();
  int port() const;
  // The line describing the chat template in use (its origin), for the startup log.
  const std::string& template_description() const;
  // The /metrics page.
  std::string metrics() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moeflow
