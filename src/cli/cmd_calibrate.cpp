// `moeflow calibrate`: fits HOBBIT's thresholds T1/T2 to a model packed with low-precision
// copies, for an accuracy target on a calibration text (runtime/calibrate.h has the rule;
// docs/lossy-modes.md the measurements). Prints the chosen pair and, with --json, every grid
// point; the run options to use follow from it: --mode hobbit --hobbit-t1 T1 --hobbit-t2 T2.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/common_options.h"
#include "cli/scoring_text.h"
#include "core/error.h"
#include "gguf/expert_index.h"
#include "gguf/gguf_file.h"
#include "model/moe/precision_mode.h"
#include "runtime/calibrate.h"
#include "runtime/engine.h"

namespace moeflow::cli {
namespace {

struct CalibrateArgs {
  std::string model, text_file;
  int64_t ctx = 128;
  int chunks = 16;
  int threads = 0;
  double max_ppl_increase_pct = 1.0;
  double max_kl = -1;
  double grid_step = 0.1;
  bool json = false;
};

uint64_t mean_expert_bytes(const ExpertIndex& idx) {
  uint64_t n = 0;
  for (const ExpertLayerIndex& l : idx.layers) n += (uint64_t)l.n_expert;
  return n ? idx.total_expert_bytes() / n : 0;
}

int run_calibrate(const CalibrateArgs& a) {
  if (a.chunks <= 0) fail("--chunks must be positive, got {}", a.chunks);
  const std::string text = read_text_file(a.text_file);
  std::shared_ptr<const GgufFile> file(GgufFile::open(a.model));
  CalibrateConfig cfg;
  cfg.high_expert_bytes = mean_expert_bytes(build_expert_index(*file, "weight"));
  cfg.low_expert_bytes = mean_expert_bytes(build_expert_index(*file, "low"));
  if (cfg.low_expert_bytes == 0)
    fail(
        "calibrate: {} has no low-precision expert copies; make them with `moeflow pack -m {} "
        "-o OUT.gguf --low Q4_0` (or Q2_K, Q3_K, ...)",
        a.model, a.model);
  const ScoringTokens st = tokenize_for_scoring(*file, text, "calibrate");
  cfg.ppl.n_ctx = a.ctx;
  cfg.ppl.n_chunks = a.chunks;
  cfg.ppl.bos_id = st.bos_id;
  cfg.max_ppl_increase = a.max_ppl_increase_pct / 100.0;
  cfg.max_kl = a.max_kl;
  cfg.grid_step = a.grid_step;
  plan_chunks(st.tokens.size(), cfg.ppl);  // text-length errors before loading

  EngineOptions opt;
  opt.n_threads = a.threads;
  opt.n_ctx = a.ctx;
  opt.batch = (int)a.ctx;
  Engine eng(file, opt);
  auto usage = std::make_shared<PrecisionUsage>();
  CalibrateHooks hooks;
  hooks.set_thresholds = [&](double t1, double t2) {
    PrecisionModeConfig m;
    if (t1 >= 0) {
      m.mode = ExpertMode::HobbitAll;
      m.t1 = t1;
      m.t2 = t2;
    }
    eng.context().moe().set_mode(m, usage);
  };
  hooks.take_uses = [&](uint64_t& h, uint64_t& l, uint64_t& s) {
    const PrecisionUsage::Counts t = usage->total();
    h = t.high, l = t.low, s = t.skip;
    usage->reset();
  };
  hooks.on_point = [&](const CalibratePoint& p) {
    std::fprintf(stderr, "calibrate: T1 %.2f T2 %.2f  ppl %+.2f%%  KL %.5f  miss bytes %.3f%s\n",
                 p.t1, p.t2, 100.0 * p.ppl_increase, p.kl, p.miss_bytes_ratio,
                 p.within ? "" : "  (over target)");
  };
  const CalibrateResult r = calibrate_hobbit(eng.context(), st.tokens, cfg, hooks);
  const CalibratePoint& b = r.points.at(r.best);
  if (a.json) {
    nlohmann::json j = r.to_json();
    j["max_ppl_increase"] = cfg.max_ppl_increase;
    if (cfg.max_kl >= 0) j["max_kl"] = cfg.max_kl;
    j["high_expert_bytes"] = cfg.high_expert_bytes;
    j["low_expert_bytes"] = cfg.low_expert_bytes;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "T1 = %.2f, T2 = %.2f: perplexity %.4f vs exact %.4f (%+.2f%%), KL %.5f, a miss "
        "moves %.1f%% of the exact bytes\nuse: --mode hobbit --hobbit-t1 %.2f "
        "--hobbit-t2 %.2f\n",
        b.t1, b.t2, b.ppl, r.ppl_exact, 100.0 * b.ppl_increase, b.kl, 100.0 * b.miss_bytes_ratio,
        b.t1, b.t2);
  }
  return 0;
}

const bool registered_calibrate = register_command(
    "calibrate", "Fit HOBBIT's thresholds (T1, T2) to a model for a perplexity / KL target",
    [](CLI::App& app) {
      auto a = std::make_shared<CalibrateArgs>();
      app.footer(
          "Runs the text once exactly, then for every (T1, T2) of a grid with the hobbit-all rule "
          "(every routed expert decided by its score: the worst case of --mode hobbit, which only "
          "decides cache misses), and picks the pair whose misses move the fewest bytes among "
          "those within --max-ppl-increase (and --max-kl). Needs a file packed with --low.");
      app.add_option("-m,--model", a->model, "GGUF model packed with `moeflow pack --low TYPE`")
          ->required();
      app.add_option("-f,--file", a->text_file, "calibration text")->required();
      app.add_option("-c,--ctx-size", a->ctx, "chunk size in tokens (perplexity rule)");
      app.add_option("--chunks", a->chunks, "chunks of the text to score");
      add_threads_option(app, a->threads, "threads (0 = all cores)");
      app.add_option(
          "--max-ppl-increase", a->max_ppl_increase_pct,
          "accuracy target: perplexity at most this many percent above exact (default 1)");
      app.add_option("--max-kl", a->max_kl, "accuracy target: mean KL divergence at most this");
      app.add_option("--grid-step", a->grid_step, "step of the T1/T2 grid (default 0.1)");
      app.add_flag("--json", a->json, "one JSON object with every grid point");
      return CommandMain([a] { return run_calibrate(*a); });
    });

}  // namespace
}  // namespace moeflow::cli
