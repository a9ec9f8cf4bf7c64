#pragma once
// A tiny MoE-shaped model written with GgufWriter: layer 0 dense, layer 1 separate
// gate/up/down expert tensors, layer 2 a fused gate_up tensor. Each expert slice is filled with
// a byte identifying (layer, projection, expert) so tests can check where the index points.
#include <string>

#include "gguf/gguf_writer.h"

namespace moeflow::test {

inline uint8_t moe_fill_byte(int layer, int slot, int expert) {
  return static_cast<uint8_t>(layer * 64 + slot * 16 + expert + 1);
}

struct MoeTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> dims;
  int layer;  // -1: not an expert tensor
  int slot;   // 0 gate, 1 up, 2 down, 3 fused gate_up
};

inline std::vector<MoeTensor> moe_fixture_tensors() {
  return {
      {"token_embd.weight", GgmlType::F32, {64, 10}, -1, 0},
      {"blk.0.ffn_gate.weight", GgmlType::F16, {64, 32}, -1, 0},
      {"blk.0.ffn_up.weight", GgmlType::F16, {64, 32}, -1, 0},
      {"blk.0.ffn_down.weight", GgmlType::F16, {32, 64}, -1, 0},
      {"blk.1.ffn_gate_inp.weight", GgmlType::F32, {64, 4}, -1, 0},
      {"blk.1.ffn_gate_exps.weight", GgmlType::Q8_0, {64, 32, 4}, 1, 0},
      {"blk.1.ffn_up_exps.weight", GgmlType::Q8_0, {64, 32, 4}, 1, 1},
      {"blk.1.ffn_down_exps.weight", GgmlType::F16, {32, 64, 4}, 1, 2},
      {"blk.2.ffn_gate_inp.weight", GgmlType::F32, {64, 2}, -1, 0},
      {"blk.2.ffn_gate_up_exps.weight", GgmlType::Q4_0, {64, 64, 2}, 2, 3},
      {"blk.2.ffn_down_exps.weight", GgmlType::F32, {32, 64, 2}, 2, 2},
      {"output.weight", GgmlType::Q8_0, {64, 10}, -1, 0},
  };
}

inline void write_moe_fixture(const std::string& path, uint64_t alignment = 32) {
  GgufWriter w(alignment);
  w.set_string("general.architecture", "testmoe");
  w.set_u32("testmoe.block_count", 3);
  w.set_u32("testmoe.embedding_length", 64);
  w.set_u32("testmoe.expert_count", 4);
  w.set_u32("testmoe.expert_used_count", 2);
  w.set_f32("testmoe.rope.freq_base", 10000.0f);
  w.set("tokenizer.ggml.tokens", GgufValue::make_string_array({"<s>", "</s>", "a", "b"}));
  w.set("tokenizer.ggml.scores", GgufValue::make_f32_array({0, 0, -1, -2}));
  w.set("nested", GgufValue::make_array(GgufType::ARRAY, {GgufValue::make_i32_array({1, 2})}));
  for (const auto& t : moe_fixture_tensors()) {
    const MoeTensor tc = t;
    w.add_tensor(t.name, t.type, t.dims, [tc](uint8_t* dst, uint64_t n) {
      const uint64_t n_slices = tc.layer < 0 ? 1 : static_cast<uint64_t>(tc.dims[2]);
      for (uint64_t k = 0; k < n; ++k)
        dst[k] = tc.layer < 0
                     ? static_cast<uint8_t>(k * 7 + 3)
                     : moe_fill_byte(tc.layer, tc.slot, static_cast<int>(k / (n / n_slices)));
    });
  }
  w.write(path);
}

}  // namespace moeflow::test
