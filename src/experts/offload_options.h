#pragma once
// Command-line glue for the offloading tier, shared by `moeflow run` / `bench` / `serve`:
//   add_offload_options(app, opts)        registers --expert-cache, --cache-rate, ...
//   make_offload(opts, file)              builds the CachedExpertProvider (+ its predictor)
//   session.attach(ctx, model)            plugs the predictor (lookahead, promoe, ...) into the forward pass
//   offload_stats_json(session)           statistics to merge into the command's JSON
// The lossy expert modes (--mode hobbit|skip, docs/lossy-modes.md) live here too, so every
// command that takes the offload options (run, chat, serve, bench, perplexity) takes them.
// The factory functions are inline on purpose: they call the policy module
// (make_eviction_policy), which links after this one, so only the CLI instantiates them.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "experts/cached_provider.h"
#include "experts/gate_lookahead.h"
#include "experts/precision_mode.h"
#include "gguf/gguf_file.h"
#include "model/model.h"
#include "policy/eviction_policy.h"
#include "policy/predictor_prefetch.h"

namespace moeflow {

struct OffloadOptions {
  std::string expert_cache;      // "3GiB", "512MiB", bytes
  double cache_rate = 0;         // fraction of all expert bytes
  std::string policy = "lru";
  bool per_layer = false;
  int io_threads = 2;
  std::string prefetch = "lookahead";  // none | lookahead | a policy/ predictor (promoe, token, ...)
  std::string predictor_model;         // trained weights (--prefetch promoe)
  int lookahead = 1;
  bool no_early_preemption = false;
  bool prefetch_always = false;  // also issue prefetches that cannot arrive in time
  bool buffered_io = false;
  // Lossy modes (all opt-in): exact | hobbit | hobbit-all | skip | daop.
  std::string mode = "exact";
  std::optional<double> hobbit_t1, hobbit_t2;  // default 0.6 / 0.9 (HOBBIT's Mixtral values)
  std::optional<double> skip_threshold;        // default kDefaultSkipThreshold
  bool precalc = false;                        // DAOP stale-input pre-calculation (lossy)
  // The hobbit modes split the expert budget between the two precisions: the low-precision
  // cache takes one of these out of it, the high-precision cache the rest.
  std::string low_cache;                       // low-precision cache budget ("256MiB")
  double low_cache_rate = 0;                   // ... as a fraction of all low-copy bytes
  std::optional<double> low_share;             // ... as a fraction of the expert budget
  bool enabled() const { return !expert_cache.empty() || cache_rate > 0; }
};

constexpr double kDefaultSkipThreshold = 0.1;
// Share of the expert budget the hobbit modes give the low-precision cache by default
// (measured in docs/lossy-modes.md: the low copies are used on some misses only, so a small
// cache of them holds their working set).
constexpr double kDefaultLowShare = 0.1;

// The mode the options ask for, checked against `file` (HOBBIT needs low-precision copies) and
// for options that belong to another mode. Throws naming the option at fault.
PrecisionModeConfig resolve_mode(const OffloadOptions& o, const GgufFile& file);
// The part of the expert budget that goes to the low-precision cache: --low-cache,
// --low-cache-rate (of all low-copy bytes) or --low-share (of the budget; default
// kDefaultLowShare), at least min_low (one layer's top-k low slots per partition). 0 unless
// the mode uses low copies. Throws when it leaves the high-precision cache nothing.
uint64_t resolve_low_budget(const OffloadOptions& o, const PrecisionModeConfig& mode,
                            uint64_t budget, uint64_t total_low, uint64_t min_low);

// "3GiB", "1.5G", "512MiB", "800MB", "4096" -> bytes. Throws naming `option`.
uint64_t parse_byte_size(const std::string& text, const std::string& option);
// The byte budget the options ask for (0 when offloading is off).
uint64_t resolve_budget(const OffloadOptions& o, uint64_t total_expert_bytes);
// top-k of the model from GGUF metadata ("<arch>.expert_used_count").
int model_top_k(const GgufFile& f);

inline void add_offload_options(CLI::App& app, OffloadOptions& o) {
  app.add_option("--expert-cache", o.expert_cache,
                 "offload experts: RAM budget for cached experts (e.g. 3GiB)");
  app.add_option("--cache-rate", o.cache_rate,
                 "offload experts: budget as a fraction of all expert bytes (e.g. 0.3)");
  app.add_option("--cache-policy", o.policy, "eviction policy (lru, lfu, ...)");
  app.add_flag("--cache-per-layer", o.per_layer, "split the expert budget evenly per layer");
  app.add_option("--io-threads", o.io_threads, "expert I/O worker threads");
  app.add_option("--prefetch", o.prefetch,
                 "expert prefetch predictor: none | lookahead | promoe | token | gate | stacked | duoserve | eamc");
  app.add_option("--predictor-model", o.predictor_model,
                 "trained predictor weights for --prefetch promoe (moeflow train-predictor)");
  app.add_option("--lookahead", o.lookahead, "layers ahead for the lookahead predictor");
  app.add_flag("--no-early-preemption", o.no_early_preemption,
               "on-demand loads only: do not raise routed experts to HIGH before acquire");
  app.add_flag("--prefetch-always", o.prefetch_always,
               "issue every predicted prefetch, also those the measured layer time, read speed "
               "and disk load say cannot be half done before their layer runs");
  app.add_flag("--buffered-io", o.buffered_io, "read experts through the page cache (no O_DIRECT)");
  app.add_option("--mode", o.mode,
                 "expert mode: exact (default, lossless) | hobbit (cache misses of less critical "
                 "experts load low-precision copies, needs moeflow pack --low) | hobbit-all (the "
                 "same rule for every expert) | skip (drop low-weight experts) | daop (replace a "
                 "token's second miss by a cached expert); lossy modes change output");
  app.add_option("--hobbit-t1", o.hobbit_t1,
                 "hobbit: high precision while the weight ranked above is <= T1 (default 0.6)");
  app.add_option("--hobbit-t2", o.hobbit_t2,
                 "hobbit: low precision while the weight ranked above is <= T2, else skip (default 0.9)");
  app.add_option("--low-share", o.low_share,
                 "hobbit + offload: share of the expert budget for low-precision copies (default 0.1)");
  app.add_option("--skip-threshold", o.skip_threshold,
                 "skip: drop experts whose normalised gate weight is below this (default 0.1; "
                 "the top-1 expert is always kept)");
  app.add_flag("--precalc", o.precalc,
               "DAOP stale-input pre-calculation (lossy, needs offloading): while a layer waits "
               "for an expert read, compute the next layer's predicted resident experts on this "
               "layer's input; the next layer uses those outputs for the experts it routes to");
  app.add_option("--low-cache", o.low_cache,
                 "hobbit + offload: part of the expert budget for low-precision copies (e.g. 256MiB)");
  app.add_option("--low-cache-rate", o.low_cache_rate,
                 "hobbit + offload: low-precision part as a fraction of all low-copy bytes");
}

struct OffloadSession {
  std::shared_ptr<CachedExpertProvider> provider;
  std::unique_ptr<GateLookahead> lookahead;
  std::unique_ptr<PredictorPrefetch> predictor;  // --prefetch <policy/ predictor>
  OffloadOptions options;
  PrecisionModeConfig mode;                  // --mode and its thresholds
  std::shared_ptr<PrecisionUsage> usage;     // high/low/skip counts (lossy modes)

  // Sets the expert mode on the forward pass and plugs the predictor into it (chaining any
  // observer already set).
  void attach(ForwardContext& ctx, const Model& model, ForwardObserver* existing = nullptr) {
    ctx.moe().set_mode(mode, usage);
    if (!provider || options.prefetch == "none") return;
    if (predictor) {
      predictor->set_router(model.router_fn());
      predictor->set_next(existing);
      ctx.set_observer(predictor.get());
      return;
    }
    LookaheadConfig lc;
    lc.n_layers = provider->store().n_layers();
    for (int l = 0; l < lc.n_layers; ++l) lc.n_experts.push_back(provider->store().n_experts(l));
    lc.top_k = model_top_k(model.file());
    lc.distance = options.lookahead;
    lc.mode = mode;
    lookahead = std::make_unique<GateLookahead>(*provider, model.router_fn(), lc);
    lookahead->set_next(existing);
    ctx.set_observer(lookahead.get());
  }
};

inline OffloadSession make_offload(const OffloadOptions& o, const GgufFile& file) {
  OffloadSession s;
  s.options = o;
  s.mode = resolve_mode(o, file);
  if (!s.mode.lossless()) s.usage = std::make_shared<PrecisionUsage>();
  if (!o.enabled()) {
    if (o.precalc)
      fail("--precalc fills the time a layer waits for expert reads, so it needs offloading: "
           "give --expert-cache or --cache-rate too");
    if (!o.low_cache.empty() || o.low_cache_rate != 0 || o.low_share)
      fail("--low-cache / --low-cache-rate / --low-share size the low-precision part of the "
           "expert cache: give --expert-cache or --cache-rate too");
    return s;
  }
  const std::vector<std::string> known = predictor_names();
  const bool policy_predictor = o.prefetch != "none" && o.prefetch != "lookahead";
  if (policy_predictor && std::find(known.begin(), known.end(), o.prefetch) == known.end()) {
    std::string names = "none, lookahead";
    for (const std::string& n : known) names += ", " + n;
    fail("--prefetch: unknown predictor '{}' (known: {})", o.prefetch, names);
  }
  if (!o.predictor_model.empty() && o.prefetch != "promoe")
    fail("--predictor-model is read by --prefetch promoe only (got --prefetch {})", o.prefetch);
  auto store = ExpertStore::open(file, StoreOptions{!o.buffered_io});
  const int top_k = model_top_k(file);
  OffloadConfig cfg;
  cfg.budget_bytes = resolve_budget(o, store->total_expert_bytes());
  cfg.per_layer = o.per_layer;
  cfg.top_k = top_k;
  cfg.io_threads = o.io_threads;
  cfg.early_preemption = !o.no_early_preemption;
  cfg.prefetch = o.prefetch != "none";
  cfg.skip_late_prefetch = !o.prefetch_always;
  int moe_layers = 0;
  for (int l = 0; l < store->n_layers(); ++l) moe_layers += store->is_moe_layer(l);
  if (s.mode.needs_low()) {  // resolve_mode checked that the file has low copies
    const uint64_t parts = cfg.per_layer ? static_cast<uint64_t>(moe_layers) : 1;
    cfg.low_budget_bytes = resolve_low_budget(
        o, s.mode, cfg.budget_bytes, store->total_expert_bytes(Precision::Low),
        store->slot_bytes(Precision::Low) * static_cast<uint64_t>(top_k) * parts);
    cfg.budget_bytes -= cfg.low_budget_bytes;  // one budget for both precisions
  }
  PolicyOptions po;
  po.n_layers = store->n_layers();
  po.n_experts = store->max_experts();
  po.top_k = top_k;
  const uint64_t slots = store->slot_bytes() ? cfg.budget_bytes / store->slot_bytes() : 0;
  po.capacity_total = static_cast<int>(slots);
  po.capacity_per_layer = moe_layers ? static_cast<int>(slots / moe_layers) : 0;
  std::unique_ptr<EvictionPolicy> low_policy;
  if (cfg.low_budget_bytes > 0) {
    PolicyOptions lpo = po;
    const uint64_t low_slots = cfg.low_budget_bytes / store->slot_bytes(Precision::Low);
    lpo.capacity_total = static_cast<int>(low_slots);
    lpo.capacity_per_layer = moe_layers ? static_cast<int>(low_slots / moe_layers) : 0;
    low_policy = make_eviction_policy(o.policy, lpo);
  }
  s.provider = std::make_shared<CachedExpertProvider>(
      std::move(store), make_eviction_policy(o.policy, po), cfg, std::move(low_policy));
  if (policy_predictor) {
    PredictorOptions pr;
    pr.n_layers = s.provider->store().n_layers();
    pr.n_experts = s.provider->store().max_experts();
    pr.top_k = top_k;
    pr.hidden_dim = static_cast<int>(file.get_int(file.get_string("general.architecture") + ".embedding_length"));
    pr.model_path = o.predictor_model;
    s.predictor = std::make_unique<PredictorPrefetch>(*s.provider, make_predictor(o.prefetch, pr), pr.n_layers);
  }
  return s;
}

// Adds the mode, its thresholds and the per-layer high/low/skip use counts to `j`.
void add_mode_json(nlohmann::json& j, const OffloadSession& s, bool per_layer);

inline nlohmann::json offload_stats_json(const OffloadSession& s, bool per_layer = true) {
  if (!s.provider) {
    nlohmann::json j{{"enabled", false}};
    add_mode_json(j, s, per_layer);
    return j;
  }
  nlohmann::json j = s.provider->stats().to_json(per_layer);
  j["enabled"] = true;
  add_mode_json(j, s, per_layer);
  j["prefetch"] = s.options.prefetch;
  j["early_preemption"] = !s.options.no_early_preemption;
  if (s.lookahead) j["predictions"] = s.lookahead->predictions();
  if (s.predictor) j["predictions"] = s.predictor->predictions();
  return j;
}

}  // namespace moeflow
