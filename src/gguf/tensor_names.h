#pragma once
// The one place GGUF tensor names of the routed experts are spelled (llama.cpp's conventions:
// "blk.N.ffn_{gate,up,down}_exps.weight", or the fused "blk.N.ffn_gate_up_exps.weight"); the
// low-precision copies of `moeflow pack --low` use the suffix "low" instead of "weight".
#include <optional>
#include <string>
#include <string_view>

namespace moeflow {

enum class ExpertTensor : int { Gate = 0, Up = 1, Down = 2, GateUp = 3 };
constexpr int kNumExpertTensors = 4;

// "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_up_exps"
const char* expert_tensor_base(ExpertTensor t);
// "blk.<layer>.<base>.<suffix>"
std::string expert_tensor_name(int layer, ExpertTensor t, std::string_view suffix = "weight");
// "blk.<layer>.<name>"
std::string layer_tensor_name(int layer, std::string_view name);

struct ExpertTensorName {
  int layer = -1;
  ExpertTensor kind = ExpertTensor::Gate;
  std::string suffix;
};
// Parses a stacked expert tensor's name; nullopt for any other tensor.
std::optional<ExpertTensorName> parse_expert_tensor_name(std::string_view name);

}  // namespace moeflow
