#pragma once
// What the server tests share: the tiny generated model, an in-process server over it (with an
// optional gate that holds the engine busy on demand), SSE parsing, error and metric checks.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "experts/resident_provider.h"
#include "gguf/gguf_file.h"
#include "runtime/engine.h"
#include "server/server.h"
#include "support/run_binary.h"
#include "tokenizer/tokenizer.h"

extern "C" char** environ;

namespace moeflow::test {

using json = nlohmann::ordered_json;

inline std::string shell_quote(const std::string& s) { return "'" + s + "'"; }

inline Cmd run_cmd(const std::string& args, bool merge_stderr = false) {
  return run_moeflow(args, merge_stderr);
}

// The tiny generated Mixtral (SentencePiece vocabulary of 512, no chat template: ChatML),
// removed when the process exits.
struct TinyModelFile {
  std::string path;
  TinyModelFile() {
    // Per process: ctest runs each test as its own process, possibly in parallel.
    path = ::testing::TempDir() + "/server_tiny_mixtral_" + std::to_string(getpid()) + ".gguf";
    const Cmd c =
        run_cmd("gen-model --arch mixtral --preset tiny -q -o " + shell_quote(path), true);
    if (c.rc != 0) throw std::runtime_error("gen-model failed: " + c.out);
  }
  ~TinyModelFile() { std::remove(path.c_str()); }
};

inline const std::string& tiny_model() {
  static const TinyModelFile f;
  return f.path;
}

// A resident provider whose acquire() can be held closed: keeps the engine thread busy on
// demand, so queueing and 503 are tested without timing assumptions.
class GatedProvider : public ExpertProvider {
 public:
  explicit GatedProvider(const GgufFile& f) : inner_(f) {}
  ExpertView acquire(int layer, int expert, Precision p) override {
    {
      std::unique_lock lk(mu_);
      ++waiting_;
      cv_.notify_all();
      cv_.wait(lk, [&] { return open_; });
      --waiting_;
    }
    return inner_.acquire(layer, expert, p);
  }
  void release(int layer, int expert, Precision p) override { inner_.release(layer, expert, p); }
  void set_open(bool open) {
    {
      std::lock_guard lk(mu_);
      open_ = open;
    }
    cv_.notify_all();
  }
  // Waits (bounded) until the engine is blocked in acquire().
  bool wait_blocked() {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, std::chrono::seconds(20), [&] { return waiting_ > 0; });
  }

 private:
  ResidentExpertProvider inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int waiting_ = 0;
};

struct Instance {
  std::shared_ptr<const GgufFile> file;
  std::shared_ptr<GatedProvider> gate;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Server> server;

  // `model` (default: the tiny Mixtral) with `state_snapshots` recurrent state snapshots.
  explicit Instance(ServerOptions so, bool gated = false, int64_t n_ctx = 256,
                    const std::string& model = "", int state_snapshots = 0) {
    file = GgufFile::open(model.empty() ? tiny_model() : model);
    if (gated) gate = std::make_shared<GatedProvider>(*file);
    EngineOptions eo;
    eo.n_threads = 1;
    eo.n_ctx = n_ctx;
    eo.state_snapshots = state_snapshots;
    engine = std::make_unique<Engine>(file, eo, gate);
    tok = Tokenizer::from_gguf(*file);
    so.host = "127.0.0.1";
    so.port = 0;
    so.model_id = "tiny";
    server = std::make_unique<Server>(*engine, *tok, so);
    server->start();
  }
  ~Instance() {
    if (gate) gate->set_open(true);
    server->stop();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", server->port());
    c.set_read_timeout(60, 0);
    c.set_connection_timeout(10, 0);
    return c;
  }
};

// SSE body -> the JSON objects of its "data:" lines; *done says whether "[DONE]" ended it.
// POSTs a JSON body; post_ok throws unless the answer is 200 and returns its JSON.
inline httplib::Result post(const Instance& inst, const std::string& path, const std::string& body,
                            const std::string& content_type = "application/json") {
  auto c = inst.client();
  return c.Post(path.c_str(), body, content_type.c_str());
}
inline json post_ok(const Instance& inst, const std::string& path, const json& body) {
  auto r = post(inst, path, body.dump());
  if (!r) throw std::runtime_error("no response: " + httplib::to_string(r.error()));
  if (r->status != 200)
    throw std::runtime_error("HTTP " + std::to_string(r->status) + ": " + r->body);
  return json::parse(r->body);
}

inline std::vector<json> parse_sse(const std::string& body, bool* done) {
  std::vector<json> out;
  *done = false;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    EXPECT_EQ(line.rfind("data: ", 0), 0u) << "unexpected SSE line: " << line;
    const std::string payload = line.substr(6);
    if (payload == "[DONE]") {
      *done = true;
      continue;
    }
    EXPECT_FALSE(*done) << "data after [DONE]";
    out.push_back(json::parse(payload));
  }
  return out;
}

inline std::string reassemble(const std::vector<json>& chunks, bool chat, json* last) {
  std::string text;
  for (const json& c : chunks) {
    const json& ch = c["choices"][0];
    if (chat) {
      if (ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>();
    } else {
      text += ch["text"].get<std::string>();
    }
  }
  if (!chunks.empty()) *last = chunks.back();
  return text;
}

inline void expect_error(const httplib::Result& r, int status, const std::string& code_or_empty) {
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, status) << r->body;
  const json j = json::parse(r->body);
  ASSERT_TRUE(j.contains("error")) << r->body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
  EXPECT_TRUE(j["error"]["type"].is_string());
  if (!code_or_empty.empty()) {
    EXPECT_EQ(j["error"]["code"], code_or_empty) << r->body;
  }
}

inline bool utf8_boundary(const std::string& s, size_t i) {
  return i >= s.size() || ((unsigned char)s[i] & 0xC0) != 0x80;
}

inline uint64_t metric(const std::string& page, const std::string& name) {
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(name + " ", 0) == 0) return (uint64_t)std::stod(line.substr(name.size() + 1));
  return UINT64_MAX;
}

inline long vm_rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// `moeflow serve` as a separate process (its own RSS, its own signals): started on a free port,
// killed with SIGKILL if still running when destroyed.
struct ServeProcess {
  pid_t pid = -1;
  int port = 0;
  std::string log, startup;

  explicit ServeProcess(const std::vector<std::string>& extra_args) {
    log = ::testing::TempDir() + "/serve_" + std::to_string(getpid()) + "_" +
          std::to_string(counter()++) + ".log";
    std::remove(log.c_str());
    const std::string bin = MOEFLOW_BINARY;
    std::vector<std::string> args = {bin,         "serve",  "-m", tiny_model(), "--host",
                                     "127.0.0.1", "--port", "0",  "-t",         "1"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    if (posix_spawn(&pid, bin.c_str(), &fa, nullptr, argv.data(), environ) != 0) pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    for (int i = 0; i < 3000 && pid > 0 && port == 0; ++i) {  // bounded: 30 s
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::ifstream f(log);
      std::stringstream ss;
      ss << f.rdbuf();
      startup = ss.str();
      const size_t p = startup.find("listening on http://127.0.0.1:");
      if (p != std::string::npos) port = std::atoi(startup.c_str() + p + 30);
      int st;
      if (waitpid(pid, &st, WNOHANG) == pid) pid = -1;
    }
  }
  ~ServeProcess() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    std::remove(log.c_str());
  }
  // A field of /proc/PID/status in KiB (VmRSS, VmHWM), -1 if unreadable.
  long status_kib(const std::string& field) const {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
    return -1;
  }
  // Resets VmHWM to the current RSS (Linux >= 4.0), so the next peak is this test's own.
  void reset_peak() const {
    std::ofstream f("/proc/" + std::to_string(pid) + "/clear_refs");
    f << "5";
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    c.set_connection_timeout(10, 0);
    return c;
  }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
};

}  // namespace moeflow::test
