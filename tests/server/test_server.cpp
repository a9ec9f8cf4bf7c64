// The OpenAI-compatible server, in process on 127.0.0.1 (ephemeral ports) over a tiny generated
// model, driven with httplib::Client as a client would; `moeflow serve` (offloading, SIGTERM)
// and `moeflow chat` (piped turns) as binaries.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "chat_template/chat_template.h"
#include "core/error.h"
#include "experts/resident_provider.h"
#include "gguf/gguf_file.h"
#include "runtime/engine.h"
#include "server/server.h"
#include "server/text_generation.h"
#include "server_fixture.h"
#include "support/run_binary.h"
#include "tokenizer/tokenizer.h"

extern char** environ;

namespace moeflow::test {
namespace {

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { inst_ = new Instance(ServerOptions{}); }
  static void TearDownTestSuite() {
    delete inst_;
    inst_ = nullptr;
  }
  static Instance* inst_;

  static httplib::Result post(const std::string& path, const std::string& body) {
    auto c = inst_->client();
    return c.Post(path.c_str(), body, "application/json");
  }
  static json post_ok(const std::string& path, const json& body) {
    auto r = post(path, body.dump());
    if (!r) throw std::runtime_error("no response: " + httplib::to_string(r.error()));
    if (r->status != 200)
      throw std::runtime_error("HTTP " + std::to_string(r->status) + ": " + r->body);
    return json::parse(r->body);
  }
  // Reference generation: a second engine on the same file, the same code path as `run`.
  static TextGenResult reference(const std::vector<int32_t>& prompt, const TextGenParams& p) {
    EngineOptions eo;
    eo.n_threads = 1;
    eo.n_ctx = 256;
    Engine eng(inst_->file, eo);
    return generate_text(eng, *inst_->tok, prompt, p);
  }
};
Instance* ServerTest::inst_ = nullptr;

TEST_F(ServerTest, HealthAndModels) {
  auto c = inst_->client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(json::parse(h->body)["status"], "ok");
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200);
  const json j = json::parse(m->body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "tiny");
  EXPECT_EQ(j["data"][0]["meta"]["n_ctx"], 256);
  EXPECT_NE(inst_->server->template_description().find("ChatML"), std::string::npos);
}

TEST_F(ServerTest, CompletionGreedyEqualsMoeflowRun) {
  const Cmd run =
      run_cmd("run -m " + shell_quote(tiny_model()) + " -p 'Hello world' -n 16 --temp 0 -t 1");
  ASSERT_EQ(run.rc, 0);
  ASSERT_FALSE(run.out.empty());
  const std::string expected = run.out.substr(0, run.out.size() - 1);  // run ends with "\n"
  const json j = post_ok("/v1/completions", {{"model", "tiny"},
                                             {"prompt", "Hello world"},
                                             {"max_tokens", 16},
                                             {"temperature", 0},
                                             {"seed", 7}});
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"][0]["text"], expected);
  const auto n_prompt = inst_->tok->encode("Hello world", true, true).size();
  EXPECT_EQ(j["usage"]["prompt_tokens"], n_prompt);
  const int completion = j["usage"]["completion_tokens"];
  EXPECT_GE(completion, 1);
  EXPECT_LE(completion, 16);
  EXPECT_EQ(j["usage"]["total_tokens"], n_prompt + completion);
  const std::string fr = j["choices"][0]["finish_reason"];
  EXPECT_TRUE(fr == "length" ? completion == 16 : fr == "stop") << fr;
}

TEST_F(ServerTest, ChatGreedyEqualsEngineAndStreamsTheSameText) {
  const json msgs = json::parse(
      R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi there"}])");
  const json j =
      post_ok("/v1/chat/completions",
              {{"messages", msgs}, {"max_tokens", 20}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  const std::string text = j["choices"][0]["message"]["content"];
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 20);

  const ModelChatTemplate t = model_chat_template(*inst_->tok);
  const std::vector<int32_t> prompt = t.tokenize(*inst_->tok, t.format(msgs, true));
  TextGenParams p;
  p.max_tokens = 20;
  p.sampling.temperature = 0;
  p.ignore_eos = true;
  const TextGenResult ref = reference(prompt, p);
  EXPECT_EQ(text, ref.text);
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt.size());

  auto r = post("/v1/chat/completions", json{{"messages", msgs},
                                             {"max_tokens", 20},
                                             {"temperature", 0},
                                             {"ignore_eos", true},
                                             {"stream", true}}
                                            .dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  bool done = false;
  const auto chunks = parse_sse(r->body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(chunks.size(), 2u);
  EXPECT_EQ(chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  json last;
  EXPECT_EQ(reassemble(chunks, true, &last), text);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last["usage"]["completion_tokens"], 20);
  for (size_t i = 0; i + 1 < chunks.size(); ++i)
    EXPECT_TRUE(chunks[i]["choices"][0]["finish_reason"].is_null());
}

TEST_F(ServerTest, CompletionStreamingReassembles) {
  const json req = {{"prompt", "The quick brown fox"},
                    {"max_tokens", 24},
                    {"temperature", 0},
                    {"ignore_eos", true}};
  const json plain = post_ok("/v1/completions", req);
  json sreq = req;
  sreq["stream"] = true;
  auto r = post("/v1/completions", sreq.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  bool done = false;
  const auto chunks = parse_sse(r->body, &done);
  EXPECT_TRUE(done);
  json last;
  EXPECT_EQ(reassemble(chunks, false, &last), plain["choices"][0]["text"]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  // The same usage; the second request found its prompt in the prefix cache.
  for (const char* k : {"prompt_tokens", "completion_tokens", "total_tokens"})
    EXPECT_EQ(last["usage"][k], plain["usage"][k]);
  EXPECT_EQ(last["usage"]["prompt_tokens_details"]["cached_tokens"],
            plain["usage"]["prompt_tokens"].get<int>() - 1);
}

TEST_F(ServerTest, SeededSamplingIsReproducibleAndTokenIdPromptsWork) {
  const json req = {{"prompt", json::array({1, 50, 60, 70})},
                    {"max_tokens", 12},
                    {"temperature", 0.9},
                    {"top_k", 50},
                    {"top_p", 0.95},
                    {"seed", 1234},
                    {"ignore_eos", true}};
  const json a = post_ok("/v1/completions", req), b = post_ok("/v1/completions", req);
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  EXPECT_EQ(a["usage"]["prompt_tokens"], 4);
  TextGenParams p;
  p.max_tokens = 12;
  p.sampling.temperature = 0.9f;
  p.sampling.top_k = 50;
  p.sampling.top_p = 0.95f;
  p.sampling.seed = 1234;
  p.ignore_eos = true;
  EXPECT_EQ(a["choices"][0]["text"], reference({1, 50, 60, 70}, p).text);
}

TEST_F(ServerTest, StopStringsCutTheText) {
  const json base = {
      {"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string full = post_ok("/v1/completions", base)["choices"][0]["text"];
  // A stop string taken from the middle of the text, on character boundaries.
  size_t i = full.size() / 3;
  while (!utf8_boundary(full, i)) ++i;
  size_t e = i + 1;
  while (!utf8_boundary(full, e)) ++e;
  ASSERT_LT(e, full.size()) << "text too short: " << full;
  const std::string stop = full.substr(i, e - i);
  const std::string expected = full.substr(0, full.find(stop));
  json req = base;
  req["stop"] = json::array({"\x01never", stop});
  const json j = post_ok("/v1/completions", req);
  EXPECT_EQ(j["choices"][0]["text"], expected);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  req["stream"] = true;
  auto r = post("/v1/completions", req.dump());
  ASSERT_TRUE(r);
  bool done = false;
  json last;
  EXPECT_EQ(reassemble(parse_sse(r->body, &done), false, &last), expected);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(done);
}

TEST_F(ServerTest, ErrorsAreOpenAiStyleAndLeaveTheServerHealthy) {
  expect_error(post("/v1/chat/completions", "{not json"), 400, "");
  expect_error(post("/v1/chat/completions", "[1, 2]"), 400, "");
  expect_error(post("/v1/chat/completions",
                    R"({"model":"gpt-4","messages":[{"role":"user","content":"hi"}]})"),
               404, "model_not_found");
  expect_error(post("/v1/chat/completions", R"({"max_tokens":4})"), 400, "");
  expect_error(post("/v1/chat/completions", R"({"messages":[]})"), 400, "");
  expect_error(post("/v1/chat/completions", R"({"messages":[{"content":"no role"}]})"), 400, "");
  expect_error(post("/v1/chat/completions",
                    R"({"messages":[{"role":"user","content":"hi"}],"temperature":"hot"})"),
               400, "");
  expect_error(post("/v1/chat/completions",
                    R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":0})"),
               400, "");
  expect_error(post("/v1/completions", R"({"max_tokens":4})"), 400, "");
  expect_error(post("/v1/completions", R"({"prompt":[1, 99999]})"), 400, "");
  // Longer than the context (256): as text and as token ids.
  std::string long_text;
  for (int i = 0; i < 300; ++i) long_text += "word ";
  expect_error(post("/v1/completions", json{{"prompt", long_text}}.dump()), 400,
               "context_length_exceeded");
  expect_error(post("/v1/chat/completions",
                    json{{"messages", {{{"role", "user"}, {"content", long_text}}}}}.dump()),
               400, "context_length_exceeded");
  expect_error(post("/v1/completions", json{{"prompt", std::vector<int>(256, 5)}}.dump()), 400,
               "context_length_exceeded");
  auto c = inst_->client();
  auto nf = c.Get("/v1/nothing");
  expect_error(nf, 404, "not_found");
  // max_tokens beyond the context is clamped to what is left of it.
  const json j = post_ok("/v1/completions", {{"prompt", std::vector<int>(250, 5)},
                                             {"max_tokens", 100},
                                             {"temperature", 0},
                                             {"ignore_eos", true}});
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_NO_THROW(post_ok("/v1/completions", {{"prompt", "still fine"}, {"max_tokens", 4}}));
}

// Opens a raw connection, sends a streaming request, reads until the first SSE event and
// closes the socket (unread data pending: the kernel resets the connection).
void stream_then_disconnect(int port, const std::string& body) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ASSERT_EQ(connect(fd, (sockaddr*)&addr, sizeof addr), 0);
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), (ssize_t)req.size());
  std::string got;
  char buf[512];
  while (got.find("data: ") == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, (size_t)n);
  }
  EXPECT_NE(got.find("200 OK"), std::string::npos) << got;
  EXPECT_NE(got.find("data: "), std::string::npos) << got;
  close(fd);
}

TEST_F(ServerTest, ClientDisconnectStopsGeneration) {
  auto c = inst_->client();
  const std::string before = c.Get("/metrics")->body;
  const uint64_t gen0 = metric(before, "moeflow_generated_tokens_total");
  const uint64_t cancelled0 =
      metric(before, "moeflow_completions_total{finish_reason=\"cancelled\"}");
  ASSERT_NE(gen0, UINT64_MAX);
  const int max_tokens = 240;
  stream_then_disconnect(inst_->server->port(), json{{"prompt", "Tell me a long story"},
                                                     {"max_tokens", max_tokens},
                                                     {"temperature", 0},
                                                     {"ignore_eos", true},
                                                     {"stream", true}}
                                                    .dump());
  // Bounded wait for the engine to notice and go idle.
  uint64_t cancelled = cancelled0;
  std::string page;
  for (int i = 0; i < 500 && cancelled == cancelled0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    page = c.Get("/metrics")->body;
    cancelled = metric(page, "moeflow_completions_total{finish_reason=\"cancelled\"}");
  }
  EXPECT_EQ(cancelled, cancelled0 + 1) << page;
  const uint64_t generated = metric(page, "moeflow_generated_tokens_total") - gen0;
  EXPECT_LT(generated, (uint64_t)max_tokens / 2) << "generation went on after the client left";
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_NO_THROW(post_ok("/v1/completions", {{"prompt", "after"}, {"max_tokens", 4}}));
}

TEST_F(ServerTest, MetricsArePrometheusText) {
  post_ok("/v1/completions",
          {{"prompt", "count me"}, {"max_tokens", 3}, {"temperature", 0}, {"ignore_eos", true}});
  auto c = inst_->client();
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  const std::string& m = r->body;
  EXPECT_NE(m.find("# TYPE moeflow_generated_tokens_total counter"), std::string::npos);
  EXPECT_GE(metric(m, "moeflow_generated_tokens_total"), 3u);
  EXPECT_GE(metric(m, "moeflow_prompt_tokens_total"), 3u);
  EXPECT_GE(metric(m, "moeflow_http_requests_total{path=\"/v1/completions\",code=\"200\"}"), 1u);
  EXPECT_EQ(metric(m, "moeflow_offload_enabled"), 0u);
  EXPECT_EQ(metric(m, "moeflow_queue_length"), 0u);
  // Every sample line is "name{labels} value" or "name value".
  std::istringstream in(m);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    ASSERT_NE(sp, std::string::npos) << line;
    EXPECT_NO_THROW((void)std::stod(line.substr(sp + 1))) << line;
  }
}

TEST_F(ServerTest, ConcurrentClientsBoundedLoadNoErrorsNoGrowth) {
  constexpr int kClients = 4, kRequests = 5, kRounds = 3;
  std::atomic<int> errors{0};
  std::mutex emu;
  std::string first_error;
  auto round = [&](int r) {
    std::vector<std::thread> ts;
    for (int c = 0; c < kClients; ++c) {
      ts.emplace_back([&, c] {
        auto cli = inst_->client();
        for (int i = 0; i < kRequests; ++i) {
          const bool chat = (c + i) % 2 == 0;
          json body = {{"max_tokens", 8},
                       {"temperature", 0.7},
                       {"seed", r * 100 + c * 10 + i},
                       {"stream", i % 3 == 0}};
          if (chat)
            body["messages"] = {{{"role", "user"}, {"content", "client " + std::to_string(c)}}};
          else
            body["prompt"] = "request " + std::to_string(i);
          auto res = cli.Post(chat ? "/v1/chat/completions" : "/v1/completions", body.dump(),
                              "application/json");
          bool ok = res && res->status == 200;
          if (ok && !body["stream"].get<bool>())
            ok = json::parse(res->body)["usage"]["completion_tokens"].get<int>() >= 1;
          if (ok && body["stream"].get<bool>())
            ok = res->body.find("data: [DONE]") != std::string::npos;
          if (!ok) {
            ++errors;
            std::lock_guard lk(emu);
            if (first_error.empty())
              first_error = res ? std::to_string(res->status) + " " + res->body
                                : httplib::to_string(res.error());
          }
        }
      });
    }
    for (auto& t : ts) t.join();
  };
  round(0);
  const long rss_first = vm_rss_kib();
  for (int r = 1; r < kRounds; ++r) round(r);
  const long rss_last = vm_rss_kib();
  EXPECT_EQ(errors.load(), 0) << first_error;
  auto c = inst_->client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(json::parse(h->body)["queued"], 0);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  (void)rss_first;
  (void)rss_last;  // shadow memory and quarantine make RSS meaningless under sanitizers
#else
  // Slack: 8 MiB between the first and the last round (allocator caches, thread stacks touched).
  EXPECT_LT(rss_last - rss_first, 8 * 1024)
      << "VmRSS " << rss_first << " -> " << rss_last << " KiB";
#endif
}

TEST(ServerQueue, FullQueueAnswers503AndQueuedRequestsComplete) {
  ServerOptions so;
  so.max_queue = 1;
  Instance inst(so, /*gated=*/true);
  inst.gate->set_open(false);
  const std::string body = json{{"prompt", "queued"}, {"max_tokens", 4}, {"temperature", 0}}.dump();
  int status_a = 0, status_b = 0;
  std::thread a([&] {
    auto c = inst.client();
    auto r = c.Post("/v1/completions", body, "application/json");
    status_a = r ? r->status : -1;
  });
  ASSERT_TRUE(inst.gate->wait_blocked());  // A is running (blocked in the engine)
  std::thread b([&] {
    auto c = inst.client();
    auto r = c.Post("/v1/completions", body, "application/json");
    status_b = r ? r->status : -1;
  });
  // Bounded wait until B sits in the queue.
  auto c = inst.client();
  for (int i = 0; i < 2000; ++i) {
    auto h = c.Get("/health");
    if (h && json::parse(h->body)["queued"] == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);  // still answering while the engine is busy
  EXPECT_EQ(json::parse(h->body)["busy"], true);
  ASSERT_EQ(json::parse(h->body)["queued"], 1);
  auto r = c.Post("/v1/completions", body, "application/json");
  expect_error(r, 503, "queue_full");
  const std::string m = c.Get("/metrics")->body;
  EXPECT_EQ(metric(m, "moeflow_requests_rejected_total"), 1u);
  inst.gate->set_open(true);
  a.join();
  b.join();
  EXPECT_EQ(status_a, 200);
  EXPECT_EQ(status_b, 200);
}

TEST(ServerQueue, StopWhileBusyFinishesWaitingClients) {
  ServerOptions so;
  so.max_queue = 2;
  Instance inst(so, /*gated=*/true);
  inst.gate->set_open(false);
  const std::string body = json{{"prompt", "x"}, {"max_tokens", 4}, {"stream", true}}.dump();
  int status = 0;
  std::thread a([&] {
    auto c = inst.client();
    auto r = c.Post("/v1/completions", body, "application/json");
    status = r ? r->status : -1;
  });
  ASSERT_TRUE(inst.gate->wait_blocked());
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    inst.gate->set_open(true);
  });
  inst.server->stop();  // cancels the running request; must not hang
  opener.join();
  a.join();
  EXPECT_NE(status, 0);
}

// ---- the binaries ---------------------------------------------------------------------------

TEST(ServeBinary, OffloadingServesAndReportsExpertStatisticsThenStopsOnSigterm) {
  const std::string log =
      ::testing::TempDir() + "/serve_offload_" + std::to_string(getpid()) + ".log";
  std::remove(log.c_str());
  const std::string bin = MOEFLOW_BINARY, model = tiny_model();
  std::vector<std::string> args = {
      bin,           "serve", "-m", model, "--host",       "127.0.0.1", "--port",        "0",
      "-t",          "1",     "-c", "128", "--cache-rate", "0.5",       "--buffered-io", "--alias",
      "tiny-offload"};
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, bin.c_str(), &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  int port = 0;
  std::string text;
  for (int i = 0; i < 3000 && port == 0; ++i) {  // bounded: 30 s
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream f(log);
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
    const size_t p = text.find("listening on http://127.0.0.1:");
    if (p != std::string::npos) port = std::atoi(text.c_str() + p + 30);
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      pid = -1;
      break;
    }
  }
  ASSERT_GT(port, 0) << text;
  EXPECT_NE(text.find("using ChatML"), std::string::npos) << text;
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  auto r = c.Post("/v1/chat/completions",
                  json{{"model", "tiny-offload"},
                       {"messages", {{{"role", "user"}, {"content", "hello"}}}},
                       {"max_tokens", 8},
                       {"temperature", 0}}
                      .dump(),
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(metric(m->body, "moeflow_offload_enabled"), 1u) << m->body;
  EXPECT_GT(metric(m->body, "moeflow_expert_misses_total{layer=\"0\"}"), 0u) << m->body;
  EXPECT_GT(metric(m->body, "moeflow_expert_bytes_read_total{layer=\"0\"}"), 0u) << m->body;
  EXPECT_NE(m->body.find("moeflow_expert_stall_seconds_total{layer=\"3\"}"), std::string::npos);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int st = 0;
  bool exited = false;
  for (int i = 0; i < 1000 && !exited; ++i) {  // bounded: 10 s
    if (waitpid(pid, &st, WNOHANG) == pid)
      exited = true;
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
  }
  EXPECT_TRUE(exited) << "serve did not stop on SIGTERM";
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

TEST(ChatBinary, PipedTurnsKeepHistoryAndReset) {
  const std::string model = tiny_model();
  const std::string cmd = "printf 'Hello\\nHow are you?\\n/reset\\nHello\\n/exit\\nignored\\n' | " +
                          std::string(MOEFLOW_BINARY) + " chat -m " + shell_quote(model) +
                          " --temp 0 -n 12 -t 1 -c 256 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  ASSERT_EQ(WEXITSTATUS(st), 0);

  // The same conversation through the engine directly.
  auto file = std::shared_ptr<const GgufFile>(GgufFile::open(model));
  EngineOptions eo;
  eo.n_threads = 1;
  eo.n_ctx = 256;
  Engine eng(file, eo);
  auto tok = Tokenizer::from_gguf(*file);
  const ModelChatTemplate t = model_chat_template(*tok);
  TextGenParams params;
  params.max_tokens = 12;
  params.sampling.temperature = 0;
  json hist = json::array();
  auto turn = [&](const std::string& user) {
    hist.push_back({{"role", "user"}, {"content", user}});
    const auto ids = t.tokenize(*tok, t.format(hist, true));
    const std::string reply = generate_text(eng, *tok, ids, params).text;
    hist.push_back({{"role", "assistant"}, {"content", reply}});
    return reply;
  };
  const std::string r1 = turn("Hello"), r2 = turn("How are you?");
  hist = json::array();
  const std::string r3 = turn("Hello");
  EXPECT_EQ(r3, r1);
  EXPECT_EQ(out, r1 + "\n" + r2 + "\n" + r3 + "\n");
}

}  // namespace
}  // namespace moeflow::test
