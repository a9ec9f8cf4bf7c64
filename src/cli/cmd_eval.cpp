// `moeflow eval`: the oracle contract used by the python reference tests. Batched (or
// --sequential) prefill of the given tokens, then N greedy steps; raw float32 logits of every
// row to --logits-out, one JSON line on stdout.
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/matmul.h"
#include "cli/command.h"
#include "cli/common_options.h"
#include "core/error.h"
#include "runtime/engine.h"
#include "runtime/token_list.h"
#include "sampling/sampler.h"

namespace moeflow::cli {
namespace {

struct EvalArgs {
  std::string model, tokens, logits_out;
  int greedy = 0;
  int threads = 0;
  int64_t ctx = 0;
  int batch = 256;
  bool sequential = false;
  BackendKind backend = BackendKind::Cpu;
};

int run_eval(const EvalArgs& a) {
  const std::vector<int32_t> toks = parse_token_list(a.tokens, "--tokens");
  if (a.greedy < 0) fail("--greedy must be >= 0, got {}", a.greedy);
  EngineOptions opt;
  opt.n_threads = a.threads;
  opt.n_ctx = a.ctx > 0 ? a.ctx : (int64_t)toks.size() + a.greedy;
  opt.batch = a.batch;
  opt.backend = a.backend;
  Engine eng(a.model, opt);
  const int64_t V = eng.n_vocab();
  std::FILE* f = nullptr;
  if (!a.logits_out.empty()) {
    f = std::fopen(a.logits_out.c_str(), "wb");
    if (!f) fail("--logits-out: cannot open '{}' for writing", a.logits_out);
  }
  auto write_rows = [&](const float* p, size_t rows) {
    if (f && std::fwrite(p, sizeof(float), rows * V, f) != rows * V) {
      std::fclose(f);
      fail("--logits-out: write to '{}' failed", a.logits_out);
    }
  };
  std::vector<float> logits;
  if (a.sequential)
    eng.prefill_sequential(toks, true, &logits);
  else
    eng.prefill(toks, true, &logits);
  write_rows(logits.data(), toks.size());
  std::vector<int32_t> generated;
  std::span<const float> last(logits.data() + (toks.size() - 1) * V, V);
  for (int i = 0; i < a.greedy; ++i) {
    const int32_t t = argmax(last);
    generated.push_back(t);
    last = eng.decode(t);
    write_rows(last.data(), 1);
  }
  if (f && std::fclose(f) != 0) fail("--logits-out: closing '{}' failed", a.logits_out);
  nlohmann::json j;
  j["generated"] = generated;
  j["rows"] = toks.size() + a.greedy;
  j["n_vocab"] = V;
  j["simd"] = simd_level();  // the CPU kernels' level, which the oracle tests' reports name
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

const bool registered_eval = register_command(
    "eval", "Score token ids: prefill + greedy steps, dump logits (oracle contract)",
    [](CLI::App& app) {
      auto a = std::make_shared<EvalArgs>();
      app.add_option("-m,--model", a->model, "GGUF model")->required();
      app.add_option("--tokens", a->tokens, "comma-separated token ids")->required();
      app.add_option("--greedy", a->greedy, "greedy steps after the prompt");
      app.add_option("--logits-out", a->logits_out, "raw float32 logits file");
      add_threads_option(app, a->threads, "threads (0 = all cores)");
      app.add_option("-c,--ctx-size", a->ctx, "context size (default: tokens + greedy)");
      app.add_option("-b,--batch-size", a->batch, "prefill chunk size");
      app.add_flag("--sequential", a->sequential, "feed the prompt one token at a time");
      add_backend_option(app, a->backend);
      return CommandMain([a] { return run_eval(*a); });
    });

}  // namespace
}  // namespace moeflow::cli
