#pragma once
// An Engine assembled from a model file and the typed offloading options: the memory plan
// (auto-fit, or the VRAM plan on a device backend), the expert provider and cache the plan
// asks for, the predictor plugged into the forward pass. Every command that runs a model
// (run, chat, serve, bench, perplexity) builds its engine here, one way.
#include <memory>
#include <string>

#include "gguf/gguf_file.h"
#include "runtime/engine.h"
#include "runtime/offload_options.h"
#include "runtime/offload_plan.h"
#include "runtime/offload_session.h"
#include "runtime/vram_plan.h"
#include "trace/routing_replay.h"

namespace moeflow {

// Members are destroyed engine first, so the provider outlives every forward pass that uses it.
struct LoadedEngine {
  OffloadPlan plan;
  VramPlan vram;  // a device backend's plan
  OffloadSession offload;
  // --routing-trace: the replay the engine's MoE block takes its routing from, or null.
  std::unique_ptr<trace::RoutingReplay> replay;
  std::unique_ptr<Engine> engine;
};

// An engine over `file` with the offloading options applied: the memory plan first (auto-fit
// unless --expert-cache / --cache-rate / --no-offload say otherwise; an automatic choice of
// offloading is announced on stderr), then the cached expert provider when the plan offloads,
// with its predictor plugged into the forward pass and the non-expert weights and KV cache held
// in the process's own memory. On a device backend: every expert in VRAM, or a VRAM expert cache
// (runtime/vram_plan.h, announced on stderr). `logits_rows`: rows of logits a forward keeps
// (perplexity keeps the whole batch), for the activation estimate. With --routing-trace the
// trace is read and matched to the model's shape before the engine is built, and replayed by
// its MoE block (the caller says where each sequence starts: RoutingReplay::begin_*). Throws
// moeflow::Error naming the option at fault (the options are checked before anything is planned).
LoadedEngine load_engine(std::shared_ptr<const GgufFile> file, EngineOptions opt,
                         const OffloadOptions& offload, int logits_rows = 1);
// The same, opening `path` after the options are checked.
LoadedEngine load_engine(const std::string& path, const EngineOptions& opt,
                         const OffloadOptions& offload, int logits_rows = 1);

}  // namespace moeflow
