#pragma once
// Supported architectures described as data: every difference between the MoE families the
// forward pass knows is one of these flags, so there is one forward pass, not four.
#include <string>

namespace moeflow {

enum class RopeStyle { Normal, NeoX };  // Normal: pairs (2i, 2i+1); NeoX: pairs (i, i + n_rot/2)

enum class QkNorm {
  None,
  PerHead,  // RMSNorm over each head_dim slice of q and k (qwen3moe)
  Full,     // RMSNorm over the whole q / k projection (olmoe)
};

struct ArchSpec {
  const char* name;          // general.architecture
  RopeStyle rope;
  QkNorm qk_norm;
  bool qkv_bias;             // attn_{q,k,v}.bias are required
  bool shared_expert;        // ffn_*_shexp + sigmoid-gated ffn_gate_inp_shexp are required
  bool norm_topk_default;    // renormalise the top-k weights unless expert_weights_norm says otherwise
};

// Throws moeflow::Error naming the architecture (and listing the known ones) if unsupported.
const ArchSpec& find_arch(const std::string& name);
std::string known_arch_names();

}  // namespace moeflow
