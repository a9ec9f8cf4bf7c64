// `moeflow chat`: an interactive conversation on stdin/stdout. Each line is a user turn; the
// reply streams to stdout followed by a newline. The whole history goes through the model's
// chat template every turn (ChatML when the model has none); the prefix cache keeps the KV
// cache of the conversation so far, so a turn prefills only what is new. Commands: /reset,
// /exit. On a terminal lines are edited with the usual keys and Up/Down recall earlier ones
// (cli/line_editor.h); Ctrl-C stops a reply. Works with a pipe as stdin (no prompts then), e.g.
//   printf 'Hello\nAnd then?\n' | moeflow chat -m model.gguf --temp 0
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "chat_template/chat_template.h"
#include "cli/command.h"
#include "cli/common_options.h"
#include "cli/line_editor.h"
#include "cli/offload_flags.h"
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "runtime/engine.h"
#include "runtime/prefix_cache.h"
#include "server/text_generation.h"
#include "tokenizer/tokenizer.h"

namespace moeflow::cli {
namespace {

struct ChatArgs {
  std::string model, system, template_file;
  int n_predict = -1;
  int threads = 0;
  int64_t ctx = 0;
  int batch = 256;
  bool verbose = false;
  bool no_prefix_cache = false;
  bool ignore_eos = false;
  SamplerParams sp;
  OffloadOptions offload;
  SnapshotFlags snapshots;
};

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// Ctrl-C stops the reply being generated (the conversation goes on); while a line is read from
// a pipe it ends the chat. On a terminal the line editor sees Ctrl-C as a key instead.
std::atomic<bool> g_sigint{false};
extern "C" void on_sigint(int) { g_sigint.store(true); }

// SIGINT goes to this thread only (the engine's threads start with it blocked), so a read of
// stdin is interrupted by it; no SA_RESTART for the same reason.
struct SigintToThisThread {
  sigset_t set{};
  struct sigaction old {};
  SigintToThisThread() {
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }
  void arm() {
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  }
  ~SigintToThisThread() { sigaction(SIGINT, &old, nullptr); }
};

int run_chat(ChatArgs& a) {
  SigintToThisThread sigint;  // before the engine's threads exist: they inherit the blocked mask
  EngineOptions opt;
  opt.n_threads = a.threads;
  opt.n_ctx = a.ctx;
  opt.batch = a.batch;
  opt.state_snapshots = a.no_prefix_cache ? 0 : a.snapshots.count;
  opt.snapshot_interval = a.snapshots.interval;
  LoadedEngine loaded = load_engine(a.model, opt, a.offload);
  Engine& eng = *loaded.engine;
  std::unique_ptr<Tokenizer> tok = require_tokenizer(eng.file(), "chat");
  std::string override_src;
  if (!a.template_file.empty()) {
    std::ifstream f(a.template_file, std::ios::binary);
    if (!f) fail("--chat-template-file: cannot open '{}'", a.template_file);
    std::stringstream ss;
    ss << f.rdbuf();
    override_src = ss.str();
  }
  const ModelChatTemplate tmpl = model_chat_template(*tok, override_src);
  std::fprintf(stderr, "moeflow chat: %s\n", tmpl.describe().c_str());

  LineEditor editor(STDIN_FILENO, STDOUT_FILENO);
  const bool tty = editor.interactive();
  const int64_t n_ctx = eng.context().n_ctx();
  if (tty)
    std::fprintf(stderr,
                 "moeflow chat: context %lld tokens. /reset starts over, /exit (or Ctrl-D) quits; "
                 "Ctrl-C stops a "
                 "reply.\n",
                 (long long)n_ctx);
  nlohmann::ordered_json history = nlohmann::ordered_json::array();
  auto reset = [&] {
    history = nlohmann::ordered_json::array();
    if (!a.system.empty()) history.push_back({{"role", "system"}, {"content", a.system}});
  };
  reset();
  TextGenParams params;
  params.sampling = a.sp;
  params.ignore_eos = a.ignore_eos;
  PrefixCache cache(!a.no_prefix_cache);
  sigint.arm();
  std::string line;
  bool interrupted_empty = false;  // Ctrl-C on an empty line once: a second one quits
  for (;;) {
    g_sigint = false;
    const LineEditor::Result got = editor.read("> ", line);
    if (got == LineEditor::Result::Eof) break;
    if (got == LineEditor::Result::Interrupted) {
      if (!tty) return 130;  // SIGINT while reading a pipe: the conventional status
      if (line.empty() && interrupted_empty) break;
      if (line.empty()) std::fprintf(stderr, "moeflow chat: Ctrl-C again, Ctrl-D or /exit quits\n");
      interrupted_empty = line.empty();
      line.clear();
      continue;
    }
    interrupted_empty = false;
    const std::string text = trim(line);
    if (text.empty()) continue;
    editor.add_history(text);
    if (text == "/exit" || text == "/quit") break;
    if (text == "/reset") {
      reset();
      std::fprintf(stderr, "moeflow chat: conversation reset\n");
      continue;
    }
    history.push_back({{"role", "user"}, {"content", text}});
    std::vector<int32_t> prompt;
    try {
      prompt = tmpl.tokenize(*tok, tmpl.format(history, true));
    } catch (const Error& e) {
      std::fprintf(stderr, "moeflow chat: %s\n", e.what());
      history.erase(history.size() - 1);
      continue;
    }
    if ((int64_t)prompt.size() >= n_ctx) {
      std::fprintf(stderr,
                   "moeflow chat: the conversation (%zu tokens) no longer fits the context (%lld); "
                   "/reset to start over\n",
                   prompt.size(), (long long)n_ctx);
      history.erase(history.size() - 1);
      continue;
    }
    const int64_t room = n_ctx - (int64_t)prompt.size();
    params.harmony = tmpl.harmony;  // the reply is the final channel (reasoning: -v, on stderr)
    params.max_tokens = (int)(a.n_predict < 0 ? room : std::min<int64_t>(a.n_predict, room));
    g_sigint = false;
    const TextGenResult r = generate_text(
        eng, *tok, prompt, params,
        [&](const TextDelta& d) {
          if (a.verbose && !d.reasoning.empty()) std::fputs(d.reasoning.c_str(), stderr);
          std::fputs(d.text.c_str(), stdout);
          std::fflush(stdout);
          return true;
        },
        &g_sigint, &cache);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    // A stopped reply stays in the conversation as far as it got.
    history.push_back({{"role", "assistant"}, {"content", r.text}});
    if (r.finish_reason == "cancelled")
      std::fprintf(stderr, "moeflow chat: reply stopped (Ctrl-C)\n");
    if (a.verbose) {
      std::fprintf(stderr,
                   "moeflow chat: prompt %d tokens (%d cached), generated %d (%s), TTFT %.1f ms, "
                   "%.2f tok/s\n",
                   r.n_prompt, r.n_cached, r.n_generated, r.finish_reason.c_str(), r.ttft_s * 1e3,
                   r.tpot_s() > 0 ? 1.0 / r.tpot_s() : 0.0);
    }
  }
  return 0;
}

const bool registered_chat =
    register_command("chat", "Interactive chat on stdin/stdout", [](CLI::App& app) {
      auto a = std::make_shared<ChatArgs>();
      app.add_option("-m,--model", a->model, "GGUF model")->required();
      app.add_option("-s,--system", a->system, "system message");
      app.add_option("--chat-template-file", a->template_file,
                     "Jinja chat template overriding the model's");
      app.add_option("-n,--n-predict", a->n_predict,
                     "max tokens per reply (-1 = up to the context)");
      add_threads_option(app, a->threads, "threads (0 = all cores)");
      app.add_option("-c,--ctx-size", a->ctx, "context size (0 = min(4096, trained))");
      app.add_option("-b,--batch-size", a->batch, "prefill chunk size");
      app.add_option("--seed", a->sp.seed, "sampling seed");
      add_sampling_options(app, a->sp);
      app.add_flag("-v,--verbose", a->verbose,
                   "statistics of each reply (and harmony reasoning) on stderr");
      app.add_flag("--no-prefix-cache", a->no_prefix_cache,
                   "prefill the whole conversation every turn");
      add_snapshot_options(app, a->snapshots);
      app.add_flag("--ignore-eos", a->ignore_eos,
                   "keep generating past end-of-generation tokens (up to -n)");
      add_offload_options(app, a->offload);
      return CommandMain([a] { return run_chat(*a); });
    });

}  // namespace
}  // namespace moeflow::cli
