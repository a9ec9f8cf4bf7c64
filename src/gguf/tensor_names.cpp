#include "gguf/tensor_names.h"

#include <fmt/format.h>

namespace moeflow {

const char* expert_tensor_base(ExpertTensor t) {
  static const char* names[kNumExpertTensors] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps",
                                                 "ffn_gate_up_exps"};
  return names[(int)t];
}

std::string expert_tensor_name(int layer, ExpertTensor t, std::string_view suffix) {
  return fmt::format("blk.{}.{}.{}", layer, expert_tensor_base(t), suffix);
}

std::string layer_tensor_name(int layer, std::string_view name) {
  return fmt::format("blk.{}.{}", layer, name);
}

std::optional<ExpertTensorName> parse_expert_tensor_name(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return std::nullopt;
  size_t i = 4;
  int layer = 0, digits = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && digits < 7) {
    layer = layer * 10 + (name[i] - '0');
    ++i, ++digits;
  }
  if (digits == 0 || digits > 6 || i >= name.size() || name[i] != '.') return std::nullopt;
  const std::string_view rest = name.substr(i + 1);
  for (int k = 0; k < kNumExpertTensors; ++k) {
    const std::string_view base = expert_tensor_base((ExpertTensor)k);
    if (rest.size() > base.size() + 1 && rest.substr(0, base.size()) == base &&
        rest[base.size()] == '.') {
      ExpertTensorName out;
      out.layer = layer;
      out.kind = (ExpertTensor)k;
      out.suffix = std::string(rest.substr(base.size() + 1));
      return out;
    }
  }
  return std::nullopt;
}

}  // namespace moeflow
