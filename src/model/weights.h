#pragma once
// Pointers to the non-expert weights of a model inside the mmap'ed GGUF, checked against the
// hyper-parameters at load. Small vectors (norms, biases) are dequantized to float once; the
// routed experts are reached through an ExpertProvider, never from here.
#include <cstdint>
#include <string>
#include <vector>

#include "model/hparams.h"
#include "quant/ggml_type.h"

namespace moeflow {

class GgufFile;

// A 2-D weight matrix: `rows` rows of `cols` elements, each row_bytes(type, cols) long.
struct WeightRef {
  const uint8_t* data = nullptr;
  GgmlType type = GgmlType::F32;
  int64_t cols = 0;
  int64_t rows = 0;
  std::string name;
  explicit operator bool() const { return data != nullptr; }
  size_t row_stride() const { return row_bytes(type, cols); }
  uint64_t nbytes() const { return (uint64_t)row_stride() * (uint64_t)rows; }
};

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;
  WeightRef wq, wk, wv, wo;
  std::vector<float> bq, bk, bv;          // empty when the arch has none
  std::vector<float> q_norm, k_norm;      // per head (head_dim) or full (q_dim / k_dim)
  // MoE layer
  bool moe = false;
  WeightRef gate_inp;                     // router [n_embd -> n_expert]
  WeightRef gate_inp_shexp;               // [n_embd -> 1]
  WeightRef gate_shexp, up_shexp, down_shexp;
  // dense layer
  WeightRef ffn_gate, ffn_up, ffn_down;
};

struct ModelWeights {
  WeightRef token_embd;
  std::vector<float> output_norm;
  WeightRef output;  // token_embd when the model ties them
  std::vector<LayerWeights> layers;
  uint64_t non_expert_bytes = 0;
};

// Throws moeflow::Error naming the file and tensor for a missing tensor, a wrong shape or an
// unsupported type.
ModelWeights load_weights(const GgufFile& f, const HParams& hp);

}  // namespace moeflow
