#pragma once
// A cpp-httplib server whose connections wait in one epoll thread (the guard) until a whole
// request (head and body) has arrived, and only then take a worker thread. httplib alone gives
// every accepted connection a pool thread for as long as it is open, so 12 sockets that send
// only a request line (the pool's size) stopped the server, and clients trickling a header line
// every few seconds kept it unreachable. Here:
//   - a request must arrive whole within header_timeout_s of its first byte (else 408), with a
//     head of at most limits.max_head_bytes (431) and a body of at most limits.max_body_bytes
//     (413, checked from Content-Length before the body is read);
//   - idle keep-alive connections cost no thread and are closed after idle_timeout_s;
//   - beyond max_connections, the connection that has waited longest is dropped;
//   - GET /health, /metrics and /v1/models (is_control) run on their own small pool, so they
//     answer even while every worker serves a generation.
// Routing, handlers and responses are httplib's: a worker hands the buffered request to
// httplib::Server::process_request through a stream that reads the buffer first.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include <httplib.h>

#include "server/request_head.h"

namespace moeflow {

struct GuardOptions {
  int worker_threads = 12;
  int control_threads = 2;
  double header_timeout_s = 10;  // first byte of a request (or the connection) -> all of it
  double idle_timeout_s = 5;     // keep-alive: a next request must start within this
  double write_timeout_s = 30;   // one blocked write to a client
  size_t max_connections = 512;
  int max_requests_per_connection = 1000;
  // A request at least this large gives its memory back once answered (malloc_trim): glibc keeps
  // freed heap in per-thread arenas, so a few large requests on different workers would
  // otherwise hold their peak for good.
  size_t trim_after_bytes = 1u << 20;
  HeadLimits limits;
  // Which requests go to the control pool.
  std::function<bool(const std::string& method, const std::string& path)> is_control;
  // Counters: a connection closed by the guard (reason as ServerMetrics::connection_dropped),
  // and a request it answered itself (path "other" when the head was unreadable).
  std::function<void(const std::string& reason)> on_drop;
  std::function<void(const std::string& path, int status)> on_answered;
};

class GuardedHttpServer : public httplib::Server {
 public:
  explicit GuardedHttpServer(GuardOptions opt);
  ~GuardedHttpServer() override;
  GuardedHttpServer(const GuardedHttpServer&) = delete;
  GuardedHttpServer& operator=(const GuardedHttpServer&) = delete;

  // Call after stop() and once listen has returned: closes the connections still waiting and
  // joins the guard and the worker threads (running requests finish first). Idempotent.
  void shutdown_guard();
  size_t open_connections() const;
  // For a handler (on its worker thread): a test of whether the client of the request being
  // served has gone (closed or reset its connection, or shut down its sending side). Valid only
  // while the handler (or its content provider) runs; null outside a guarded request.
  static std::function<bool()> client_gone_probe();
  // httplib listens with a backlog of 5: a burst of connections (or one slow accept) then costs
  // the clients a 1 s SYN retransmit. Call after binding.
  void set_backlog(int n);

 private:
  struct Guard;
  // httplib's accept loop calls this (on its own thread, through a task queue that runs tasks
  // inline) for every accepted socket: the socket goes to the guard, not to a worker.
  bool process_and_close_socket(socket_t sock) override;
  bool serve_one(httplib::Stream& strm, bool close_connection, bool& connection_closed);
  std::unique_ptr<Guard> g_;
};

}  // namespace moeflow
