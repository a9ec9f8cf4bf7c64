// Cancellation and shutdown. A client that disconnects stops its generation between tokens,
// streaming or not, n > 1 too, counted in /metrics; stop_gracefully() (SIGTERM in `moeflow
// serve`) stops accepting, lets running requests finish up to shutdown_timeout_s, then ends each
// open stream with a finish_reason, the usage and an error event before [DONE]; an idle server
// stops at once. The gated engine (server_fixture.h) holds generation where a test needs it.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "loopback_socket.h"
#include "server_fixture.h"

// A namespace of its own: the unity builds (MOEFLOW_UNITY) compile this file in one unit with
// others of its folder that define helpers of the same names.
namespace moeflow::test::server_lifecycle {
namespace {

using Clock = std::chrono::steady_clock;

const char* const kClientGone = "moeflow_requests_cancelled_total{reason=\"client_gone\"}";
const char* const kShutdown = "moeflow_requests_cancelled_total{reason=\"shutdown\"}";
const char* const kCancelled = "moeflow_completions_total{finish_reason=\"cancelled\"}";

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A POST on a raw connection (so the test can close it whenever it likes); -1 on failure.
int send_post(int port, const std::string& path, const json& body) {
  const int fd = connect_to(port);
  if (fd < 0) return -1;
  const std::string b = body.dump();
  const std::string req = "POST " + path +
                          " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Content-Length: " +
                          std::to_string(b.size()) + "\r\n\r\n" + b;
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != (ssize_t)req.size()) {
    close(fd);
    return -1;
  }
  return fd;
}

// Bounded wait (10 s) until a metric of the in-process server reaches `want`.
bool wait_metric(const Instance& inst, const std::string& name, uint64_t want) {
  for (int i = 0; i < 1000; ++i) {
    const uint64_t v = metric(inst.server->metrics(), name);
    if (v != UINT64_MAX && v >= want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

bool wait_idle(const Instance& inst) {
  for (int i = 0; i < 1000; ++i) {
    const std::string m = inst.server->metrics();
    if (metric(m, "moeflow_busy") == 0 && metric(m, "moeflow_queue_length") == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

const json kChat = {{{"role", "user"}, {"content", "Tell me a long story"}}};

// The case: n = 8, not streaming, the client gone while generation runs. The engine is
// held in the first prefill, so the test does not depend on speed: the request thread notices
// the closed connection while it waits, and once the engine moves on the first choice stops at
// its first token and the seven others never start.
TEST(ServerCancel, NonStreamingClientThatLeavesStopsEveryChoice) {
  Instance inst(ServerOptions{}, /*gated=*/true);
  const std::string m0 = inst.server->metrics();
  const uint64_t gen0 = metric(m0, "moeflow_generated_tokens_total");
  const uint64_t cancelled0 = metric(m0, kCancelled);
  inst.gate->set_open(false);
  const int fd = send_post(inst.server->port(), "/v1/chat/completions",
                           {{"messages", kChat},
                            {"n", 8},
                            {"max_tokens", 200},
                            {"ignore_eos", true},
                            {"temperature", 1}});
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(inst.gate->wait_blocked());
  close(fd);
  // Counted while the engine is still held: the request thread watches the connection.
  EXPECT_TRUE(wait_metric(inst, kClientGone, 1)) << inst.server->metrics();
  inst.gate->set_open(true);
  ASSERT_TRUE(wait_idle(inst));
  ASSERT_TRUE(wait_metric(inst, kCancelled, cancelled0 + 8)) << inst.server->metrics();
  const std::string m = inst.server->metrics();
  EXPECT_LE(metric(m, "moeflow_generated_tokens_total") - gen0, 1u) << m;
  EXPECT_EQ(metric(m, kClientGone), 1u);
  EXPECT_EQ(metric(m, kShutdown), 0u);
  // The server goes on serving.
  EXPECT_NO_THROW(post_ok(inst, "/v1/completions", {{"prompt", "after"}, {"max_tokens", 3}}));
}

// A stream whose client leaves before the first token (a long prefill): noticed without a write.
TEST(ServerCancel, StreamClientThatLeavesDuringPrefillIsNoticedWithoutAWrite) {
  Instance inst(ServerOptions{}, /*gated=*/true);
  inst.gate->set_open(false);
  const int fd =
      send_post(inst.server->port(), "/v1/chat/completions",
                {{"messages", kChat}, {"max_tokens", 200}, {"ignore_eos", true}, {"stream", true}});
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(inst.gate->wait_blocked());
  close(fd);
  EXPECT_TRUE(wait_metric(inst, kClientGone, 1)) << inst.server->metrics();
  inst.gate->set_open(true);
  ASSERT_TRUE(wait_idle(inst));
  EXPECT_LE(metric(inst.server->metrics(), "moeflow_generated_tokens_total"), 1u);
}

// A queued request whose client leaves never runs; the running one is not disturbed.
TEST(ServerCancel, QueuedRequestWhoseClientLeavesNeverRuns) {
  Instance inst(ServerOptions{}, /*gated=*/true);
  inst.gate->set_open(false);
  int status = 0;
  std::thread a([&] {
    auto c = inst.client();
    auto r = c.Post("/v1/completions",
                    json{{"prompt", "first"}, {"max_tokens", 4}, {"ignore_eos", true}}.dump(),
                    "application/json");
    status = r ? r->status : -1;
  });
  ASSERT_TRUE(inst.gate->wait_blocked());
  const int fd = send_post(inst.server->port(), "/v1/completions",
                           {{"prompt", "second"}, {"max_tokens", 100}, {"ignore_eos", true}});
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(wait_metric(inst, "moeflow_queue_length", 1));
  close(fd);
  EXPECT_TRUE(wait_metric(inst, kClientGone, 1));
  inst.gate->set_open(true);
  a.join();
  EXPECT_EQ(status, 200);
  ASSERT_TRUE(wait_idle(inst));
  EXPECT_EQ(metric(inst.server->metrics(), "moeflow_generated_tokens_total"), 4u);
}

TEST(ServerShutdown, RunningRequestsFinishWithinTheTimeoutAndNewOnesAreRefused) {
  ServerOptions so;
  so.shutdown_timeout_s = 30;
  Instance inst(so, /*gated=*/true);
  const int port = inst.server->port();
  inst.gate->set_open(false);
  int status = 0;
  json body;
  std::thread a([&] {
    auto c = inst.client();
    auto r = c.Post("/v1/completions",
                    json{{"prompt", "finish me"}, {"max_tokens", 5}, {"ignore_eos", true}}.dump(),
                    "application/json");
    status = r ? r->status : -1;
    if (r && r->status == 200) body = json::parse(r->body);
  });
  ASSERT_TRUE(inst.gate->wait_blocked());
  double stop_s = 0;
  std::thread stopper([&] {
    const auto t0 = Clock::now();
    inst.server->stop_gracefully();
    stop_s = seconds_since(t0);
  });
  // Accepting stops at once: new connections are refused while the request runs on.
  bool refused = false;
  for (int i = 0; i < 500 && !refused; ++i) {
    const int fd = connect_to(port);
    refused = fd < 0;
    if (fd >= 0) close(fd);
    if (!refused) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(refused);
  inst.gate->set_open(true);
  a.join();
  stopper.join();
  EXPECT_EQ(status, 200);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 5);
  EXPECT_LT(stop_s, 10) << "the graceful stop waited past the end of the work";
  EXPECT_EQ(metric(inst.server->metrics(), kShutdown), 0u);
}

// At the deadline a running stream (n = 2, include_usage) ends each choice with finish_reason
// "cancelled", then the usage, then an error event, then [DONE]; a plain request still queued
// gets a 503.
TEST(ServerShutdown, AtTheDeadlineStreamsEndWithFinishReasonUsageAndAnError) {
  ServerOptions so;
  so.shutdown_timeout_s = 0.2;
  Instance inst(so, /*gated=*/true);
  inst.gate->set_open(false);
  std::string stream_body;
  int stream_status = 0, queued_status = 0;
  json queued_error;
  std::thread a([&] {
    auto c = inst.client();
    auto r = c.Post("/v1/chat/completions",
                    json{{"messages", kChat},
                         {"n", 2},
                         {"max_tokens", 100},
                         {"ignore_eos", true},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}}
                        .dump(),
                    "application/json");
    stream_status = r ? r->status : -1;
    if (r) stream_body = r->body;
  });
  ASSERT_TRUE(inst.gate->wait_blocked());
  std::thread b([&] {
    auto c = inst.client();
    auto r = c.Post("/v1/completions", json{{"prompt", "queued"}, {"max_tokens", 4}}.dump(),
                    "application/json");
    queued_status = r ? r->status : -1;
    if (r) queued_error = json::parse(r->body);
  });
  ASSERT_TRUE(wait_metric(inst, "moeflow_queue_length", 1));
  std::thread stopper([&] { inst.server->stop_gracefully(); });
  // Past the deadline the running job is cancelled; the engine notices at its next token.
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  inst.gate->set_open(true);
  a.join();
  b.join();
  stopper.join();

  EXPECT_EQ(queued_status, 503);
  EXPECT_EQ(queued_error["error"]["code"], "shutting_down") << queued_error.dump();

  EXPECT_EQ(stream_status, 200);
  bool done = false;
  const std::vector<json> events = parse_sse(stream_body, &done);
  EXPECT_TRUE(done) << stream_body;
  ASSERT_GE(events.size(), 3u) << stream_body;
  std::vector<std::string> finish(2);
  size_t usage_at = 0, error_at = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    if (e.contains("error")) {
      error_at = i;
      continue;
    }
    if (e["choices"].empty() && e["usage"].is_object()) usage_at = i;
    for (const json& c : e["choices"])
      if (!c["finish_reason"].is_null()) finish[c["index"].get<size_t>()] = c["finish_reason"];
  }
  EXPECT_EQ(finish, (std::vector<std::string>{"cancelled", "cancelled"})) << stream_body;
  EXPECT_EQ(error_at, events.size() - 1) << "the error event comes last, before [DONE]";
  EXPECT_GT(usage_at, 0u);
  EXPECT_LT(usage_at, error_at);
  const json& err = events.back()["error"];
  EXPECT_EQ(err["code"], "shutting_down");
  EXPECT_EQ(err["type"], "server_error");
  EXPECT_NE(err["message"].get<std::string>().find("shutting down"), std::string::npos);
  EXPECT_LE(events[usage_at]["usage"]["completion_tokens"].get<int>(), 1);
  EXPECT_EQ(metric(inst.server->metrics(), kShutdown), 2u);  // the stream and the queued one
}

TEST(ServerShutdown, AnIdleServerStopsAtOnce) {
  ServerOptions so;
  so.shutdown_timeout_s = 30;
  Instance inst(so);
  // A kept-alive connection, as a client leaves one.
  auto c = inst.client();
  ASSERT_TRUE(c.Get("/health"));
  const auto t0 = Clock::now();
  inst.server->stop_gracefully();
  const double s = seconds_since(t0);
  RecordProperty("idle_stop_ms", std::to_string((int)(s * 1000)));
  EXPECT_LT(s, 1.0);
}

// ---- `moeflow serve` ------------------------------------------------------------------------

// Waits (bounded: 10 s) for the process to exit; returns its wait status, or -1.
int wait_exit(ServeProcess& p, double* seconds) {
  const auto t0 = Clock::now();
  int st = 0;
  for (int i = 0; i < 1000; ++i) {
    if (waitpid(p.pid, &st, WNOHANG) == p.pid) {
      *seconds = seconds_since(t0);
      p.pid = -1;
      return st;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return -1;
}

TEST(ServeBinary, IdleSigtermExitsAtOnce) {
  ServeProcess p({});
  ASSERT_GT(p.port, 0) << p.startup;
  auto c = p.client();
  ASSERT_TRUE(c.Get("/health"));  // a kept-alive connection stays open
  ASSERT_EQ(kill(p.pid, SIGTERM), 0);
  double s = 0;
  const int st = wait_exit(p, &s);
  ASSERT_NE(st, -1) << "serve did not exit on SIGTERM";
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  RecordProperty("idle_sigterm_exit_ms", std::to_string((int)(s * 1000)));
  EXPECT_LT(s, 1.0);
}

TEST(ServeBinary, ShutdownTimeoutIsValidated) {
  for (const char* bad : {"-1", "nan", "1e9", "soon"}) {
    const Cmd c = run_cmd("serve -m " + shell_quote(tiny_model()) +
                              " --port 0 --shutdown-timeout " + std::string(bad),
                          true);
    EXPECT_NE(c.rc, 0) << bad;
    EXPECT_NE(c.out.find("--shutdown-timeout"), std::string::npos) << bad << ": " << c.out;
  }
}

}  // namespace
}  // namespace moeflow::test::server_lifecycle
