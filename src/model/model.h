#pragma once
// A loaded MoE model and its forward pass (CPU). One forward() call processes a batch of
// consecutive tokens at positions pos0.. (prefill chunk or one decode token), appending their
// keys/values to the KV cache. Experts are reached only through the ExpertProvider.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/thread_pool.h"
#include "experts/expert_provider.h"
#include "model/hparams.h"
#include "model/kv_cache.h"
#include "model/moe_block.h"
#include "model/observer.h"
#include "model/weights.h"
#include "policy/predictor.h"

namespace moeflow {

class GgufFile;

enum class LogitsMode { None, Last, All };

class Model {
 public:
  // Validates hyper-parameters and all non-expert tensors. `file` must outlive the model.
  explicit Model(const GgufFile& file);

  const HParams& hparams() const { return hp_; }
  const ModelWeights& weights() const { return w_; }
  const GgufFile& file() const { return file_; }
  int64_t n_vocab() const { return w_.token_embd.rows; }

  // Router logits of `layer` for one hidden state (n_embd): the gate-lookahead seam.
  void router_logits(int layer, std::span<const float> hidden, std::vector<float>& logits) const;
  RouterFn router_fn() const;
  bool is_moe_layer(int layer) const;
  // Bytes of the experts one token activates (top_k experts per MoE layer), from `provider`'s
  // slice shapes if known, else estimated from the expert tensors.
  uint64_t active_expert_bytes_per_token() const;
  uint64_t total_expert_bytes() const;

 private:
  friend class ForwardContext;
  const GgufFile& file_;
  HParams hp_;
  ModelWeights w_;
};

// Per-sequence state and preallocated scratch for forward passes over one Model.
class ForwardContext {
 public:
  ForwardContext(const Model& model, ExpertProvider& provider, int64_t n_ctx, int max_batch,
                 ThreadPool* pool);

  // Runs tokens at positions pos()..pos()+n-1 (n <= max_batch, pos()+n <= n_ctx). Logits rows
  // go to logits() (one row per token for All, the last token's row for Last).
  void forward(std::span<const int32_t> tokens, LogitsMode mode);

  const float* logits() const { return logits_.as<float>(); }
  int64_t pos() const { return pos_; }
  void reset() { pos_ = 0; }
  // Drop cached positions >= p (rewind).
  void truncate(int64_t p);
  int64_t n_ctx() const { return kv_.n_ctx(); }
  int max_batch() const { return max_batch_; }
  void set_observer(ForwardObserver* o) { observer_ = o; }
  void set_pool(ThreadPool* p) { pool_ = p; }
  const KvCache& kv() const { return kv_; }
  MoeBlock& moe() { return moe_; }
  const Model& model() const { return model_; }

 private:
  void attention(int layer, int n);

  const Model& model_;
  const HParams& hp_;
  ExpertProvider& provider_;
  ThreadPool* pool_;
  ForwardObserver* observer_ = nullptr;
  int max_batch_;
  int64_t pos_ = 0;
  KvCache kv_;
  MoeBlock moe_;
  AlignedBuffer x_, xn_, q_, k_, v_, att_, tmp_, gu_, h_, logits_;
  std::vector<AlignedBuffer> scores_;  // per thread, n_ctx floats
};

}  // namespace moeflow
