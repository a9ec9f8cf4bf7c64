#pragma once
// The inference engine: opens a GGUF, builds the model, an expert provider (resident unless one
// is supplied), the KV cache and a thread pool, and runs prefill + decode with statistics.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"
#include "model/moe/expert_provider.h"
#include "runtime/backend_choice.h"
#include "sampling/sampler.h"

namespace moeflow {

class GgufFile;

struct EngineOptions {
  int n_threads = 0;  // 0: all cores
  int64_t n_ctx = 0;  // 0: min(4096, context_length)
  int batch = 256;    // prefill chunk (tokens per forward call)
  // Keep the non-expert weights and the KV cache in memory of the process's own: weights copied
  // out of the mmap (their file pages dropped), KV cache touched up front. Set when experts are
  // offloaded: under the memory pressure a budget is chosen for, file pages would be evicted and
  // re-read every token, and a lazily touched KV cache would grow past the plan.
  bool resident_weights = false;
  // With resident_weights: the copies of the weights the model only multiplies are written in
  // the CPU kernels' own layouts where one exists (runtime/cpu_repack.h; the same bits).
  bool repack_weights = false;
  // cuda: weights and KV cache in VRAM, and every expert unless the provider given is a VRAM
  // expert cache (docs/gpu.md).
  BackendKind backend = BackendKind::Cpu;
  // Models with recurrent layers (qwen3next, qwen35moe): copies of the recurrent state kept so
  // that a sequence can go back to an earlier position (the prefix cache's divergence inside a
  // previous reply; model/state_snapshots.h). At most state_snapshots of them (0: none; chat and
  // serve keep 8 by default), taken before the last token of every prefill (a prompt) and every
  // snapshot_interval positions inside one.
  int state_snapshots = 0;
  int snapshot_interval = 1024;
};

// The context size a run gets: `requested`, or min(4096, trained context) for 0. Throws for < 0.
int64_t resolve_n_ctx(int64_t requested, int64_t n_ctx_train);

struct GenerationStats {
  int n_prompt = 0;
  int n_generated = 0;
  double prefill_s = 0;  // wall time of the prompt forward passes
  double ttft_s = 0;     // start -> first generated token sampled
  double decode_s = 0;   // wall time of the decode forward passes (after the first token)
  double tpot_s() const { return n_generated > 1 ? decode_s / (n_generated - 1) : 0; }
  double prefill_tps() const { return prefill_s > 0 ? n_prompt / prefill_s : 0; }
  double decode_tps() const { return decode_s > 0 ? (n_generated - 1) / decode_s : 0; }
  std::string to_json() const;
};

class Engine {
 public:
  // provider == nullptr: a ResidentExpertProvider over the mmap (a DeviceExpertProvider with a
  // device backend).
  Engine(const std::string& model_path, const EngineOptions& opt,
         std::shared_ptr<ExpertProvider> provider = nullptr);
  // Takes an already opened file (for tools that opened it to build their own provider).
  Engine(std::shared_ptr<const GgufFile> file, const EngineOptions& opt,
         std::shared_ptr<ExpertProvider> provider = nullptr);
  ~Engine();

  const Model& model() const { return *model_; }
  const GgufFile& file() const { return *file_; }
  ForwardContext& context() { return *ctx_; }
  ExpertProvider& provider() { return *provider_; }
  ThreadPool& pool() { return *pool_; }
  Backend& backend() { return ctx_->backend(); }
  // resident_weights: bytes of the weight copies written in the CPU kernels' own layouts.
  uint64_t repacked_weight_bytes() const { return repacked_weight_bytes_; }
  int64_t n_vocab() const { return model_->n_vocab(); }
  int64_t pos() const { return ctx_->pos(); }
  void reset() { ctx_->reset(); }

  // Feeds tokens at the current position in chunks of opt.batch. With all_logits, out gets
  // tokens.size() rows of n_vocab; otherwise the last row only. out may be null. With state
  // snapshots (EngineOptions::state_snapshots) chunks also end at multiples of
  // snapshot_interval, where the recurrent state is copied, and before the last token.
  void prefill(std::span<const int32_t> tokens, bool all_logits, std::vector<float>* out);
  // Feeds one token; returns its logits row (n_vocab, valid until the next call).
  std::span<const float> decode(int32_t token);
  // Same as prefill, one token at a time (the oracle's --sequential path).
  void prefill_sequential(std::span<const int32_t> tokens, bool all_logits,
                          std::vector<float>* out);

  // Prefill + sample up to n_predict tokens; on_token is called as each is chosen and may
  // return false to stop. Stops early at a token in `stop`.
  std::vector<int32_t> generate(std::span<const int32_t> prompt, int n_predict, Sampler& sampler,
                                const std::function<bool(int32_t)>& on_token,
                                std::span<const int32_t> stop = {});
  const GenerationStats& stats() const { return stats_; }

 private:
  void init(const EngineOptions& opt);
  void init_snapshots(const EngineOptions& opt);
  int snapshot_interval_ = 1;
  bool decoding_ = false;  // the watchdog's phase is "decode" (core/watchdog.h)
  // Declared so that destruction runs ctx_ -> model_ -> provider_ (it may free device memory
  // through the backend) -> backend_ -> pool_.
  std::shared_ptr<const GgufFile> file_;
  std::unique_ptr<ThreadPool> pool_;
  // A device backend, or the CPU one when the engine needs its own (resident_weights);
  // otherwise the context owns a CpuBackend.
  std::unique_ptr<Backend> backend_;
  uint64_t repacked_weight_bytes_ = 0;
  // Beside a device backend: the CPU backend that computes experts served from host memory
  // (the CPU/GPU hybrid), over pool_.
  std::unique_ptr<Backend> host_backend_;
  std::shared_ptr<ExpertProvider> provider_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ForwardContext> ctx_;
  GenerationStats stats_;
};

}  // namespace moeflow
