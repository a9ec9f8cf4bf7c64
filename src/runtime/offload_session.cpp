#include "runtime/offload_session.h"

#include <cctype>
#include <cmath>

#include "experts/resident_provider.h"
#include "model/hparams.h"
#include "runtime/cpu_repack.h"
#include "runtime/hybrid_costs.h"
#include "runtime/offload_auto.h"
#include "trace/importers.h"
#include "trace/simulator.h"

namespace moeflow {

uint64_t resolve_budget(const OffloadOptions& o, uint64_t total_expert_bytes) {
  validate(o);
  if (o.expert_cache) return *o.expert_cache;
  if (o.cache_rate > 0)
    return static_cast<uint64_t>(std::ceil(o.cache_rate * static_cast<double>(total_expert_bytes)));
  return 0;
}

int model_top_k(const GgufFile& f) {
  // HParams checked the count against the expert count when it read the file.
  return load_hparams(f).n_expert_used;
}

}  // namespace moeflow

namespace moeflow {

PrecisionModeConfig resolve_mode(const OffloadOptions& o, const GgufFile& file) {
  // The thresholds' ranges, and a threshold given for another mode (it would silently do
  // nothing), are checked with the other rules.
  validate(o);
  const PrecisionModeConfig m = mode_config(o);
  if (m.needs_low()) {
    bool has_low = false;
    for (const ExpertLayerIndex& l : build_expert_index(file, "low").layers)
      has_low |= l.n_expert > 0;
    if (!has_low)
      fail(
          "--mode {}: {} has no low-precision expert copies; make them with `moeflow pack "
          "-m {} -o OUT.gguf --low Q4_0` (or Q2_K, Q3_K, ...)",
          expert_mode_name(o.mode), file.path(), file.path());
  }
  return m;
}

uint64_t resolve_low_budget(const OffloadOptions& o, const PrecisionModeConfig& mode,
                            uint64_t budget, uint64_t total_low, uint64_t min_low) {
  if (!mode.needs_low()) return 0;
  validate(o);  // one of the three at most, each in range
  uint64_t low = 0;
  if (o.low_cache) {
    low = *o.low_cache;
  } else if (o.low_cache_rate != 0) {
    low = static_cast<uint64_t>(std::ceil(o.low_cache_rate * static_cast<double>(total_low)));
  } else {
    const double share = o.low_share.value_or(kDefaultLowShare);
    low = static_cast<uint64_t>(std::ceil(share * static_cast<double>(budget)));
  }
  low = std::max(low, min_low);
  if (low >= budget)
    fail(
        "the low-precision expert cache ({} bytes, at least one layer's top-k low copies) "
        "takes the whole expert budget ({} bytes): raise --expert-cache / --cache-rate or "
        "lower --low-cache / --low-cache-rate / --low-share",
        low, budget);
  return low;
}

void add_mode_json(nlohmann::json& j, const OffloadSession& s, bool per_layer) {
  j["mode"] = expert_mode_name(s.mode.mode);
  if (s.mode.needs_low()) {
    j["hobbit_t1"] = s.mode.t1;
    j["hobbit_t2"] = s.mode.t2;
  }
  if (s.mode.mode == ExpertMode::Skip) j["skip_threshold"] = s.mode.skip_threshold;
  j["precalc"] = s.mode.precalc;
  if (!s.usage) return;
  const std::vector<PrecisionUsage::Counts> layers = s.usage->snapshot();
  PrecisionUsage::Counts tot;
  for (const auto& c : layers) tot += c;  // from the same snapshot as the per-layer counts
  j["uses"] = usage_json(tot);
  if (!per_layer) return;
  if (j.contains("layers") && j["layers"].is_array()) {
    for (auto& l : j["layers"]) {
      const size_t i = l.value("layer", size_t{0});
      l["uses"] = usage_json(i < layers.size() ? layers[i] : PrecisionUsage::Counts{});
    }
  } else {
    nlohmann::json arr = nlohmann::json::array();
    for (size_t i = 0; i < layers.size(); ++i) {
      nlohmann::json u = usage_json(layers[i]);
      u["layer"] = i;
      arr.push_back(std::move(u));
    }
    j["uses_per_layer"] = std::move(arr);
  }
}

void OffloadSession::attach(ForwardContext& ctx, const Model& model, ForwardObserver* existing) {
  ctx.moe().set_mode(mode, usage);
  if (!provider || !predictor) return;
  predictor->set_router(model.router_fn());
  predictor->set_next(existing);
  ctx.set_observer(predictor.get());
}

std::vector<double> calibration_counts(const std::string& trace_path, int n_layers, int n_experts) {
  const trace::Trace t = trace::load_any({trace_path});
  if (t.n_layers != n_layers || t.n_experts != n_experts)
    fail("--policy-calib {}: the trace routes {} layers x {} experts, the model has {} x {}",
         trace_path, t.n_layers, t.n_experts, n_layers, n_experts);
  return trace::routing_counts(t);
}

OffloadSession make_offload(const OffloadOptions& o, const GgufFile& file,
                            const DeviceTarget* device) {
  OffloadSession s;
  s.options = o;
  s.mode = resolve_mode(o, file);
  if (!s.mode.lossless()) s.usage = std::make_shared<PrecisionUsage>();
  if (!o.enabled()) {
    if (o.precalc)
      fail(
          "--precalc fills the time a layer waits for expert reads, so it needs offloading: "
          "give --expert-cache or --cache-rate too");
    if (o.low_cache || o.low_cache_rate != 0 || o.low_share)
      fail(
          "--low-cache / --low-cache-rate / --low-share size the low-precision part of the "
          "expert cache: give --expert-cache or --cache-rate too");
    return s;
  }
  auto store = ExpertStore::open(file, StoreOptions{!o.buffered_io});
  const int top_k = model_top_k(file);
  int moe_layers = 0;
  for (int l = 0; l < store->n_layers(); ++l) moe_layers += store->is_moe_layer(l);
  OffloadConfig cfg;
  cfg.budget_bytes = resolve_budget(o, store->total_expert_bytes());
  if (s.mode.needs_low()) {  // resolve_mode checked that the file has low copies
    const uint64_t parts = o.per_layer ? static_cast<uint64_t>(moe_layers) : 1;
    cfg.low_budget_bytes = resolve_low_budget(
        o, s.mode, cfg.budget_bytes, store->total_expert_bytes(Precision::Low),
        store->slot_bytes(Precision::Low) * static_cast<uint64_t>(top_k) * parts);
    cfg.budget_bytes -= cfg.low_budget_bytes;  // one budget for both precisions
  }
  // The low-precision cache was sized for the partitioning asked for: auto does not split it.
  const AutoPolicy pol =
      resolve_auto_policy(o.policy, o.per_layer, cfg.budget_bytes, store->slot_bytes(), top_k,
                          s.mode.needs_low() ? 0 : moe_layers);
  s.options.policy = pol.policy;
  s.options.per_layer = pol.per_layer;
  cfg.per_layer = pol.per_layer;
  cfg.top_k = top_k;
  // Copies out of page-locked RAM: two lanes keep the bus busy (one copy saturates it, the
  // other covers the gap between copies); reads from the file need the disk's queue depth.
  const bool ram_to_device = device && device->source == DeviceSource::Ram;
  cfg.io_threads = s.options.io_threads =
      ram_to_device && o.io_threads <= 0 ? 2 : resolve_io_threads(o.io_threads, *store);
  if (device) {
    std::vector<std::span<const uint8_t>> maps;
    for (uint32_t i = 0; i < file.split_paths().size(); ++i) maps.push_back(file.mapping(i));
    DeviceTransferOptions dto;
    dto.source = device->source;
    dto.pin = device->pin;
    s.device_transfer =
        std::make_shared<DeviceChunkTransfer>(*device->link, std::move(maps), *store, dto);
    s.link = device->link;
    cfg.allocator = &device->link->device_allocator();
    cfg.transfer = s.device_transfer;
    if (device->hybrid && device->source != DeviceSource::Ram)
      fail(
          "--cpu-experts auto computes experts from the model in RAM: it needs --expert-source "
          "ram (host memory cannot hold the experts here)");
    // Host views of every expert (the mapped model) for the hybrid and for DAOP's CPU
    // pre-calculation; not when the experts are read from the file (touching them would read).
    if ((device->hybrid || o.precalc) && device->source == DeviceSource::Ram) {
      auto host = std::make_shared<ResidentExpertProvider>(file);
      cfg.host_views = std::shared_ptr<const ExpertViewTable>(host, &host->table());
    }
    if (device->hybrid) {
      ThreadPool pool(device->cpu_threads > 0 ? device->cpu_threads : default_thread_count());
      s.hybrid = measure_hybrid_costs(*cfg.host_views, &pool, *device->link);
      cfg.hybrid = s.hybrid;
    }
  }
  cfg.early_preemption = !o.no_early_preemption;
  cfg.prefetch = o.prefetch != "none";
  cfg.skip_late_prefetch = !o.prefetch_always && !o.prefetch_wait;
  cfg.prefetch_gate = !o.prefetch_always && !o.prefetch_wait;
  cfg.prefetch_wait = o.prefetch_wait;
  cfg.prefill_slots = o.prefill_slots;
  // --repack-offloaded: host slots, read by the CPU backend, rewritten on arrival into its
  // kernels' layouts, as a model read into memory is at load (runtime/cpu_repack.h; the same
  // output bits). Opt-in: docs/bigger-than-ram.md, "The CPU's layouts when offloading".
  if (!device && o.repack_offloaded) cfg.rewrite = cpu_slot_rewrite();
  PolicyOptions po;
  po.n_layers = store->n_layers();
  po.n_experts = store->max_experts();
  po.top_k = top_k;
  if (!o.policy_calib.empty())  // validate(): given exactly when the policy needs it
    po.calib_counts = calibration_counts(o.policy_calib, po.n_layers, po.n_experts);
  const uint64_t slots = store->slot_bytes() ? cfg.budget_bytes / store->slot_bytes() : 0;
  po.capacity_total = static_cast<int>(slots);
  po.capacity_per_layer = moe_layers ? static_cast<int>(slots / moe_layers) : 0;
  std::unique_ptr<EvictionPolicy> low_policy;
  if (cfg.low_budget_bytes > 0) {
    PolicyOptions lpo = po;
    const uint64_t low_slots = cfg.low_budget_bytes / store->slot_bytes(Precision::Low);
    lpo.capacity_total = static_cast<int>(low_slots);
    lpo.capacity_per_layer = moe_layers ? static_cast<int>(low_slots / moe_layers) : 0;
    low_policy = make_eviction_policy(pol.policy, lpo);
  }
  s.provider = std::make_shared<CachedExpertProvider>(
      std::move(store), make_eviction_policy(pol.policy, po), cfg, std::move(low_policy));
  if (o.prefetch != "none") {  // every predictor, the default lookahead included, on one path
    PredictorOptions pr;
    const ExpertStore& st = s.provider->store();
    pr.n_layers = st.n_layers();
    pr.n_experts = st.max_experts();
    for (int l = 0; l < pr.n_layers; ++l) pr.layer_experts.push_back(st.n_experts(l));
    pr.top_k = top_k;
    pr.hidden_dim = static_cast<int>(
        file.get_int(file.get_string("general.architecture") + ".embedding_length"));
    pr.model_path = o.predictor_model;
    pr.lookahead = o.lookahead;  // --lookahead: how far the lookahead and gate predictors look
    pr.mode = s.mode;
    s.predictor = std::make_unique<PredictorPrefetch>(*s.provider, make_predictor(o.prefetch, pr),
                                                      pr.n_layers);
    s.predictor->set_mode(s.mode);
  }
  return s;
}

nlohmann::json offload_stats_json(const OffloadSession& s, bool per_layer) {
  if (!s.provider) {
    nlohmann::json j{{"enabled", false}};
    add_mode_json(j, s, per_layer);
    return j;
  }
  nlohmann::json j = s.provider->stats().to_json(per_layer);
  j["enabled"] = true;
  add_mode_json(j, s, per_layer);
  j["prefetch"] = s.options.prefetch;
  if (!s.options.preset.empty()) j["preset"] = s.options.preset;
  j["early_preemption"] = !s.options.no_early_preemption;
  j["prefill_slots"] = s.options.prefill_slots;
  if (s.predictor) j["predictions"] = s.predictor->predictions();
  return j;
}

}  // namespace moeflow
