// runtime/cpu_repack.h: which tensors of a model read into memory get the CPU kernels' own
// layout. Only the matrices the model multiplies and never reads row by row: an interleaved
// matrix (Q4_K_R8) has no single rows.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/error.h"
#include "quant/blocks.h"
#include "runtime/cpu_repack.h"

namespace moeflow {
namespace {

TEST(CpuRepack, OnlyMatmulOnlyWeightsQualify) {
  for (const char* name :
       {"output.weight", "blk.0.ffn_gate_exps.weight", "blk.12.ffn_down_exps.weight",
        "blk.3.ffn_up_shexp.weight", "blk.1.attn_q.weight", "blk.1.attn_output.weight",
        "blk.7.attn_kv_a_mqa.weight", "blk.2.ffn_down.weight", "blk.0.ssm_out.weight"})
    EXPECT_TRUE(is_matmul_only_weight(name)) << name;
  // Read row by row (embedding lookup), dequantized per row (MLA's kv_b and its halves), or
  // no matrix at all.
  for (const char* name :
       {"token_embd.weight", "blk.0.attn_kv_b.weight", "blk.0.attn_k_b.weight",
        "blk.0.attn_v_b.weight", "blk.0.attn_norm.weight", "blk.0.ffn_gate_inp.weight",
        "blk.0.ffn_gate_exps.bias", "output_norm.weight", "blk.ffn_up.weight",
        "xblk.0.attn_q.weight", "blk.0.attn_q.weight.extra"})
    EXPECT_FALSE(is_matmul_only_weight(name)) << name;
}

TEST(CpuRepack, TheTransformRepacksStacksOfExpertsAndCountsTheirBytes) {
  // AVX2 is the lowest level that repacks. Without it (MOEFLOW_SIMD=scalar, or a CPU without
  // AVX2) the scalar level keeps its own Q4_K kernel and the transform leaves every tensor alone.
  bool vector_level = true;
  try {
    force_simd_level("avx2");
  } catch (const Error&) {
    vector_level = false;
  }
  std::mt19937 rng(1);
  const int64_t cols = 256, rows = 16, experts = 3;
  GgufTensorInfo t;
  t.name = "blk.0.ffn_up_exps.weight";
  t.type = GgmlType::Q4_K;
  t.dims = {cols, rows, experts};
  t.nbytes = row_bytes(t.type, cols) * rows * experts;
  std::vector<uint8_t> data(t.nbytes);
  for (auto& b : data) b = (uint8_t)(rng() & 0x3b);  // finite fp16 scales
  const std::vector<uint8_t> plain = data;
  std::atomic<uint64_t> bytes{0};
  const auto transform = cpu_repack_transform(&bytes);
  if (!vector_level) {
    EXPECT_EQ(transform(t, data.data()), GgmlType::Q4_K);
    EXPECT_EQ(data, plain);
    EXPECT_EQ(bytes.load(), 0u);
    return;
  }
  EXPECT_EQ(transform(t, data.data()), GgmlType::Q4_K_R8);
  EXPECT_EQ(bytes.load(), t.nbytes);
  // Each expert's matrix on its own: expert e of the repacked stack is expert e repacked.
  std::vector<uint8_t> want = plain;
  repack_for_cpu(GgmlType::Q4_K, want.data(), cols, rows, experts);
  EXPECT_EQ(data, want);
  std::vector<float> x(cols, 0.25f), a(rows), b(rows);
  const size_t mat = row_bytes(GgmlType::Q4_K, cols) * rows;
  matvec(GgmlType::Q4_K_R8, data.data() + 2 * mat, rows, cols, x.data(), a.data(), nullptr);
  matvec(GgmlType::Q4_K, plain.data() + 2 * mat, rows, cols, x.data(), b.data(), nullptr);
  EXPECT_EQ(a, b);
  // Left alone: another name, another type, rows that are not whole groups of 8.
  GgufTensorInfo other = t;
  other.name = "token_embd.weight";
  EXPECT_EQ(transform(other, data.data()), GgmlType::Q4_K);
  other = t;
  other.type = GgmlType::Q6_K;
  EXPECT_EQ(transform(other, data.data()), GgmlType::Q6_K);
  other = t;
  other.dims = {cols, 12, 4};
  EXPECT_EQ(transform(other, data.data()), GgmlType::Q4_K);
  EXPECT_EQ(bytes.load(), t.nbytes);
  force_simd_level(nullptr);
}

}  // namespace
}  // namespace moeflow
