// `moeflow chat` as a person uses it: on a terminal (a pty) lines are edited and recalled with
// the arrow keys; Ctrl-C stops a reply without losing the conversation; a pipe still works.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "chat_template/chat_template.h"
#include "server/text_generation.h"
#include "server_fixture.h"

namespace moeflow::test {
namespace {

using Clock = std::chrono::steady_clock;

// Reads from fd into `out` until `marker` appears after position `from` (or timeout_s passes).
bool read_until(int fd, std::string& out, const std::string& marker, size_t from,
                double timeout_s) {
  const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (out.find(marker, from) == std::string::npos) {
    if (Clock::now() >= end) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return out.find(marker, from) != std::string::npos;
    out.append(buf, (size_t)n);
  }
  return true;
}

bool wait_exit(pid_t pid, int* status, double timeout_s) {
  const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < end) {
    if (waitpid(pid, status, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, status, 0);
  return false;
}

std::vector<char*> argv_of(std::vector<std::string>& args) {
  std::vector<char*> v;
  for (auto& a : args) v.push_back(a.data());
  v.push_back(nullptr);
  return v;
}

// Greedy replies of a conversation, through the engine as `chat` runs it.
std::vector<std::string> replies(const std::vector<std::string>& users, int n_predict) {
  auto file = std::shared_ptr<const GgufFile>(GgufFile::open(tiny_model()));
  EngineOptions eo;
  eo.n_threads = 1;
  eo.n_ctx = 512;
  Engine eng(file, eo);
  auto tok = Tokenizer::from_gguf(*file);
  const ModelChatTemplate t = model_chat_template(*tok);
  TextGenParams p;
  p.max_tokens = n_predict;
  p.sampling.temperature = 0;
  json hist = json::array();
  std::vector<std::string> out;
  for (const std::string& u : users) {
    hist.push_back({{"role", "user"}, {"content", u}});
    out.push_back(generate_text(eng, *tok, t.tokenize(*tok, t.format(hist, true)), p).text);
    hist.push_back({{"role", "assistant"}, {"content", out.back()}});
  }
  return out;
}

// What a reply looks like through a terminal (the pty turns "\n" into "\r\n").
std::string on_tty(std::string s) {
  for (size_t p = s.find('\n'); p != std::string::npos; p = s.find('\n', p + 2))
    s.replace(p, 1, "\r\n");
  return s;
}

TEST(ChatCli, LineEditingAndHistoryOnATerminal) {
  const std::vector<std::string> want = replies({"Hello", "HelXYlo"}, 6);
  ASSERT_NE(want[1], replies({"Hello", "Hello"}, 6)[1])
      << "the edit would not be visible in the reply";
  int master = -1;
  std::vector<std::string> args = {MOEFLOW_BINARY, "chat", "-m", tiny_model(), "--temp", "0",
                                   "-n",           "6",    "-t", "1",          "-c",     "512"};
  auto argv = argv_of(args);
  const pid_t pid = forkpty(&master, nullptr, nullptr, nullptr);
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execv(argv[0], argv.data());
    _exit(127);
  }
  std::string out;
  ASSERT_TRUE(read_until(master, out, "> ", 0, 20)) << out;
  size_t mark = out.size();
  ASSERT_EQ(write(master, "Hello\r", 6), 6);
  // The reply, then a fresh prompt.
  const std::string reply0 = on_tty(want[0]) + "\r\n";
  ASSERT_TRUE(read_until(master, out, reply0, mark, 10)) << out.substr(mark);
  mark = out.find(reply0, mark) + reply0.size();
  ASSERT_TRUE(read_until(master, out, "> ", mark, 5));
  mark = out.size();
  // Up recalls "Hello"; Left twice, type XY, Enter: "HelXYlo".
  const std::string keys = "\x1b[A\x1b[D\x1b[DXY\r";
  ASSERT_EQ(write(master, keys.data(), keys.size()), (ssize_t)keys.size());
  const std::string reply1 = on_tty(want[1]) + "\r\n";
  ASSERT_TRUE(read_until(master, out, reply1, mark, 10)) << out.substr(mark);
  // Keys typed before the editor is back in raw mode would be flushed (TCSAFLUSH) or taken by the
  // terminal's cooked mode: wait for the next prompt, which is drawn once raw mode is on.
  mark = out.find(reply1, mark) + reply1.size();
  ASSERT_TRUE(read_until(master, out, "> ", mark, 10)) << out.substr(mark);
  // Ctrl-C discards a half-typed line; Ctrl-D on an empty line ends the chat.
  ASSERT_EQ(write(master, "abc\x03\x04", 5), 5);
  int st = 0;
  ASSERT_TRUE(wait_exit(pid, &st, 10)) << out;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  close(master);
}

TEST(ChatCli, CtrlCStopsTheReplyAndTheConversationGoesOn) {
  int in[2], out[2];
  ASSERT_EQ(pipe(in), 0);
  ASSERT_EQ(pipe(out), 0);
  const std::string err_path =
      ::testing::TempDir() + "/chat_sigint_" + std::to_string(getpid()) + ".log";
  std::vector<std::string> args = {MOEFLOW_BINARY, "chat",  "-m", tiny_model(), "--temp", "0",
                                   "-n",           "60000", "-c", "65536",      "-t",     "1",
                                   "--ignore-eos", "-v"};
  auto argv = argv_of(args);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    const int e = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(e, 2);
    close(in[1]);
    close(out[0]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  // Reads until `more` bytes beyond what was read so far arrived.
  std::string got;
  auto read_more = [&](size_t more) {
    const size_t want = got.size() + more;
    const auto t0 = Clock::now();
    while (got.size() < want && Clock::now() - t0 < std::chrono::seconds(20)) {
      char buf[256];
      pollfd p{out[0], POLLIN, 0};
      if (poll(&p, 1, 50) > 0) {
        const ssize_t n = read(out[0], buf, sizeof buf);
        if (n > 0) got.append(buf, (size_t)n);
      }
    }
    return got.size() >= want;
  };
  // A long reply (end-of-generation ignored, up to 60000 tokens): stopped once it has started.
  ASSERT_EQ(write(in[1], "Tell me a long story\n", 21), 21);
  ASSERT_TRUE(read_more(64));
  ASSERT_EQ(kill(pid, SIGINT), 0);
  // The chat takes the next line and answers it, with the stopped reply in the conversation.
  ASSERT_EQ(write(in[1], "And then?\n", 10), 10);
  auto err_text = [&] {
    std::ifstream f(err_path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  for (int i = 0; i < 2000 && err_text().find("reply stopped") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_NE(err_text().find("reply stopped"), std::string::npos) << err_text();
  // The first reply is over (its last bytes may still be in the pipe): the second one has
  // started once more output comes after them.
  for (;;) {  // drain what is in the pipe now: all of the first reply
    pollfd p{out[0], POLLIN, 0};
    char buf[4096];
    if (poll(&p, 1, 0) <= 0) break;
    const ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, (size_t)n);
  }
  ASSERT_TRUE(read_more(64));
  ASSERT_EQ(kill(pid, SIGINT), 0);
  close(in[1]);  // then end of input: the chat ends
  int st = 0;
  const bool exited = wait_exit(pid, &st, 60);
  close(out[0]);
  std::ifstream f(err_path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string err = ss.str();
  std::remove(err_path.c_str());
  ASSERT_TRUE(exited) << "chat did not finish after Ctrl-C\n" << err;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << err;
  const size_t stopped = err.find("reply stopped (Ctrl-C)");
  ASSERT_NE(stopped, std::string::npos) << err;
  EXPECT_NE(err.find("reply stopped (Ctrl-C)", stopped + 1), std::string::npos) << err;
  // Two replies: the first cancelled, the second one generated with the first turn in its
  // prompt (served from the prefix cache).
  const size_t first = err.find("generated");
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_NE(err.find("(cancelled)"), std::string::npos) << err;
  const size_t second = err.find("moeflow chat: prompt", first + 1);
  ASSERT_NE(second, std::string::npos) << err;
  const size_t cached = err.find("tokens (", second);
  ASSERT_NE(cached, std::string::npos);
  EXPECT_GT(std::atoi(err.c_str() + cached + 8), 20) << err.substr(second, 200);
}

}  // namespace
}  // namespace moeflow::test
