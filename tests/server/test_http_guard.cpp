// The connection guard under hostile and careless clients: half-open and trickling (slowloris)
// sockets, hundreds of idle connections, more connections than allowed, malformed and oversized
// heads, Expect: 100-continue, chunked and pipelined requests. /health must keep answering
// within a second throughout.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "loopback_socket.h"
#include "server_fixture.h"

namespace moeflow::test {
namespace {

using Clock = std::chrono::steady_clock;

bool send_str(int fd, const std::string& s) {
  return send(fd, s.data(), s.size(), MSG_NOSIGNAL) == (ssize_t)s.size();
}

// Everything the server sends until it closes, `until` appears, or `timeout_s` passes.
std::string read_all(int fd, double timeout_s, const std::string& until = "") {
  std::string out;
  const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[4096];
  while (Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    const int ms =
        (int)std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (poll(&p, 1, std::max(ms, 1)) <= 0) break;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, (size_t)n);
    if (!until.empty() && out.find(until) != std::string::npos) break;
  }
  return out;
}

// Whether the server has closed the socket (EOF or reset) within timeout_s.
bool closed_within(int fd, double timeout_s) {
  const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[4096];
  while (Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) return true;
  }
  return false;
}

// GET /health on a fresh connection; returns the seconds it took, or -1 on failure.
double health_seconds(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(3, 0);
  c.set_read_timeout(3, 0);
  const auto t0 = Clock::now();
  auto r = c.Get("/health");
  if (!r || r->status != 200) return -1;
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

TEST(HttpGuard, SlowlorisAndHalfOpenSocketsDoNotBlockHealth) {
  ServerOptions so;
  so.header_timeout_s = 2.5;
  Instance inst(so);
  const int port = inst.server->port();
  // 12 sockets that send only a request line (the old HTTP pool's size) and 100 that trickle
  // a header line every 200 ms.
  std::vector<int> half, slow;
  for (int i = 0; i < 12; ++i) {
    half.push_back(connect_to(port));
    ASSERT_TRUE(send_str(half.back(), "GET /health HTTP/1.1\r\n"));
  }
  for (int i = 0; i < 100; ++i) {
    slow.push_back(connect_to(port));
    ASSERT_GE(slow.back(), 0);
    ASSERT_TRUE(send_str(slow.back(), "POST /v1/completions HTTP/1.1\r\n"));
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    while (!stop) {
      for (int fd : slow) send(fd, "X-Trickle: 1\r\n", 14, MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  const std::string page = inst.server->metrics();
  double worst = 0;
  for (int i = 0; i < 8; ++i) {
    const double s = health_seconds(port);
    ASSERT_GE(s, 0) << "GET /health failed with " << i << " checks done";
    worst = std::max(worst, s);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_LT(worst, 1.0);
  EXPECT_GE(metric(inst.server->metrics(), "moeflow_http_connections_open"), 112u);
  // Generation works meanwhile too.
  EXPECT_NO_THROW(post_ok(inst, "/v1/completions", {{"prompt", "still"}, {"max_tokens", 3}}));
  stop = true;
  trickle.join();
  // The whole-request deadline closes them all with a 408, trickling or not.
  for (int fd : slow) {
    const std::string got = read_all(fd, 5.0);
    EXPECT_NE(got.find("408"), std::string::npos) << got;
    close(fd);
  }
  for (int fd : half) {
    EXPECT_TRUE(closed_within(fd, 3.0));
    close(fd);
  }
  EXPECT_GE(metric(inst.server->metrics(),
                   "moeflow_http_connections_dropped_total{reason=\"header_timeout\"}"),
            112u);
  EXPECT_GE(health_seconds(port), 0);
}

TEST(HttpGuard, TwoHundredIdleConnectionsDoNotBlockAnything) {
  Instance inst(ServerOptions{});
  const int port = inst.server->port();
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) {
    idle.push_back(connect_to(port));
    ASSERT_GE(idle.back(), 0) << i;
  }
  for (int i = 0; i < 5; ++i) {
    const double s = health_seconds(port);
    ASSERT_GE(s, 0);
    EXPECT_LT(s, 1.0);
  }
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i)
    ts.emplace_back([&, i] {
      auto r = post(inst, "/v1/completions",
                    json{{"prompt", "p" + std::to_string(i)}, {"max_tokens", 4}}.dump());
      if (r && r->status == 200) ++ok;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok, 4);
  EXPECT_GE(metric(inst.server->metrics(), "moeflow_http_connections_open"), 200u);
  for (int fd : idle) close(fd);
}

TEST(HttpGuard, BeyondMaxConnectionsTheLongestWaitingIsDropped) {
  ServerOptions so;
  so.max_connections = 40;
  Instance inst(so);
  const int port = inst.server->port();
  std::vector<int> fds;
  for (int i = 0; i < 50; ++i) {
    fds.push_back(connect_to(port));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a clear arrival order
  }
  EXPECT_GE(health_seconds(port), 0);
  int oldest_closed = 0, newest_closed = 0;
  for (int i = 0; i < 10; ++i) oldest_closed += closed_within(fds[(size_t)i], 1.0);
  for (int i = 45; i < 50; ++i) newest_closed += closed_within(fds[(size_t)i], 0.2);
  EXPECT_EQ(oldest_closed, 10);
  EXPECT_EQ(newest_closed, 0);
  EXPECT_GE(
      metric(inst.server->metrics(), "moeflow_http_connections_dropped_total{reason=\"evicted\"}"),
      10u);
  for (int fd : fds) close(fd);
}

TEST(HttpGuard, MalformedAndOversizedRequestsAre4xxWithJsonBodies) {
  Instance inst(ServerOptions{});
  const int port = inst.server->port();
  struct Case {
    std::string request;
    const char* status;
  };
  const Case cases[] = {
      {"GARBAGE\r\n\r\n", "400"},
      {"POST /v1/completions HTTP/1.1\r\nContent-Length: abc\r\n\r\n", "400"},
      {"POST /v1/completions HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
       "400"},
      {"GET /health HTTP/1.1\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n", "431"},
      // Refused from the head: the 9 MiB body is never sent.
      {"POST /v1/completions HTTP/1.1\r\nContent-Length: 9437184\r\n\r\n", "413"},
  };
  for (const Case& c : cases) {
    const int fd = connect_to(port);
    ASSERT_TRUE(send_str(fd, c.request));
    const std::string got = read_all(fd, 3.0);
    close(fd);
    EXPECT_EQ(got.rfind(std::string("HTTP/1.1 ") + c.status, 0), 0u) << got.substr(0, 200);
    const size_t body = got.find("\r\n\r\n");
    ASSERT_NE(body, std::string::npos);
    EXPECT_TRUE(json::parse(got.substr(body + 4))["error"]["message"].is_string()) << got;
  }
  EXPECT_GE(health_seconds(port), 0);
}

TEST(HttpGuard, ExpectContinueChunkedAndPipelinedRequests) {
  Instance inst(ServerOptions{});
  const int port = inst.server->port();
  const std::string body = json{{"prompt", "hello"}, {"max_tokens", 2}}.dump();
  {
    const int fd = connect_to(port);
    ASSERT_TRUE(send_str(
        fd,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nConnection: close\r\n"
        "Content-Length: " +
            std::to_string(body.size()) + "\r\n\r\n"));
    const std::string interim = read_all(fd, 2.0, "\r\n\r\n");
    EXPECT_EQ(interim, "HTTP/1.1 100 Continue\r\n\r\n");
    ASSERT_TRUE(send_str(fd, body));
    const std::string got = read_all(fd, 5.0);
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
    EXPECT_EQ(got.find("100 Continue"), std::string::npos) << "a second interim answer";
    close(fd);
  }
  {
    const int fd = connect_to(port);
    const std::string half = body.substr(0, 5), rest = body.substr(5);
    char hex[16];
    std::snprintf(hex, sizeof hex, "%zx", half.size());
    std::string chunked =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: "
        "close\r\n\r\n";
    chunked += std::string(hex) + "\r\n" + half + "\r\n";
    std::snprintf(hex, sizeof hex, "%zx", rest.size());
    chunked += std::string(hex) + "\r\n" + rest + "\r\n0\r\n\r\n";
    ASSERT_TRUE(send_str(fd, chunked));
    const std::string got = read_all(fd, 5.0);
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
    close(fd);
  }
  {
    const int fd = connect_to(port);
    ASSERT_TRUE(send_str(fd,
                         "GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: "
                         "x\r\nConnection: close\r\n\r\n"));
    const std::string got = read_all(fd, 5.0);
    size_t n = 0;
    for (size_t p = got.find("HTTP/1.1 200"); p != std::string::npos;
         p = got.find("HTTP/1.1 200", p + 1))
      ++n;
    EXPECT_EQ(n, 2u) << got;
    close(fd);
  }
}

TEST(HttpGuard, KeepAliveConnectionsAreReusedAndIdleOnesClosed) {
  ServerOptions so;
  so.idle_timeout_s = 0.5;
  Instance inst(so);
  auto c = inst.client();
  c.set_keep_alive(true);
  for (int i = 0; i < 20; ++i) {
    auto r = c.Get("/health");
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->status, 200);
  }
  const int fd = connect_to(inst.server->port());
  ASSERT_TRUE(send_str(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  const auto t0 = Clock::now();
  const std::string got = read_all(fd, 3.0);  // the answer, then the idle close
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_LT(waited, 2.5) << "the idle keep-alive connection was not closed";
  close(fd);
}

}  // namespace
}  // namespace moeflow::test
