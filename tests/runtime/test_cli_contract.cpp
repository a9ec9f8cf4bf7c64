// The CLI's error contract: one line on stderr per error, exit 2 for usage errors (checked
// before the model is loaded) and 1 for runtime errors; sampling flags follow the server's
// ranges; -t is capped at the CPUs available; a context too large for memory says how much.
#include <gtest/gtest.h>

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "support/run_binary.h"
#include "support/test_helpers.h"
#include "support/tiny_model.h"

namespace moeflow::test {
namespace {

struct Out {
  int rc;
  std::string out, err;
};

Out moeflow(const std::string& args) {
  const std::string err_path = temp_path("cli_err_" + std::to_string(getpid()) + ".txt");
  FILE* p = popen((std::string(MOEFLOW_BINARY) + " " + args + " 2>" + err_path).c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = p ? pclose(p) : -1;
  const Cmd c{WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
  std::ifstream f(err_path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::remove(err_path.c_str());
  return {c.rc, c.out, ss.str()};
}

size_t lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

const std::string& model() {
  static const std::string path = [] {
    TinySpec s;
    s.arch = "qwen2moe";
    const std::string p = temp_path("cli_contract.gguf");
    write_tiny_model(s, p);
    return p;
  }();
  return path;
}

TEST(CliContract, SamplingFlagsOutOfRangeAreUsageErrorsBeforeLoading) {
  // The model does not exist: the flag is refused before anything is opened.
  struct Case {
    const char* args;
    const char* flag;
  };
  const Case cases[] = {
      {"run -m /nonexistent.gguf -p x --temp -1", "--temp"},
      {"run -m /nonexistent.gguf -p x --temp 1e39", "--temp"},
      {"run -m /nonexistent.gguf -p x --repeat-penalty 0", "--repeat-penalty"},
      {"run -m /nonexistent.gguf -p x --top-p 2", "--top-p"},
      {"run -m /nonexistent.gguf -p x --presence-penalty 3", "--presence-penalty"},
      {"chat -m /nonexistent.gguf --min-p -0.5", "--min-p"},
      {"serve -m /nonexistent.gguf --temp -1", "--temp"},
      {"serve -m /nonexistent.gguf --frequency-penalty -2.5", "--frequency-penalty"},
  };
  for (const Case& c : cases) {
    const Out o = moeflow(c.args);
    EXPECT_EQ(o.rc, 2) << c.args << ": " << o.err;
    EXPECT_EQ(lines(o.err), 1u) << c.args << ": " << o.err;
    EXPECT_NE(o.err.find(c.flag), std::string::npos) << o.err;
    EXPECT_EQ(o.err.find("nonexistent"), std::string::npos)
        << "the model was opened first: " << o.err;
  }
  // The edges are fine.
  const Out ok = moeflow("run -m " + model() +
                         " -p ids:1,2,3 -n 2 -t 1 --temp 0 --top-p 1 --repeat-penalty 100 "
                         "--presence-penalty -2 --frequency-penalty 2 --stats none");
  EXPECT_EQ(ok.rc, 0) << ok.err;
}

// Names and ranges of the offloading and backend flags are checked when the command line is
// parsed: a typo is a usage error before the model is opened, whether or not the model would
// need offloading (before, `--cache-policy lfuu` passed silently on a model that fits, and the
// others exited 1 after opening it).
TEST(CliContract, OffloadAndBackendNamesAreUsageErrorsBeforeLoading) {
  struct Case {
    const char* args;
    const char* flag;
  };
  const Case cases[] = {
      {"run -m /nonexistent.gguf -p x --cache-policy lfuu", "--cache-policy"},
      {"run -m /nonexistent.gguf -p x --prefetch gatee", "--prefetch"},
      {"run -m /nonexistent.gguf -p x --mode exactt", "--mode"},
      {"run -m /nonexistent.gguf -p x --backend cudaa", "--backend"},
      {"bench -m /nonexistent.gguf --cpu-experts yes", "--cpu-experts"},
      {"bench -m /nonexistent.gguf --expert-source disk", "--expert-source"},
      {"run -m /nonexistent.gguf -p x --prefill-slots -1", "--prefill-slots"},
      {"run -m /nonexistent.gguf -p x --lookahead 0", "--lookahead"},
      {"run -m /nonexistent.gguf -p x --io-threads -2", "--io-threads"},
      {"run -m /nonexistent.gguf -p x --cache-policy static --policy-calib /nonexistent.mft",
       "--policy-calib"},
  };
  for (const Case& c : cases) {
    const Out o = moeflow(c.args);
    EXPECT_EQ(o.rc, 2) << c.args << ": " << o.err;
    EXPECT_EQ(lines(o.err), 1u) << c.args << ": " << o.err;
    EXPECT_NE(o.err.find(c.flag), std::string::npos) << o.err;
    EXPECT_EQ(o.err.find("nonexistent.gguf"), std::string::npos)
        << "the model was opened first: " << o.err;
  }
  // Known names on a model that needs no offloading still run.
  const Out ok = moeflow("run -m " + model() +
                         " -p ids:1,2,3 -n 2 -t 1 --temp 0 --cache-policy lfu-cycle "
                         "--prefetch gate --lookahead 2 --mode exact --stats none");
  EXPECT_EQ(ok.rc, 0) << ok.err;
}

// The rules between offload options (runtime/offload_options.h: check_offload_options) are
// usage errors found when the command line is parsed, before the model is opened, whether or
// not the model turns out to need offloading. They used to be checked while the engine was
// assembled, after the model was opened (exit 1), and some only when the model was offloaded:
// `--cache-policy static` without its calibration ran silently on a model that fit.
TEST(CliContract, OffloadOptionRulesAreUsageErrorsBeforeLoading) {
  struct Case {
    std::string args;
    const char* says;
  };
  const std::string run = "run -m /nonexistent.gguf -p x ";
  const std::string existing = model();  // any file that exists: --policy-calib checks that first
  const Case cases[] = {
      {run + "--cache-policy static", "--policy-calib"},
      {run + "--cache-policy lru --policy-calib " + existing, "--policy-calib calibrates"},
      {run + "--prefetch gate --predictor-model " + existing, "--predictor-model"},
      {run + "--hobbit-t1 0.5", "--hobbit-t1"},
      {run + "--mode hobbit --hobbit-t1 0.9 --hobbit-t2 0.5", "--hobbit-t1"},
      {run + "--skip-threshold 0.2", "--skip-threshold"},
      {run + "--mode skip --skip-threshold 1.5", "--skip-threshold"},
      {run + "--low-cache 1MiB", "--low-cache"},
      {run + "--mode hobbit --low-cache 1MiB --low-share 0.2", "exclusive"},
      {run + "--expert-cache 3parsecs", "--expert-cache"},
      {run + "--cache-rate 1.5", "--cache-rate"},
      {run + "--no-offload --expert-cache 1GiB", "exclusive"},
      {run + "--vram-budget 1GiB", "--vram-budget"},
      {run + "--backend standin --expert-cache 1GiB", "--expert-cache"},
      {run + "--backend standin --vram-budget 1GiB --vram-free 1GiB", "exclusive"},
      {"bench -m /nonexistent.gguf --backend standin --vram-limit lots", "--vram-limit"},
      {"perplexity -m /nonexistent.gguf -f /nonexistent.txt --mem-limit 1GiB --no-offload",
       "--mem-limit"},
      {"serve -m /nonexistent.gguf --cache-policy daop", "--policy-calib"},
      {run + "--mmap --no-offload", "--mmap"},
      {run + "--mmap --expert-cache 1GiB", "--mmap"},
      {"bench -m /nonexistent.gguf --backend standin --mmap", "--mmap"},
      {run + "--no-repack --mmap", "--no-repack"},
      {run + "--no-repack --no-offload", "--no-repack"},
      {"bench -m /nonexistent.gguf --backend standin --no-repack", "--no-repack"},
      {run + "--no-repack --cache-rate 0.5", "--no-repack"},
      {run + "--repack-offloaded --no-repack", "--repack-offloaded"},
      {run + "--repack-offloaded --no-offload", "--repack-offloaded"},
      {"bench -m /nonexistent.gguf --backend standin --repack-offloaded", "--repack-offloaded"},
  };
  for (const Case& c : cases) {
    const Out o = moeflow(c.args);
    EXPECT_EQ(o.rc, 2) << c.args << ": " << o.err;
    EXPECT_EQ(lines(o.err), 1u) << c.args << ": " << o.err;
    EXPECT_NE(o.err.find(c.says), std::string::npos) << c.args << ": " << o.err;
    EXPECT_EQ(o.err.find("nonexistent"), std::string::npos) << "a file was opened first: " << o.err;
  }
  // On a model that fits (no offloading needed) the same rule holds.
  const Out fits =
      moeflow("run -m " + model() + " -p ids:1,2,3 -n 2 -t 1 --cache-policy static --stats none");
  EXPECT_EQ(fits.rc, 2) << fits.err;
  EXPECT_NE(fits.err.find("--policy-calib"), std::string::npos) << fits.err;
}

// --preset names a paper's configuration as `moeflow sim --preset` does (trace/presets.h); the
// live engine runs its policy and predictor, and the statistics name the preset.
TEST(CliContract, PresetSetsThePaperPolicyAndPredictor) {
  struct Case {
    const char* preset;
    const char* policy;
    const char* prefetch;
  };
  for (const Case& c : {Case{"moe-infinity", "moe-infinity", "eamc"},
                        Case{"hobbit", "hobbit", "stacked"}, Case{"promoe", "lru", "token"},
                        Case{"duoserve", "lru", "duoserve"}, Case{"lru", "lru", "none"}}) {
    const Out o = moeflow("run -m " + model() +
                          " -p ids:1,2,3 -n 3 -t 1 --temp 0 --cache-rate 0.5 --preset " + c.preset +
                          " --stats json");
    ASSERT_EQ(o.rc, 0) << c.preset << ": " << o.err;
    std::string last, line;  // the statistics: the last line on stderr
    for (std::istringstream in(o.err); std::getline(in, line);)
      if (!line.empty()) last = line;
    const nlohmann::json j = nlohmann::json::parse(last, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << o.err;
    EXPECT_EQ(j["offload"]["policy"], c.policy) << c.preset;
    EXPECT_EQ(j["offload"]["prefetch"], c.prefetch) << c.preset;
    EXPECT_EQ(j["offload"]["preset"], c.preset);
  }
  // A preset sets both: giving either as well is a usage error, as is a simulator-only name.
  for (const char* args :
       {"--preset hobbit --cache-policy lru", "--preset duoserve --prefetch gate",
        "--preset ondemand", "--preset daop"}) {
    const Out o = moeflow("run -m /nonexistent.gguf -p x " + std::string(args));
    EXPECT_EQ(o.rc, 2) << args << ": " << o.err;
    EXPECT_EQ(lines(o.err), 1u) << args << ": " << o.err;
  }
}

TEST(CliContract, ParseErrorsExitTwoWithOneLine) {
  for (const char* args :
       {"run -p x", "run -m x -p y -n abc", "run -m x -p y --no-such-flag", "", "no-such-command",
        "serve -m x --port 70000", "run -m x -p y -t -3", "run -m x -p y -n -5"}) {
    const Out o = moeflow(args);
    EXPECT_EQ(o.rc, 2) << args << ": " << o.err;
    EXPECT_EQ(lines(o.err), 1u) << args << ": " << o.err;
    EXPECT_NE(o.err.find("error"), std::string::npos) << o.err;
  }
  EXPECT_EQ(moeflow("run --help").rc, 0);
  EXPECT_EQ(moeflow("--help").rc, 0);
}

// `moeflow version` and `moeflow --version` name the commit the binary was built from, with
// "-dirty" when the tree had uncommitted changes (what the benchmark scripts record), or
// "unknown" when it was built without git.
TEST(CliContract, VersionNamesTheCommitItWasBuiltFrom) {
  const bool git_checkout = std::filesystem::exists(std::string(MOEFLOW_SOURCE_DIR) + "/.git");
  const std::regex line(
      git_checkout ? R"(^moeflow \d+\.\d+\.\d+ \(commit [0-9a-f]{7,40}(-dirty)?\)\n)"
                   : R"(^moeflow \d+\.\d+\.\d+ \(commit ([0-9a-f]{7,40}(-dirty)?|unknown)\)\n)");
  for (const char* args : {"version", "--version"}) {
    const Out o = moeflow(args);
    EXPECT_EQ(o.rc, 0) << args << ": " << o.err;
    EXPECT_TRUE(std::regex_search(o.out, line)) << args << ": " << o.out;
  }
  EXPECT_NE(moeflow("version").out.find("simd: "), std::string::npos);
}

TEST(CliContract, RuntimeErrorsExitOneWithOneLine) {
  const Out o = moeflow("run -m /nonexistent.gguf -p x");
  EXPECT_EQ(o.rc, 1);
  EXPECT_EQ(lines(o.err), 1u) << o.err;
  EXPECT_EQ(o.err.rfind("moeflow: error: ", 0), 0u) << o.err;
}

TEST(CliContract, ThreadsAreCappedAtTheCpusAvailable) {
  const int cpus = default_thread_count();
  const Out o = moeflow("run -m " + model() + " -p ids:1,2,3 -n 2 -t 1000 --temp 0");
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.err.find("-t 1000"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("| " + std::to_string(cpus) + " threads"), std::string::npos) << o.err;
}

TEST(CliContract, AContextTooLargeForMemorySaysHowMuch) {
  const Out o = moeflow("run -m " + model() + " -p ids:1,2,3 -n 2 -t 1 -c 100000000000");
  EXPECT_EQ(o.rc, 1);
  EXPECT_EQ(lines(o.err), 1u) << o.err;
  // The memory plan (runtime/auto_fit) names the KV cache of that context and its size before
  // anything is allocated.
  EXPECT_NE(o.err.find("KV cache"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("-c 100000000000"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("GiB"), std::string::npos) << o.err;
  // With an explicit budget the plan is skipped, and the engine names the context itself.
  const Out e =
      moeflow("run -m " + model() + " -p ids:1,2,3 -n 2 -t 1 -c 100000000000 --no-offload");
  EXPECT_EQ(e.rc, 1);
  EXPECT_EQ(lines(e.err), 1u) << e.err;
  EXPECT_NE(e.err.find("context size 100000000000 (-c) needs"), std::string::npos) << e.err;
}

// gen-model reports progress only when a tensor is written; the bar estimates in between, so
// on a terminal it shows values inside the first tensor before that tensor is done.
TEST(CliContract, GenModelProgressMovesWithinATensor) {
  const std::string gen =
      "gen-model --arch mixtral --preset 8x7b --layers 1 --experts 1 --expert-used 1 --type F16 -t "
      "1";
  const Out plan = moeflow(gen + " -o /dev/null --dry-run");
  ASSERT_EQ(plan.rc, 0) << plan.err;
  const nlohmann::json j = nlohmann::json::parse(plan.out);
  const double first =
      100.0 * 4096 * 32000 * 2 / j["tensor_bytes"].get<double>();  // token_embd, F16
  ASSERT_EQ(j["tensors"][0]["name"], "token_embd.weight");
  const std::string path = temp_path("progress.gguf");
  std::vector<std::string> args = {MOEFLOW_BINARY};
  std::istringstream in(gen + " -o " + path);
  for (std::string w; in >> w;) args.push_back(w);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int master = -1;
  const pid_t pid = forkpty(&master, nullptr, nullptr, nullptr);
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execv(argv[0], argv.data());
    _exit(127);
  }
  std::string out;
  bool inside = false, passed = false;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!inside && !passed && std::chrono::steady_clock::now() < end) {
    pollfd p{master, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(master, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, (size_t)n);
    // Frames look like "\r[###   ]  12.3%  0.12 / 1.00 GB  3 s ".
    for (size_t at = out.find('%'); at != std::string::npos; at = out.find('%', at + 1)) {
      const double pct = std::atof(out.c_str() + out.rfind(']', at) + 1);
      inside |= pct > 0 && pct < first - 0.5;
      passed |= pct >= first;
    }
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  close(master);
  std::remove(path.c_str());
  std::remove((path + ".tmp").c_str());
  EXPECT_TRUE(inside) << "no frame inside the first tensor (0% .. " << first
                      << "%): " << out.substr(0, 600);
}

}  // namespace
}  // namespace moeflow::test
