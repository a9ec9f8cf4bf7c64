#pragma once
// Synthesises a GGUF model of a real MoE architecture with random weights, laid out and
// described exactly as llama.cpp lays out and describes converted models, so that moeflow,
// llama.cpp and gguf-py all read it. Weights are N(0, 1/fan_in) so activations stay O(1)
// through any number of layers; norms are 1 + N(0, 0.1^2) so a forgotten norm weight shows.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/ggml_type.h"
#include "model/gen/model_presets.h"

namespace moeflow::gen {

struct GenOptions {
  ModelShape shape;
  GgmlType type = GgmlType::F32;        // attention, shared expert (and the defaults below)
  std::optional<GgmlType> expert_type;  // ffn_{gate,up,down}_exps; default: type
  std::optional<GgmlType> embd_type;    // token_embd; default: type
  std::optional<GgmlType> output_type;  // output; default: type
  uint64_t seed = 42;
  // Router weights get std router_scale/sqrt(n_embd): router logits of std ~router_scale, so
  // the softmax is peaked and the k-th/(k+1)-th experts rarely tie.
  float router_scale = 4.0f;
  int threads = 1;
  // Every MoE layer's routed experts are a copy of the first MoE layer's (routers, attention and
  // the rest stay per layer): full-size benchmark models in a fraction of the time, with the
  // same bytes to move and the same arithmetic per token. Outputs are not those of a model with
  // independent layers.
  bool repeat_experts = false;
};

// Gain: 1 + N(0, std^2), for norm weights. LongRope/ShortRope: fixed LongRoPE factor ramps
// (phimoe), no randomness. ProportionalRope: Gemma 4's rope_freqs, 1 for the `rotated` leading
// pairs and 1e30 (no rotation) for the others, as llama.cpp's converter writes them.
// SsmDecay: -exp(N(0, std^2)), the negative per-head decay rates (ssm_a = -exp(A_log)).
enum class InitKind { Normal, Gain, LongRope, ShortRope, SsmDecay, ProportionalRope };

struct PlannedTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> dims;  // ggml order
  float std = 0.0f;
  InitKind init = InitKind::Normal;
  GgmlType requested;   // differs from `type` when the row length forced a fallback
  int64_t rotated = 0;  // ProportionalRope: the pairs that rotate

  int64_t row_len() const { return dims[0]; }
  int64_t n_rows() const;
  uint64_t nbytes() const;
};

// The type actually used for a row of `row_len` elements when `requested` was asked for:
// llama.cpp's fallbacks for rows that are not a multiple of the block size (Q4_K -> Q5_0,
// Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> IQ4_NL or Q4_0, then F16).
GgmlType resolve_type(GgmlType requested, int64_t row_len);

std::vector<PlannedTensor> plan_tensors(const GenOptions& opt);

struct GenSummary {
  uint64_t file_bytes = 0;
  uint64_t tensor_bytes = 0;
  int64_t n_params = 0;
  int64_t n_tensors = 0;
  int64_t n_fallback = 0;  // tensors stored in another type than requested
  double seconds = 0;
};

using GenProgress = std::function<void(uint64_t done, uint64_t total)>;

// Writes the model to `path` (atomically, via the GGUF writer). Throws moeflow::Error.
GenSummary generate_model(const GenOptions& opt, const std::string& path,
                          const GenProgress& progress = nullptr);

// Fills one row of a planned tensor with its float values (exposed so tests and tools can
// regenerate the exact weights of a file without reading it).
void generate_row(const PlannedTensor& t, uint64_t seed, int64_t row, float* out);

}  // namespace moeflow::gen
