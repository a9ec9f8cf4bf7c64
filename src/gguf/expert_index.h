#pragma once
// Where each expert's weights are in the file: for every MoE layer, the byte range of expert
// e's slice of ffn_gate_exps / ffn_up_exps / ffn_down_exps (or the fused ffn_gate_up_exps).
// Stacked expert tensors have dims [cols, rows, n_expert], so expert e is one contiguous run
// of rows * row_bytes(cols) bytes.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/ggml_type.h"

namespace moeflow {

class GgufFile;

enum class ExpertProj : int { Gate = 0, Up = 1, Down = 2 };
constexpr int kNumExpertProj = 3;

struct ExpertSlice {
  GgmlType type = GgmlType::F32;
  int64_t rows = 0;          // output features
  int64_t cols = 0;          // input features (row length)
  uint64_t file_offset = 0;  // absolute offset in split file `split`
  uint64_t nbytes = 0;
  uint32_t split = 0;
};

struct ExpertLayerIndex {
  int layer = -1;  // model layer number
  int n_expert = 0;
  bool fused_gate_up = false;  // gate and up are halves of one slice (stored in proj[Gate])
  // slices[e][p]
  std::vector<std::array<ExpertSlice, kNumExpertProj>> slices;
};

struct ExpertIndex {
  int n_layers = 0;                      // total layers of the model
  std::vector<ExpertLayerIndex> layers;  // one per layer; n_expert == 0 for dense layers
  uint64_t total_expert_bytes() const;
  uint64_t expert_bytes(int layer, int expert) const;
};

// Builds the index from tensor names "blk.N.ffn_{gate,up,down,gate_up}_exps.<suffix>": the
// model's own experts use "weight"; `moeflow pack --low` stores low-precision copies of them
// as "low" (docs/lossy-modes.md). A file without tensors of that suffix gives an index whose
// layers all have n_expert == 0. Next-token-prediction blocks (<arch>.nextn_predict_layers,
// stored after the trunk) are left out: n_layers is the trunk's.
ExpertIndex build_expert_index(const GgufFile& f, const std::string& suffix = "weight");

}  // namespace moeflow
