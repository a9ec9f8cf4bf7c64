#include "runtime/cpu_repack.h"

#include <array>
#include <atomic>
#include <memory>
#include <string_view>
#include <unordered_map>

#include "backend/cpu/matmul.h"
#include "gguf/tensor_names.h"

namespace moeflow {

bool is_matmul_only_weight(const std::string& name) {
  if (name == "output.weight") return true;
  // blk.N.<what>.weight
  constexpr std::string_view kPrefix = "blk.";
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return false;
  const size_t dot = name.find('.', kPrefix.size());
  if (dot == std::string::npos) return false;
  const std::string_view what = std::string_view(name).substr(dot + 1);
  // The routed experts' stacks, as gguf/tensor_names.h spells them (their "low" copies are not
  // the model's weights).
  if (const auto e = parse_expert_tensor_name(name)) return e->suffix == "weight";
  static constexpr std::array<std::string_view, 16> kMatmulOnly = {
      "ffn_gate.weight",       "ffn_up.weight",       "ffn_down.weight",
      "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight",
      "attn_q.weight",         "attn_k.weight",       "attn_v.weight",
      "attn_qkv.weight",       "attn_output.weight",  "attn_gate.weight",
      "attn_q_a.weight",       "attn_q_b.weight",     "attn_kv_a_mqa.weight",
      "ssm_out.weight"};
  for (std::string_view m : kMatmulOnly)
    if (what == m) return true;
  return false;
}

GgufFile::TensorTransform cpu_repack_transform(std::atomic<uint64_t>* bytes) {
  return [bytes](const GgufTensorInfo& t, uint8_t* data) {
    if (t.dims.size() < 2 || !is_matmul_only_weight(t.name)) return t.type;
    const int64_t cols = t.dims[0], rows = t.dims[1];
    const GgmlType to = cpu_repacked_type(t.type, rows);
    if (to == t.type) return t.type;
    // A stack of experts [cols, rows, n_expert]: each expert's matrix is repacked on its own.
    repack_for_cpu(t.type, data, cols, rows, t.rows() / rows);
    if (bytes) *bytes += t.nbytes;
    return to;
  };
}

std::function<bool(const TensorView&)> matmul_only_views(const GgufFile& file) {
  // Where each matmul-only tensor's bytes start, and how many there are.
  auto whole = std::make_shared<std::unordered_map<const uint8_t*, uint64_t>>();
  for (const GgufTensorInfo& t : file.tensors())
    if (is_matmul_only_weight(t.name)) (*whole)[file.data(t)] = t.nbytes;
  return [whole](const TensorView& v) {
    const auto it = whole->find(v.data);
    return it != whole->end() && it->second == v.nbytes();
  };
}

SlotRewrite cpu_slot_rewrite() {
  SlotRewrite r;
  r.type_in_slot = [](GgmlType type, int64_t rows) { return cpu_repacked_type(type, rows); };
  r.rewrite = [](GgmlType type, uint8_t* data, int64_t cols, int64_t rows) {
    repack_for_cpu(type, data, cols, rows, 1);
  };
  return r;
}

}  // namespace moeflow
