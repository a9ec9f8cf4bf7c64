#pragma once
// A loaded MoE model and its forward pass, written once against the Backend interface. One
// forward() call processes a batch of consecutive tokens at positions pos0.. (prefill chunk or
// one decode token), appending their keys/values to the KV cache. Experts are reached only
// through the ExpertProvider.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/thread_pool.h"
#include "model/hparams.h"
#include "model/kv_cache.h"
#include "model/layer_spec.h"
#include "model/layers/attention.h"
#include "model/layers/delta_net.h"
#include "model/layers/ffn.h"
#include "model/layers/mla_attention.h"
#include "model/moe/expert_provider.h"
#include "model/moe/moe_block.h"
#include "model/observer.h"
#include "model/recurrent_state.h"
#include "model/state_snapshots.h"
#include "model/weights.h"

namespace moeflow {

class GgufFile;

enum class LogitsMode { None, Last, All };

class Model {
 public:
  // Validates hyper-parameters and all non-expert tensors. `file` must outlive the model.
  explicit Model(const GgufFile& file);

  const HParams& hparams() const { return hp_; }
  const ModelWeights& weights() const { return w_; }
  const std::vector<LayerSpec>& specs() const { return specs_; }
  const GgufFile& file() const { return file_; }
  int64_t n_vocab() const { return w_.token_embd.rows(); }

  // Router logits of `layer` for one hidden state (n_embd): the gate-lookahead seam.
  void router_logits(int layer, std::span<const float> hidden, std::vector<float>& logits) const;
  RouterFn router_fn() const;
  bool is_moe_layer(int layer) const;
  // Bytes of the experts one token activates (top_k experts per MoE layer), estimated from the
  // expert tensors.
  uint64_t active_expert_bytes_per_token() const;
  uint64_t total_expert_bytes() const;
  // KV cache floats per position of the widest layer (model/layer_spec.h kv_widths).
  KvWidths kv_widths() const;
  // Each layer's KV cache floats per position ({0, 0} for a gated DeltaNet layer): the cache
  // keeps exactly these rows (model/kv_cache.h).
  std::vector<KvWidths> kv_layer_widths() const;
  // KV cache bytes one position takes over all layers (the sum of the layers' own widths).
  uint64_t kv_bytes_per_token() const;
  // What a cache of every head's keys and values would take per position (the same as
  // kv_bytes_per_token for GQA; multi-head latent attention keeps only its latent).
  uint64_t kv_bytes_per_token_per_head() const;
  // Layers whose state is recurrent (gated DeltaNet): the sequence cannot be rewound.
  bool has_recurrent_layers() const;
  // Bytes of the recurrent state of one sequence (0 without recurrent layers); each state
  // snapshot (ForwardContext::set_snapshot_limit) takes as much again.
  uint64_t recurrent_state_bytes() const;

 private:
  const GgufFile& file_;
  HParams hp_;
  std::vector<LayerSpec> specs_;
  ModelWeights w_;
  uint64_t total_expert_bytes_ = 0;
};

// Per-sequence state and preallocated scratch for forward passes over one Model.
class ForwardContext {
 public:
  // On the CPU backend over `pool` (null: one thread).
  ForwardContext(const Model& model, ExpertProvider& provider, int64_t n_ctx, int max_batch,
                 ThreadPool* pool);
  // On `backend`, which must outlive the context.
  ForwardContext(const Model& model, ExpertProvider& provider, int64_t n_ctx, int max_batch,
                 Backend& backend);

  // Runs tokens at positions pos()..pos()+n-1 (n <= max_batch, pos()+n <= n_ctx). Logits rows
  // go to logits() (one row per token for All, the last token's row for Last).
  void forward(std::span<const int32_t> tokens, LogitsMode mode);

  const float* logits() const { return logits_host_; }
  int64_t pos() const { return pos_; }
  // Starts a new sequence (the recurrent state, if any, is cleared by the next forward(); its
  // snapshots are dropped).
  void reset();
  // Whether truncate() can go back to any earlier position: false when the model has recurrent
  // layers, whose state summarises the whole prefix (only to a snapshot, or to 0, then).
  bool can_rewind() const { return rs_.empty(); }
  // Drop cached positions >= p (rewind). With recurrent layers only p == pos(), p == 0 and a
  // position with a state snapshot are possible; any other p throws naming the architecture
  // (never a silently wrong state).
  void truncate(int64_t p);
  // Goes back to the highest position <= p this context can reach and returns it: p itself when
  // can_rewind(), else the latest state snapshot at or before p (restored), else 0 (a new
  // sequence). Recomputing the tokens from there is exact.
  int64_t rewind_to(int64_t p);
  // State snapshots (models with recurrent layers; model/state_snapshots.h): keep at most
  // `limit` copies of the recurrent state (0: none). Snapshots taken so far are dropped.
  void set_snapshot_limit(int limit);
  int snapshot_limit() const { return snapshots_.limit(); }
  // Whether snapshot_state() keeps anything: recurrent layers and a limit above 0.
  bool takes_snapshots() const { return !rs_.empty() && snapshots_.limit() > 0; }
  // Copies the recurrent state after pos() tokens (nothing unless takes_snapshots()).
  void snapshot_state();
  std::vector<int64_t> snapshot_positions() const { return snapshots_.positions(); }
  int64_t n_ctx() const { return kv_.n_ctx(); }
  int max_batch() const { return max_batch_; }
  void set_observer(ForwardObserver* o) { observer_ = o; }
  const KvCache& kv() const { return kv_; }
  // Touches every page of the KV cache now, so its memory is taken at start instead of growing
  // with the context (a run planned for a memory limit fails early, not mid-generation).
  void prefault_kv() { kv_.prefault(); }
  MoeBlock& moe() { return moe_; }
  const Model& model() const { return model_; }
  Backend& backend() { return be_; }

 private:
  ForwardContext(const Model& model, ExpertProvider& provider, int64_t n_ctx, int max_batch,
                 std::unique_ptr<CpuBackend> own, Backend* backend);
  void norm(const LayerSpec& spec, const TensorView& x, const TensorView& w, const TensorView& b,
            TensorView out);
  // Gemma 4's FFN block of layer il (LayerSpec::dense_beside_moe): out = the dense FFN's and the
  // MoE block's normalised outputs, summed. xn is scratch of x's shape.
  void dense_beside_moe(int il, const LayerWeights& L, const LayerSpec& spec, const int32_t* tokens,
                        const TensorView& x, TensorView xn, TensorView out);

  const Model& model_;
  const HParams& hp_;
  ExpertProvider& provider_;
  std::unique_ptr<CpuBackend> own_backend_;
  Backend& be_;
  ModelWeights w_;  // the model's weights as the backend sees them
  ForwardObserver* observer_ = nullptr;
  int max_batch_;
  bool long_rope_ = false;  // LongRoPE long factors (the context exceeds the original one)
  int64_t pos_ = 0;
  KvCache kv_;
  RecurrentState rs_;  // gated DeltaNet layers' conv + delta-rule states (empty otherwise)
  StateSnapshots snapshots_;
  MoeBlock moe_;
  AttentionScratch attn_scratch_;
  MlaScratch mla_scratch_;
  DeltaNetScratch delta_scratch_;
  FfnScratch ffn_scratch_;
  BackendScratch x_, xn_, tmp_, router_in_, moe_out_, logits_;
  const float* logits_host_ = nullptr;
  std::vector<float> logits_staging_;
};

}  // namespace moeflow
