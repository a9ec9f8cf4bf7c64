// `moeflow trace`: records the routing of a live run into a trace file (docs/simulator.md)
// that `moeflow sim` replays and predictors train on. Each prompt is one request: its prompt
// tokens are the prefill phase, the generated tokens the decode phase.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common_options.h"
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "runtime/engine.h"
#include "sampling/sampler.h"
#include "trace/recorder.h"
#include "trace/trace.h"

namespace moeflow::cli {
namespace {

struct TraceArgs {
  std::string model, prompts, out;
  int n_predict = 32;
  int threads = 0;
  int64_t ctx = 0;
  int hidden_every = 0;
  bool hidden_all = false;
  bool routers = false;
  bool ignore_eos = false;
  SamplerParams sp;
};

// The prompt of one JSON line, or nullopt when the line is not a JSON object with a string
// "prompt" (or "text") field; `why` says what is wrong.
std::optional<std::string> json_prompt(const std::string& line, std::string& why) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    why = "not a JSON object";
    return std::nullopt;
  }
  const char* key = j.contains("prompt") ? "prompt" : "text";
  if (!j.contains(key) || !j[key].is_string()) {
    why = "JSON line without a string \"prompt\" or \"text\"";
    return std::nullopt;
  }
  return j[key].get<std::string>();
}

// A prompts file is JSON lines (every line an object with a "prompt" or "text" string) when it
// is named *.jsonl / *.json or its first non-empty line is such an object; otherwise every
// non-empty line is one prompt, verbatim (plain text may well start with '{': code, LaTeX).
std::vector<std::string> read_prompts(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("--prompts: cannot open '{}'", path);
  std::vector<std::pair<int, std::string>> lines;
  std::string line;
  for (int no = 1; std::getline(f, line); ++no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) lines.emplace_back(no, line);
  }
  auto ends_with = [&](const char* ext) {
    const size_t n = std::strlen(ext);
    return path.size() >= n && path.compare(path.size() - n, n, ext) == 0;
  };
  std::string why;
  const bool jsonl = ends_with(".jsonl") || ends_with(".json") ||
                     (!lines.empty() && json_prompt(lines.front().second, why).has_value());
  std::vector<std::string> out;
  for (const auto& [no, text] : lines) {
    if (!jsonl) {
      out.push_back(text);
      continue;
    }
    std::optional<std::string> p = json_prompt(text, why);
    if (!p)
      fail("--prompts '{}' line {}: {} (a JSON-lines prompts file needs one on every line)", path,
           no, why);
    out.push_back(std::move(*p));
  }
  if (out.empty()) fail("--prompts '{}': no prompts", path);
  return out;
}

// The router of every MoE layer as the n_experts x n_embd matrix the simulator's gate
// lookahead applies, read back through the model's own router (whatever its block format):
// column i is the router's response to the unit vector e_i.
std::vector<std::vector<float>> router_matrices(const Model& m) {
  const HParams& hp = m.hparams();
  std::vector<std::vector<float>> out(hp.n_layer);
  std::vector<float> e((size_t)hp.n_embd, 0.f), logits;
  for (int l = 0; l < hp.n_layer; ++l) {
    if (!m.is_moe_layer(l)) continue;
    out[l].assign((size_t)hp.n_expert * hp.n_embd, 0.f);
    for (int64_t i = 0; i < hp.n_embd; ++i) {
      e[i] = 1.f;
      m.router_logits(l, e, logits);
      e[i] = 0.f;
      for (int x = 0; x < hp.n_expert; ++x) out[l][(size_t)x * hp.n_embd + i] = logits[x];
    }
  }
  return out;
}

int run_trace(const TraceArgs& a) {
  if (a.n_predict < 0) fail("-n must be >= 0, got {}", a.n_predict);
  if (a.hidden_every < 0) fail("--hidden-every must be >= 0, got {}", a.hidden_every);
  const std::vector<std::string> prompts = read_prompts(a.prompts);
  EngineOptions opt;
  opt.n_threads = a.threads;
  opt.n_ctx = a.ctx;
  Engine eng(a.model, opt);
  const HParams& hp = eng.model().hparams();
  if (hp.n_expert == 0) fail("{}: a dense model has no routing to trace", a.model);
  std::unique_ptr<Tokenizer> tok = require_tokenizer(eng.file(), "trace");

  trace::Trace t;
  t.model = eng.file().has("general.name") ? eng.file().get_string("general.name") : a.model;
  t.source = "moeflow trace -m " + a.model + " --prompts " + a.prompts;
  t.n_layers = hp.n_layer;
  t.n_experts = hp.n_expert;
  t.top_k = hp.n_expert_used;
  const int every = a.hidden_all ? 1 : a.hidden_every;
  t.hidden_dim = every > 0 ? (int)hp.n_embd : 0;
  if (a.routers) {
    if (every == 0) fail("--routers needs hidden states (--hidden or --hidden-every K)");
    t.routers = router_matrices(eng.model());
  }
  trace::TraceRecorder rec(t, every);
  eng.context().set_observer(&rec);

  Sampler sampler(a.sp);
  int64_t n_prompt_tokens = 0, n_generated = 0;
  for (const std::string& p : prompts) {
    std::vector<int32_t> toks = tok->encode(p, true);
    if (toks.empty()) continue;
    const int64_t room = eng.context().n_ctx() - (int64_t)toks.size();
    if (room < 1)
      fail("a prompt of {} tokens does not fit the context of {}", toks.size(),
           eng.context().n_ctx());
    eng.reset();
    rec.begin_request(trace::Phase::prefill);
    std::vector<float> last;
    eng.prefill(toks, false, &last);
    n_prompt_tokens += (int64_t)toks.size();
    rec.set_phase(trace::Phase::decode);
    std::vector<int32_t> history = toks;
    std::span<const float> row(last);
    const int n = (int)std::min<int64_t>(a.n_predict, room);
    for (int i = 0; i < n; ++i) {
      const int32_t next = sampler.sample(row, history);
      if (!a.ignore_eos && tok->is_eog(next)) break;
      history.push_back(next);
      ++n_generated;
      if (i + 1 < n) row = eng.decode(next);
    }
  }
  eng.context().set_observer(nullptr);
  t.validate(a.out);
  trace::write_trace(t, a.out);
  std::fprintf(stderr,
               "moeflow trace: %zu requests, %lld prompt + %lld generated tokens, %zu steps, %zu "
               "routes%s -> %s\n",
               prompts.size(), (long long)n_prompt_tokens, (long long)n_generated, t.steps.size(),
               t.n_routes(), t.hidden_dim ? " with hidden states" : "", a.out.c_str());
  return 0;
}

const bool registered_trace = register_command(
    "trace", "Record the routing of a live run into a trace file", [](CLI::App& app) {
      auto a = std::make_shared<TraceArgs>();
      a->sp.temperature = 0.f;
      app.add_option("-m,--model", a->model, "GGUF model")->required();
      app.add_option("--prompts", a->prompts,
                     "prompts file: one per line, or JSON lines with \"prompt\"")
          ->required();
      app.add_option("-o,--output", a->out, "trace file to write")->required();
      app.add_option("-n,--n-predict", a->n_predict,
                     "tokens to generate per prompt (decode phase)");
      add_threads_option(app, a->threads, "threads (0 = all cores)");
      app.add_option("-c,--ctx-size", a->ctx, "context size (0 = min(4096, trained))");
      app.add_flag("--hidden", a->hidden_all, "record the hidden state entering every MoE block");
      app.add_option("--hidden-every", a->hidden_every,
                     "record hidden states of every K-th token only");
      app.add_flag("--routers", a->routers,
                   "store the router matrices (for the simulator's gate lookahead)");
      app.add_flag("--ignore-eos", a->ignore_eos,
                   "generate all -n tokens even past end-of-generation");
      app.add_option("--seed", a->sp.seed, "sampling seed");
      add_sampling_options(app, a->sp);
      return CommandMain([a] { return run_trace(*a); });
    });

}  // namespace
}  // namespace moeflow::cli
