#include "server/http_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/timer.h"

namespace moeflow {
namespace {

// Buffer capacity a connection keeps between requests; more is given back.
constexpr size_t kKeepCapacity = 64 * 1024;

// A connection between requests: its socket and the bytes received but not yet consumed.
struct Conn {
  int fd = -1;
  std::string buf;
  size_t rpos = 0;       // bytes of buf a worker's stream has consumed
  double deadline = 0;   // the guard acts when it passes
  bool reading = false;  // some bytes of a request have arrived
  bool sent_continue = false;
  bool closing = false;  // an error was sent: drain input until EOF or the deadline
  size_t scan_at = 0;    // look at the request again once buf holds this much (0: every chunk)
  int served = 0;        // requests served on this connection
  double waiting_since = 0;
};
using ConnPtr = std::shared_ptr<Conn>;

bool wait_fd(int fd, short events, double timeout_s) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = poll(&p, 1, (int)(timeout_s * 1000));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

// The socket of the request the calling worker thread serves (-1: none).
thread_local int tl_serving_fd = -1;

// Whether the peer has closed the connection (or its sending side): readable with nothing to
// read, or an error. A pipelined next request (bytes waiting) is a live client.
bool peer_gone(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
  if (!(p.revents & POLLIN)) return false;
  char c;
  const ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR);
}

// httplib's view of a connection: the guard's buffer first, then the socket (never needed for a
// well-formed request, whose head and body the guard has already read), with poll() timeouts.
class BufferedStream final : public httplib::Stream {
 public:
  BufferedStream(Conn& c, double read_timeout_s, double write_timeout_s)
      : c_(c), read_timeout_s_(read_timeout_s), write_timeout_s_(write_timeout_s) {}

  bool is_readable() const override {
    return c_.rpos < c_.buf.size() || wait_fd(c_.fd, POLLIN, read_timeout_s_);
  }
  bool is_writable() const override { return wait_fd(c_.fd, POLLOUT, write_timeout_s_); }

  ssize_t read(char* ptr, size_t size) override {
    if (c_.rpos < c_.buf.size()) {
      const size_t n = std::min(size, c_.buf.size() - c_.rpos);
      std::memcpy(ptr, c_.buf.data() + c_.rpos, n);
      c_.rpos += n;
      return (ssize_t)n;
    }
    for (;;) {
      if (!wait_fd(c_.fd, POLLIN, read_timeout_s_)) return -1;
      const ssize_t r = recv(c_.fd, ptr, size, MSG_DONTWAIT);
      if (r >= 0) return r;
      if (errno != EAGAIN && errno != EINTR) return -1;
    }
  }

  ssize_t write(const char* ptr, size_t size) override {
    for (;;) {
      const ssize_t r = send(c_.fd, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r >= 0) return r;
      if (errno == EINTR) continue;
      if (errno != EAGAIN) return -1;
      if (!wait_fd(c_.fd, POLLOUT, write_timeout_s_)) return -1;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address(true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address(false, ip, port);
  }
  socket_t socket() const override { return c_.fd; }

 private:
  void address(bool peer, std::string& ip, int& port) const {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    const int r =
        peer ? getpeername(c_.fd, (sockaddr*)&ss, &len) : getsockname(c_.fd, (sockaddr*)&ss, &len);
    char host[INET6_ADDRSTRLEN] = "";
    port = 0;
    if (r != 0) return;
    if (ss.ss_family == AF_INET) {
      auto* a = (sockaddr_in*)&ss;
      inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
      port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      auto* a = (sockaddr_in6*)&ss;
      inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
      port = ntohs(a->sin6_port);
    }
    ip = host;
  }

  Conn& c_;
  double read_timeout_s_, write_timeout_s_;
};

// Runs each task on the calling thread: httplib's accept loop hands sockets to the guard.
class InlineTaskQueue final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

const char* status_text(int s) {
  switch (s) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    default: return "Error";
  }
}

}  // namespace

struct GuardedHttpServer::Guard {
  GuardedHttpServer& owner;
  GuardOptions opt;
  httplib::ThreadPool workers, control;
  int ep = -1, wake = -1;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::atomic<size_t> active{0};      // connections a worker is serving
  std::atomic<size_t> held_count{0};  // connections waiting in the guard
  std::mutex mu;                      // guards incoming and gate_stopped
  std::deque<ConnPtr> incoming;       // accepted or returned by a worker, for the guard thread
  bool gate_stopped = false;
  bool joined = false;
  std::unordered_map<int, ConnPtr> held;  // guard thread only

  Guard(GuardedHttpServer& o, GuardOptions op)
      : owner(o),
        opt(std::move(op)),
        workers((size_t)std::max(1, opt.worker_threads)),
        control((size_t)std::max(1, opt.control_threads)) {
    ep = epoll_create1(EPOLL_CLOEXEC);
    wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake;
    epoll_ctl(ep, EPOLL_CTL_ADD, wake, &ev);
    thread = std::thread([this] { run(); });
  }

  ~Guard() { shutdown(); }

  void shutdown() {
    if (joined) return;
    joined = true;
    stopping = true;
    notify();
    if (thread.joinable()) thread.join();
    workers.shutdown();
    control.shutdown();
    ::close(ep);
    ::close(wake);
  }

  void notify() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(wake, &one, sizeof one);
  }

  // From the accept thread (a new socket) or a worker (a connection between requests).
  void hand_over(ConnPtr c) {
    {
      std::lock_guard lk(mu);
      if (!gate_stopped) {
        incoming.push_back(std::move(c));
        c = nullptr;
      }
    }
    if (c) {
      close_fd(*c);
      return;
    }
    notify();
  }

  static void close_fd(Conn& c) {
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
  }

  void drop(const ConnPtr& c, const char* reason) {
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, nullptr);
    held.erase(c->fd);
    held_count = held.size();
    if (reason && opt.on_drop) opt.on_drop(reason);
    close_fd(*c);
  }

  // Sends a small JSON error and lingers: the client may still be sending, and closing with
  // unread input would reset the connection before it reads the answer.
  void refuse(const ConnPtr& c, int status, const std::string& message, const std::string& path,
              const char* reason) {
    const std::string body = nlohmann::ordered_json{
        {"error",
         {{"message", message},
          {"type", "invalid_request_error"},
          {"param", nullptr},
          {"code",
           nullptr}}}}.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    const std::string resp = fmt::format(
        "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: "
        "close\r\n\r\n{}",
        status, status_text(status), body.size(), body);
    // Counted before the client can see the answer (tests read the counters right after).
    if (opt.on_answered) opt.on_answered(path.empty() ? "other" : path, status);
    if (opt.on_drop) opt.on_drop(reason);
    [[maybe_unused]] ssize_t r = send(c->fd, resp.data(), resp.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(c->fd, SHUT_WR);
    c->closing = true;
    std::string().swap(c->buf);
    c->rpos = 0;
    c->deadline = now_seconds() + 2;
  }

  void add(ConnPtr c) {
    const double now = now_seconds();
    if (held.size() + active >= opt.max_connections) evict_one();
    if (held.size() + active >= opt.max_connections) {
      if (opt.on_drop) opt.on_drop("evicted");
      close_fd(*c);
      return;
    }
    c->waiting_since = now;
    c->scan_at = 0;
    c->reading = false;
    c->sent_continue = false;
    // A new connection is expected to send a request; a kept-alive one may idle a while.
    c->deadline = now + (c->served == 0 ? opt.header_timeout_s : opt.idle_timeout_s);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = c->fd;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
      close_fd(*c);
      return;
    }
    held[c->fd] = c;
    held_count = held.size();
    if (c->rpos < c->buf.size()) evaluate(c);  // a pipelined request is already here
  }

  // The connection that has waited longest in the guard (closing ones first) makes room.
  void evict_one() {
    ConnPtr victim;
    for (auto& [fd, c] : held)
      if (!victim || (c->closing && !victim->closing) ||
          (c->closing == victim->closing && c->waiting_since < victim->waiting_since))
        victim = c;
    if (victim) drop(victim, victim->closing ? nullptr : "evicted");
  }

  // Reads what has arrived. The request is looked at again after every chunk until its head is
  // known, then once enough bytes for its body are in (Content-Length) or the burst ends
  // (chunked): an oversized or malformed request is refused before its body is buffered, and
  // a big body costs one scan, not one per chunk.
  void readable(const ConnPtr& c) {
    char tmp[65536];
    const size_t cap = opt.limits.max_head_bytes + opt.limits.max_body_bytes + sizeof tmp;
    for (;;) {
      const ssize_t n = recv(c->fd, tmp, sizeof tmp, MSG_DONTWAIT);
      if (n > 0) {
        if (c->closing) continue;  // draining after an error
        c->buf.append(tmp, (size_t)n);
        if ((c->scan_at == 0 || c->buf.size() >= c->scan_at || c->buf.size() > cap) && !evaluate(c))
          return;
        continue;
      }
      if (n == 0) {
        drop(c, nullptr);  // the client closed
        return;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      drop(c, nullptr);
      return;
    }
    if (!c->closing) evaluate(c);
  }

  // Returns whether the connection is still waiting here (false: dispatched to a worker, or
  // refused and lingering, or dropped).
  bool evaluate(const ConnPtr& c) {
    // Blank lines between requests are allowed; httplib would read them as a request line.
    while (c->buf.size() - c->rpos >= 2 && c->buf[c->rpos] == '\r' && c->buf[c->rpos + 1] == '\n')
      c->rpos += 2;
    if (c->rpos > 0) {
      c->buf.erase(0, c->rpos);
      c->rpos = 0;
    }
    if (c->buf.empty()) return true;
    if (!c->reading) {
      c->reading = true;
      c->deadline = now_seconds() + opt.header_timeout_s;
    }
    RequestScan s = scan_request(c->buf, opt.limits);
    using State = RequestScan::State;
    switch (s.state) {
      case State::Incomplete:
        if (s.head_bytes > 0) {
          // Known body size (within the limit): one allocation instead of doublings, and no
          // second look before it is all here. Chunked: a look per burst.
          const size_t total = s.head_bytes + (size_t)s.body_bytes;
          c->scan_at = s.scan_chunked ? SIZE_MAX : total;
          if (!s.scan_chunked && c->buf.capacity() < total) c->buf.reserve(total);
        }
        if (s.expect_continue && !c->sent_continue) {
          static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
          [[maybe_unused]] ssize_t r =
              send(c->fd, kContinue, sizeof kContinue - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
          c->sent_continue = true;
        }
        return true;
      case State::Malformed: refuse(c, 400, s.error, s.path, "bad_request"); return false;
      case State::HeadTooLarge: refuse(c, 431, s.error, s.path, "too_large"); return false;
      case State::BodyTooLarge: refuse(c, 413, s.error, s.path, "too_large"); return false;
      case State::Complete: break;
    }
    // Answered here already (or not needed): httplib must not send a second 100 Continue.
    if (s.expect_len > 0) c->buf.erase(s.expect_line, s.expect_len);
    c->scan_at = 0;
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, nullptr);
    held.erase(c->fd);
    held_count = held.size();
    ++active;
    const bool ctl = opt.is_control && opt.is_control(s.method, s.path);
    (ctl ? control : workers).enqueue([this, c] { serve(c); });
    return false;
  }

  // On a worker thread: one request, then the connection goes back to the guard (keep-alive).
  void serve(const ConnPtr& c) {
    const bool last = stopping || c->served + 1 >= opt.max_requests_per_connection;
    bool closed = false;
    bool ok = false;
    {
      BufferedStream strm(*c, 5.0, opt.write_timeout_s);
      tl_serving_fd = c->fd;
      ok = owner.serve_one(strm, last, closed);
      tl_serving_fd = -1;
    }
    c->served++;
    const size_t consumed = c->rpos;
    c->buf.erase(0, c->rpos);
    c->rpos = 0;
    if (c->buf.capacity() > kKeepCapacity) c->buf.shrink_to_fit();
    if (consumed >= opt.trim_after_bytes) malloc_trim(0);
    --active;
    if (!ok || closed || last || stopping)
      close_fd(*c);
    else
      hand_over(c);
  }

  void expire(double now) {
    std::vector<ConnPtr> due;
    for (auto& [fd, c] : held)
      if (now >= c->deadline) due.push_back(c);
    for (const ConnPtr& c : due) {
      if (c->closing)
        drop(c, nullptr);
      else if (c->reading)
        refuse(c, 408, fmt::format("the request did not arrive within {} s", opt.header_timeout_s),
               "", "header_timeout");
      else
        drop(c, "idle_timeout");
    }
  }

  void run() {
    std::vector<epoll_event> evs(256);
    double last_check = 0;
    while (!stopping) {
      const int n = epoll_wait(ep, evs.data(), (int)evs.size(), 100);
      std::deque<ConnPtr> in;
      {
        std::lock_guard lk(mu);
        in.swap(incoming);
      }
      for (ConnPtr& c : in) add(std::move(c));
      for (int i = 0; i < n; ++i) {
        const int fd = evs[i].data.fd;
        if (fd == wake) {
          uint64_t v;
          [[maybe_unused]] ssize_t r = ::read(wake, &v, sizeof v);
          continue;
        }
        auto it = held.find(fd);
        if (it == held.end()) continue;
        ConnPtr c = it->second;
        if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) readable(c);
      }
      const double now = now_seconds();
      if (now - last_check >= 0.05) {
        expire(now);
        last_check = now;
      }
    }
    std::deque<ConnPtr> rest;
    {
      std::lock_guard lk(mu);
      gate_stopped = true;
      rest.swap(incoming);
    }
    for (auto& c : rest) close_fd(*c);
    for (auto& [fd, c] : held) close_fd(*c);
    held.clear();
    held_count = 0;
  }
};

GuardedHttpServer::GuardedHttpServer(GuardOptions opt)
    : g_(std::make_unique<Guard>(*this, std::move(opt))) {
  new_task_queue = [] { return new InlineTaskQueue; };
}

GuardedHttpServer::~GuardedHttpServer() { shutdown_guard(); }

void GuardedHttpServer::shutdown_guard() { g_->shutdown(); }

void GuardedHttpServer::set_backlog(int n) {
  const int fd = svr_sock_;
  if (fd >= 0) ::listen(fd, n);  // listen() again on a listening socket only resizes its queue
}

size_t GuardedHttpServer::open_connections() const {
  return g_->held_count.load() + g_->active.load();
}

std::function<bool()> GuardedHttpServer::client_gone_probe() {
  const int fd = tl_serving_fd;
  if (fd < 0) return nullptr;
  return [fd] { return peer_gone(fd); };
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  const int flags = fcntl(sock, F_GETFL, 0);
  fcntl(sock, F_SETFL, flags | O_NONBLOCK);
  const int one = 1;
  setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // SSE pieces go out at once
  auto c = std::make_shared<Conn>();
  c->fd = sock;
  g_->hand_over(std::move(c));
  return true;
}

bool GuardedHttpServer::serve_one(httplib::Stream& strm, bool close_connection,
                                  bool& connection_closed) {
  return process_request(strm, close_connection, connection_closed, nullptr);
}

}  // namespace moeflow
