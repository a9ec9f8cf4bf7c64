// build_expert_index on a small hand-built MoE file: every slice's offset and size is checked
// against a hand computation of the writer's layout, and the bytes it points at carry the
// (layer, projection, expert) tag they were written with.
#include "core/error.h"
#include "gguf/expert_index.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf_test_util.h"
#include "moe_fixture.h"

namespace moeflow {
namespace {

using test::TempDir;

TEST(ExpertIndex, SlicesMatchHandComputation) {
  TempDir dir;
  const std::string path = dir.file("moe.gguf");
  test::write_moe_fixture(path);
  auto f = GgufFile::open(path);
  const ExpertIndex idx = build_expert_index(*f);

  ASSERT_EQ(idx.n_layers, 3);
  ASSERT_EQ(idx.layers.size(), 3u);
  EXPECT_EQ(idx.layers[0].n_expert, 0);
  EXPECT_TRUE(idx.layers[0].slices.empty());

  // Tensor byte sizes by hand: F32 4 B, F16 2 B, Q8_0 34 B / 32, Q4_0 18 B / 32.
  const uint64_t sizes[] = {64 * 10 * 4, 64 * 32 * 2,     64 * 32 * 2,     32 * 64 * 2,
                            64 * 4 * 4,  2 * 34 * 32 * 4, 2 * 34 * 32 * 4, 32 * 64 * 2 * 4,
                            64 * 2 * 4,  2 * 18 * 64 * 2, 32 * 64 * 4 * 2, 2 * 34 * 10};
  uint64_t offs[12];
  uint64_t o = f->data_section_offset();
  for (int k = 0; k < 12; ++k) {
    offs[k] = o;
    o += (sizes[k] + 31) / 32 * 32;
  }

  const ExpertLayerIndex& l1 = idx.layers[1];
  EXPECT_EQ(l1.layer, 1);
  ASSERT_EQ(l1.n_expert, 4);
  EXPECT_FALSE(l1.fused_gate_up);
  for (int e = 0; e < 4; ++e) {
    const auto& g = l1.slices[e][0];
    EXPECT_EQ(g.type, GgmlType::Q8_0);
    EXPECT_EQ(g.rows, 32);
    EXPECT_EQ(g.cols, 64);
    EXPECT_EQ(g.nbytes, 2u * 34 * 32);
    EXPECT_EQ(g.file_offset, offs[5] + e * 2176u);
    EXPECT_EQ(l1.slices[e][1].file_offset, offs[6] + e * 2176u);
    const auto& d = l1.slices[e][2];
    EXPECT_EQ(d.type, GgmlType::F16);
    EXPECT_EQ(d.rows, 64);
    EXPECT_EQ(d.cols, 32);
    EXPECT_EQ(d.nbytes, 4096u);
    EXPECT_EQ(d.file_offset, offs[7] + e * 4096u);
    EXPECT_EQ(idx.expert_bytes(1, e), 2176u * 2 + 4096u);
  }

  const ExpertLayerIndex& l2 = idx.layers[2];
  ASSERT_EQ(l2.n_expert, 2);
  EXPECT_TRUE(l2.fused_gate_up);
  for (int e = 0; e < 2; ++e) {
    const auto& gu = l2.slices[e][0];
    EXPECT_EQ(gu.type, GgmlType::Q4_0);
    EXPECT_EQ(gu.rows, 64);
    EXPECT_EQ(gu.cols, 64);
    EXPECT_EQ(gu.nbytes, 2u * 18 * 64);
    EXPECT_EQ(gu.file_offset, offs[9] + e * 2304u);
    EXPECT_EQ(l2.slices[e][1].nbytes, 0u);
    EXPECT_EQ(l2.slices[e][2].file_offset, offs[10] + e * 8192u);
    EXPECT_EQ(l2.slices[e][2].nbytes, 8192u);
  }
  EXPECT_EQ(idx.total_expert_bytes(), 4 * (2176u * 2 + 4096u) + 2 * (2304u + 8192u));
  EXPECT_THROW(idx.expert_bytes(1, 4), Error);
  EXPECT_THROW(idx.expert_bytes(3, 0), Error);

  // The bytes at each slice are the ones written for that (layer, projection, expert).
  const uint8_t* base = f->data(f->tensors()[0]) - f->tensors()[0].file_offset;
  for (const auto& l : idx.layers)
    for (int e = 0; e < l.n_expert; ++e)
      for (int p = 0; p < kNumExpertProj; ++p) {
        const auto& s = l.slices[e][p];
        if (s.nbytes == 0) continue;
        const int slot = (l.fused_gate_up && p == 0) ? 3 : p;
        const uint8_t want = test::moe_fill_byte(l.layer, slot, e);
        EXPECT_EQ(base[s.file_offset], want);
        EXPECT_EQ(base[s.file_offset + s.nbytes - 1], want);
      }
}

void expect_index_error(
    const std::vector<std::tuple<std::string, GgmlType, std::vector<int64_t>>>& ts,
    const std::string& needle) {
  TempDir dir;
  const std::string path = dir.file("bad_moe.gguf");
  GgufWriter w;
  for (const auto& [name, type, dims] : ts)
    w.add_tensor(name, type, dims, [](uint8_t* d, uint64_t n) { std::fill(d, d + n, 0); });
  w.write(path);
  auto f = GgufFile::open(path);
  try {
    build_expert_index(*f);
    FAIL() << "accepted; expected: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ExpertIndex, RefusesInconsistentExperts) {
  const auto F = GgmlType::F32;
  expect_index_error({{"blk.0.ffn_gate_exps.weight", F, {8, 4, 4}},
                      {"blk.0.ffn_up_exps.weight", F, {8, 4, 3}},
                      {"blk.0.ffn_down_exps.weight", F, {4, 8, 4}}},
                     "has 3 experts");
  expect_index_error(
      {{"blk.0.ffn_gate_exps.weight", F, {8, 4, 4}}, {"blk.0.ffn_up_exps.weight", F, {8, 4, 4}}},
      "ffn_down_exps");
  expect_index_error({{"blk.0.ffn_gate_exps.weight", F, {8, 4}},
                      {"blk.0.ffn_up_exps.weight", F, {8, 4, 4}},
                      {"blk.0.ffn_down_exps.weight", F, {4, 8, 4}}},
                     "3 [cols, rows, n_expert]");
  expect_index_error({{"blk.0.ffn_gate_exps.weight", F, {8, 4, 4}},
                      {"blk.0.ffn_up_exps.weight", F, {8, 5, 4}},
                      {"blk.0.ffn_down_exps.weight", F, {4, 8, 4}}},
                     "different shapes");
  expect_index_error({{"blk.0.ffn_gate_up_exps.weight", F, {8, 4, 4}},
                      {"blk.0.ffn_down_exps.weight", F, {4, 8, 4}}},
                     "implies [8, 8]");
  expect_index_error({{"blk.0.ffn_gate_up_exps.weight", F, {8, 8, 4}},
                      {"blk.0.ffn_gate_exps.weight", F, {8, 4, 4}},
                      {"blk.0.ffn_down_exps.weight", F, {4, 8, 4}}},
                     "both a fused");
}

TEST(ExpertIndex, DenseModelHasNoExperts) {
  TempDir dir;
  const std::string path = dir.file("dense.gguf");
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 2);
  w.add_tensor("blk.1.ffn_up.weight", GgmlType::F32, {4, 4},
               [](uint8_t* d, uint64_t n) { std::fill(d, d + n, 0); });
  w.write(path);
  const ExpertIndex idx = build_expert_index(*GgufFile::open(path));
  EXPECT_EQ(idx.n_layers, 2);
  ASSERT_EQ(idx.layers.size(), 2u);
  EXPECT_EQ(idx.layers[1].n_expert, 0);
  EXPECT_EQ(idx.total_expert_bytes(), 0u);
}

TEST(ExpertIndex, NextTokenPredictionBlocksAreNotExperts) {
  // GLM-4.5 / DeepSeek-V3 files may store MTP blocks (full MoE layers) after the trunk,
  // counted in block_count; generation never runs them, so their experts are not indexed.
  TempDir dir;
  const std::string path = dir.file("mtp.gguf");
  GgufWriter w;
  w.set_string("general.architecture", "glm4moe");
  w.set_u32("glm4moe.block_count", 3);
  w.set_u32("glm4moe.nextn_predict_layers", 1);
  auto zero = [](uint8_t* d, uint64_t n) { std::fill(d, d + n, 0); };
  for (int l : {1, 2}) {
    const std::string b = "blk." + std::to_string(l) + ".";
    w.add_tensor(b + "ffn_gate_exps.weight", GgmlType::F32, {8, 4, 4}, zero);
    w.add_tensor(b + "ffn_up_exps.weight", GgmlType::F32, {8, 4, 4}, zero);
    w.add_tensor(b + "ffn_down_exps.weight", GgmlType::F32, {4, 8, 4}, zero);
  }
  w.write(path);
  const ExpertIndex idx = build_expert_index(*GgufFile::open(path));
  EXPECT_EQ(idx.n_layers, 2);
  ASSERT_EQ(idx.layers.size(), 2u);
  EXPECT_EQ(idx.layers[0].n_expert, 0);
  EXPECT_EQ(idx.layers[1].n_expert, 4);
  EXPECT_EQ(idx.total_expert_bytes(), 3u * 8 * 4 * 4 * 4);
}

}  // namespace
}  // namespace moeflow
