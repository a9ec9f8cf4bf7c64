#pragma once
// The offloading tier wired together for one engine, shared by `moeflow run` / `bench` /
// `serve` / `chat` / `perplexity` (their flags are registered by cli/offload_flags.h):
//   make_offload(opts, file)              builds the CachedExpertProvider (+ its predictor)
//   session.attach(ctx, model)            plugs the predictor (lookahead, gate, promoe, ...) into
//   the forward pass offload_stats_json(session)           statistics to merge into the command's
//   JSON
// The lossy expert modes (--mode hobbit|skip, docs/lossy-modes.md) are resolved here too, so
// every command that takes the offload options takes them.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/device_link.h"
#include "core/error.h"
#include "experts/cached_provider.h"
#include "experts/device_transfer.h"
#include "gguf/gguf_file.h"
#include "model/model.h"
#include "model/moe/precision_mode.h"
#include "policy/eviction_policy.h"
#include "policy/predictor_prefetch.h"
#include "runtime/offload_options.h"

namespace moeflow {

// The mode the options ask for, checked against `file` (HOBBIT needs low-precision copies) and
// for options that belong to another mode. Throws naming the option at fault.
PrecisionModeConfig resolve_mode(const OffloadOptions& o, const GgufFile& file);
// The part of the expert budget that goes to the low-precision cache: --low-cache,
// --low-cache-rate (of all low-copy bytes) or --low-share (of the budget; default
// kDefaultLowShare), at least min_low (one layer's top-k low slots per partition). 0 unless
// the mode uses low copies. Throws when it leaves the high-precision cache nothing.
uint64_t resolve_low_budget(const OffloadOptions& o, const PrecisionModeConfig& mode,
                            uint64_t budget, uint64_t total_low, uint64_t min_low);

// The byte budget the options ask for (0 when offloading is off).
uint64_t resolve_budget(const OffloadOptions& o, uint64_t total_expert_bytes);
// top-k of the model (HParams::n_expert_used, checked when the metadata is read).
int model_top_k(const GgufFile& f);

// A VRAM expert cache (runtime/vram_plan.h): slots in `link`'s device memory, filled from
// `source`.
struct DeviceTarget {
  std::shared_ptr<DeviceLink> link;
  DeviceSource source = DeviceSource::Ram;
  bool pin = true;  // Ram: page-lock the mapped experts (false: copy through staging)
  // CPU/GPU hybrid (--cpu-experts auto): misses the CPU finishes before their copy are computed
  // there, from the mapped file; the cost model is measured with `cpu_threads` threads.
  bool hybrid = false;
  int cpu_threads = 0;
};

struct OffloadSession {
  std::shared_ptr<DeviceLink>
      link;  // a VRAM cache's bus (declared first: it outlives the provider)
  std::shared_ptr<CachedExpertProvider> provider;
  std::shared_ptr<DeviceChunkTransfer> device_transfer;  // a VRAM cache's transfer
  HybridCosts hybrid;  // --cpu-experts auto: the measured cost model (else zeros)
  std::unique_ptr<PredictorPrefetch> predictor;  // --prefetch: the predictor (lookahead by default)
  OffloadOptions options;
  PrecisionModeConfig mode;               // --mode and its thresholds
  std::shared_ptr<PrecisionUsage> usage;  // high/low/skip counts (lossy modes)

  // Sets the expert mode on the forward pass and plugs the predictor into it (chaining any
  // observer already set).
  void attach(ForwardContext& ctx, const Model& model, ForwardObserver* existing = nullptr);
};

// Per-(layer, expert) routing counts of a trace file, checked against the model's shape: the
// calibration of the placement policies.
std::vector<double> calibration_counts(const std::string& trace_path, int n_layers, int n_experts);

// Builds the provider, its caches and predictor from the options; with `device`, the cache's
// slots are device memory filled through a DeviceChunkTransfer. Throws naming the option at
// fault.
OffloadSession make_offload(const OffloadOptions& o, const GgufFile& file,
                            const DeviceTarget* device = nullptr);

// Adds the mode, its thresholds and the per-layer high/low/skip use counts to `j`.
void add_mode_json(nlohmann::json& j, const OffloadSession& s, bool per_layer);

// The provider's statistics, the mode and the predictor's counts as one JSON object.
nlohmann::json offload_stats_json(const OffloadSession& s, bool per_layer = true);

}  // namespace moeflow
