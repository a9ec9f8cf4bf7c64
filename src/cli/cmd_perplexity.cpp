// `moeflow perplexity`: llama.cpp's perplexity over a text file (same chunks, same scored
// positions, same number), and the KL divergence of this run against the saved logits of an
// exact one. Accepts every offloading option of `moeflow run`, so that lossy modes can be
// measured against the exact run. The rule is in runtime/perplexity.h and docs/perplexity.md.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common_options.h"
#include "cli/offload_flags.h"
#include "cli/scoring_text.h"
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "runtime/engine.h"
#include "runtime/logits_file.h"
#include "runtime/perplexity.h"
#include "trace/routing_replay.h"

namespace moeflow::cli {
namespace {

struct PplArgs {
  std::string model, text_file, save_logits, kl_base;
  int64_t ctx = 0;  // 0: min(512, trained context)
  int chunks = -1;
  int batch = 512;
  int threads = 0;
  bool json = false;
  BackendKind backend = BackendKind::Cpu;
  OffloadOptions offload;
};

std::string model_name(const GgufFile& f, const std::string& path) {
  if (f.has("general.name")) return f.get_string("general.name");
  return std::filesystem::path(path).filename().string();
}

int run_perplexity_cmd(PplArgs& a) {
  if (a.ctx != 0 && a.ctx < 3) fail("-c: the context size must be at least 3, got {}", a.ctx);
  if (a.chunks == 0) fail("--chunks 0 scores nothing (a positive count, or -1 for all)");
  if (a.batch <= 0) fail("-b: the batch size must be positive, got {}", a.batch);
  const std::string text = read_text_file(a.text_file);
  std::shared_ptr<const GgufFile> file(GgufFile::open(a.model));
  const std::string arch = file->get_string("general.architecture");
  const int64_t n_ctx_train = file->get_int(arch + ".context_length", 0);
  int64_t ctx = a.ctx;
  if (ctx == 0) ctx = n_ctx_train > 0 ? std::min<int64_t>(512, n_ctx_train) : 512;
  if (n_ctx_train > 0 && ctx > n_ctx_train)
    std::fprintf(stderr, "moeflow: warning: -c %lld is beyond the model's trained context %lld\n",
                 (long long)ctx, (long long)n_ctx_train);

  const ScoringTokens st = tokenize_for_scoring(*file, text, "perplexity");
  const std::vector<int32_t>& tokens = st.tokens;

  PerplexityConfig cfg;
  cfg.n_ctx = ctx;
  cfg.n_chunks = a.chunks;
  cfg.bos_id = st.bos_id;
  const ChunkPlan plan = plan_chunks(tokens.size(), cfg);  // text-length errors before loading

  EngineOptions opt;
  opt.n_threads = a.threads;
  opt.n_ctx = ctx;
  opt.batch = a.batch;
  opt.backend = a.backend;
  LoadedEngine loaded = load_engine(file, opt, a.offload, opt.batch);
  Engine& eng = *loaded.engine;
  const OffloadSession& offload = loaded.offload;
  // Every chunk starts at position 0 and replays the request's rows from its first.
  if (loaded.replay) loaded.replay->begin_sequence(plan.n_ctx, fmt::format("-c {}", plan.n_ctx));

  const HParams& hp = eng.model().hparams();
  LogitsFileHeader now;
  now.n_vocab = (uint32_t)eng.n_vocab();
  now.n_ctx = (uint32_t)plan.n_ctx;
  now.n_chunks = (uint32_t)plan.n_chunks;
  now.first = (uint32_t)plan.first;
  now.n_rows = (uint64_t)plan.n_scored();
  now.vocab_hash = vocab_fingerprint(file->get_string_array("tokenizer.ggml.tokens"));
  now.shape = model_shape_string(hp.arch_name, hp.n_layer, hp.n_embd, hp.n_expert, eng.n_vocab());
  now.model_name = model_name(*file, a.model);
  now.tokens = chunk_tokens(tokens, plan, cfg.bos_id);

  std::unique_ptr<LogitsFileReader> base;
  if (!a.kl_base.empty()) {
    base = std::make_unique<LogitsFileReader>(a.kl_base);
    base->check_matches(now);
  }
  std::unique_ptr<LogitsFileWriter> save;
  if (!a.save_logits.empty()) save = std::make_unique<LogitsFileWriter>(a.save_logits, now);
  KlDivergence kl;

  std::fprintf(stderr,
               "perplexity: %zu tokens, %d chunks of %lld (scoring the last %lld of each, %lld in "
               "all), %d threads\n",
               tokens.size(), plan.n_chunks, (long long)plan.n_ctx,
               (long long)plan.scored_per_chunk(), (long long)plan.n_scored(), eng.pool().size());
  const PerplexityResult r = run_perplexity(
      eng.context(), tokens, cfg,
      [&](const ScoredRow& row) {
        if (save) save->write_row(row.logits);
        if (base) kl.add(base->next_row(), row.logits, row.target);
      },
      [&](int c, const PerplexityResult& so_far) {
        if (a.json) return;
        std::printf("[%d]%.4f,", c + 1, so_far.chunk_ppl.back());
        std::fflush(stdout);
      });
  if (save) save->finish();

  const double tps = r.seconds > 0 ? r.n_evaluated / r.seconds : 0;
  if (a.json) {
    nlohmann::json j;
    j["perplexity"] = r.ppl();
    j["perplexity_stderr"] = r.ppl_stderr();
    j["n_tokens"] = tokens.size();
    j["n_tokens_scored"] = r.count;
    j["n_tokens_evaluated"] = r.n_evaluated;
    j["n_chunks"] = r.n_chunks;
    j["ctx"] = plan.n_ctx;
    j["chunk_ppl"] = r.chunk_ppl;
    j["seconds"] = r.seconds;
    j["tokens_per_second"] = tps;
    j["threads"] = eng.pool().size();
    if (base) {
      j["kl_divergence"] = kl.mean();
      j["kl_divergence_stderr"] = kl.mean_stderr();
      j["kl_divergence_median"] = kl.quantile(0.5);
      j["kl_divergence_p99"] = kl.quantile(0.99);
      j["kl_divergence_max"] = kl.max();
      j["top1_agreement"] = kl.top1_agreement();
      j["ppl_exact"] = kl.ppl_exact();
      j["ppl_delta"] = r.ppl() - kl.ppl_exact();
    }
    if (offload.provider) j["offload"] = offload_stats_json(offload);
    if (loaded.replay) j["routing_replay"] = trace::replay_json(*loaded.replay);
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  if (loaded.replay) std::fprintf(stderr, "%s\n", loaded.replay->describe().c_str());
  std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", r.ppl(), r.ppl_stderr());
  if (base) {
    std::printf("KL divergence against '%s' (exact run of %s):\n", a.kl_base.c_str(),
                base->header().model_name.c_str());
    std::printf("  exact PPL %.4f, this run %.4f, delta %+.4f (ratio %.5f)\n", kl.ppl_exact(),
                r.ppl(), r.ppl() - kl.ppl_exact(), r.ppl() / kl.ppl_exact());
    std::printf("  mean KLD %.6f +/- %.6f | median %.6f | 99%% %.6f | max %.6f\n", kl.mean(),
                kl.mean_stderr(), kl.quantile(0.5), kl.quantile(0.99), kl.max());
    std::printf("  same top-1 token: %.2f%% of %lld positions\n", 100.0 * kl.top1_agreement(),
                (long long)kl.count());
  }
  std::fflush(stdout);
  std::fprintf(stderr, "perplexity: %.2f s, %.1f tokens/s\n", r.seconds, tps);
  return 0;
}

const bool registered_perplexity = register_command(
    "perplexity",
    "Perplexity of a text file (llama.cpp's chunking) and KL divergence vs an exact run",
    [](CLI::App& app) {
      auto a = std::make_shared<PplArgs>();
      app.footer(
          "llama.cpp's rule: the text is tokenized once (with BOS), cut into chunks of -c tokens "
          "(the tail dropped; at least 2 chunks' worth needed); each chunk runs from an empty "
          "cache with its first token replaced by BOS, and only the second half of its positions "
          "is scored (first = c/2). PPL = exp(mean NLL). --save-logits FILE keeps the scored "
          "logits of an (exact) run; --kl-divergence FILE compares this run with them: mean "
          "KL(exact || this run), top-1 agreement, PPL delta. See docs/perplexity.md.");
      app.add_option("-m,--model", a->model, "GGUF model")->required();
      app.add_option("-f,--file", a->text_file, "text file to score")->required();
      app.add_option("-c,--ctx-size", a->ctx,
                     "chunk size in tokens (0 = min(512, trained context))");
      app.add_option("--chunks", a->chunks, "score at most this many chunks (-1 = all)");
      app.add_option("-b,--batch-size", a->batch, "tokens per forward pass (capped at -c)");
      add_threads_option(app, a->threads, "threads (0 = all cores)");
      app.add_flag("--json", a->json, "one JSON object on stdout instead of the text report");
      app.add_option("--save-logits", a->save_logits,
                     "write the scored rows' logits (float32) for a later --kl-divergence");
      app.add_option("--kl-divergence", a->kl_base,
                     "compare with logits saved by --save-logits (same text, -c and --chunks)");
      add_offload_options(app, a->offload, &a->backend);
      add_routing_replay_options(app, a->offload);
      add_backend_option(app, a->backend);
      return CommandMain([a] { return run_perplexity_cmd(*a); });
    });

}  // namespace
}  // namespace moeflow::cli
