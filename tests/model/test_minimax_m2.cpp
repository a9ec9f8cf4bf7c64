// minimax-m2 on `moeflow gen-model` files: what a layer computes comes from the metadata (every
// layer MoE, partial NeoX RoPE, q/k norms over the whole projections, sigmoid routing with the
// selection bias, renormalised and unscaled weights), batching and rewinding keep the cache
// consistent, and bad files and the variants no reference checks are refused by name (by the
// loader and by `moeflow info`). The logits themselves are checked against transformers and
// llama.cpp in tests/python.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "support/model_file_edit.h"
#include "support/run_binary.h"
#include "support/test_helpers.h"

namespace moeflow::test {
namespace {

std::string gen_tiny() {
  const std::string path = temp_path("minimax_m2_tiny.gguf");
  const Cmd c =
      run_moeflow("gen-model --arch minimax-m2 --preset tiny --type F32 --seed 5 -q -o " + path);
  EXPECT_EQ(c.rc, 0) << c.out;
  return path;
}

// A copy of `src` without the key `drop_key` (when not empty) and with `edit` applied to the
// metadata; tensors copied byte for byte unless `tensor` replaces or drops them (returns false).
using TensorEdit = std::function<bool(const GgufTensorInfo& t, const GgufFile& f, GgufWriter& w)>;
std::string rewrite_minimax_file(const std::string& src, const std::string& name,
                                 const std::string& drop_key,
                                 const std::function<void(GgufWriter&)>& edit,
                                 const TensorEdit& tensor = nullptr) {
  auto f = GgufFile::open(src);
  GgufWriter w;
  for (const auto& kv : f->metadata())
    if (kv.key != drop_key) w.set(kv.key, kv.value);
  if (edit) edit(w);
  for (const auto& t : f->tensors())
    if (!tensor || tensor(t, *f, w)) w.add_tensor(t.name, t.type, t.dims, f->data(t), t.nbytes);
  const std::string path = temp_path(name + ".gguf");
  w.write(path);
  return path;
}

TEST(MinimaxM2, LayoutFromMetadata) {
  // tiny: 4 layers, 4 heads of 32 (q 128 wide over n_embd 64), 2 kv heads, 16 rotary dims,
  // top-2 of 8 experts.
  auto f = GgufFile::open(gen_tiny());
  Model m(*f);
  const auto& s = m.specs();
  ASSERT_EQ(s.size(), 4u);
  for (int l = 0; l < 4; ++l) {
    SCOPED_TRACE(l);
    EXPECT_EQ(s[l].ffn, FfnKind::Moe);
    EXPECT_EQ(s[l].attn.kind, AttentionKind::Gqa);
    EXPECT_EQ(s[l].attn.rope.mode, RopeMode::NeoX);
    EXPECT_EQ(s[l].attn.rope.n_rot, 16);
    EXPECT_EQ(s[l].attn.params.head_dim, 32);
    EXPECT_EQ(s[l].attn.params.n_head_kv, 2);
    EXPECT_EQ(s[l].attn.qk_norm, QkNorm::Full);
    EXPECT_EQ(s[l].moe.routing.gating, RoutingSpec::Gating::Sigmoid);
    EXPECT_TRUE(s[l].moe.routing.norm_weights);
    EXPECT_FLOAT_EQ(s[l].moe.routing.scale, 1.0f);
    EXPECT_EQ(s[l].moe.routing.n_group, 1);
    EXPECT_FALSE(s[l].moe.shared_expert);
    const LayerWeights& L = m.weights().layers[l];
    EXPECT_TRUE(L.exp_probs_bias);
    EXPECT_EQ(L.q_norm.nelements(), 4 * 32);  // one weight over every head, not one per head
    EXPECT_EQ(L.k_norm.nelements(), 2 * 32);
    EXPECT_FALSE(L.bq);
  }
  // GQA cache: K and V rows of 2 kv heads of 32 per layer.
  EXPECT_EQ(m.kv_bytes_per_token(), 4u * 2 * (2 * 32) * sizeof(float));
}

TEST(MinimaxM2, BatchedChunkedAndRewoundRunsAgree) {
  expect_batched_chunked_and_rewound_runs_agree(gen_tiny(),
                                                {4, 8, 15, 16, 23, 42, 4, 8, 1, 95, 50, 300, 7});
}

TEST(MinimaxM2, BadFilesAndUnsupportedVariantsNameWhatIsWrong) {
  const std::string src = gen_tiny();
  const std::string a = "minimax-m2.";
  auto drop = [](const std::string& n) -> TensorEdit {
    return [n](const GgufTensorInfo& t, const GgufFile&, GgufWriter&) { return t.name != n; };
  };
  auto set_u32 = [](const std::string& k, uint32_t v) {
    return [k, v](GgufWriter& w) { w.set_u32(k, v); };
  };
  struct Case {
    std::string name, path, needle;
  };
  const Case cases[] = {
      {"no_bias",
       rewrite_minimax_file(src, "mm_no_bias", "", nullptr, drop("blk.2.exp_probs_b.bias")),
       "blk.2.exp_probs_b.bias"},
      {"no_q_norm",
       rewrite_minimax_file(src, "mm_no_q_norm", "", nullptr, drop("blk.1.attn_q_norm.weight")),
       "blk.1.attn_q_norm.weight"},
      // A per-head q norm (Qwen3's layout): the whole-projection one is 4 * 32 long.
      {"per_head_norm",
       rewrite_minimax_file(src, "mm_per_head", "", nullptr,
                            [](const GgufTensorInfo& t, const GgufFile& f, GgufWriter& w) {
                              if (t.name != "blk.0.attn_q_norm.weight") return true;
                              w.add_tensor(t.name, t.type, {32}, f.data(t), 32 * sizeof(float));
                              return false;
                            }),
       "blk.0.attn_q_norm.weight"},
      {"no_experts", rewrite_minimax_file(src, "mm_no_experts", a + "expert_count", nullptr),
       a + "expert_count"},
      {"softmax",
       rewrite_minimax_file(src, "mm_softmax", a + "expert_gating_func",
                            set_u32(a + "expert_gating_func", 1)),
       "expert_gating_func"},
      {"scale",
       rewrite_minimax_file(src, "mm_scale", "",
                            [&](GgufWriter& w) { w.set_f32(a + "expert_weights_scale", 2.5f); }),
       "expert_weights_scale"},
      {"no_norm",
       rewrite_minimax_file(src, "mm_no_norm", "",
                            [&](GgufWriter& w) { w.set_bool(a + "expert_weights_norm", false); }),
       "expert_weights_norm"},
      {"groups", rewrite_minimax_file(src, "mm_groups", "", set_u32(a + "expert_group_count", 4)),
       "expert_group_count"},
      {"shared", rewrite_minimax_file(src, "mm_shared", "", set_u32(a + "expert_shared_count", 1)),
       "expert_shared_count"},
      {"dense",
       rewrite_minimax_file(src, "mm_dense", "", set_u32(a + "leading_dense_block_count", 1)),
       "leading_dense_block_count"},
      {"yarn",
       rewrite_minimax_file(src, "mm_yarn", "",
                            [&](GgufWriter& w) {
                              w.set_string(a + "rope.scaling.type", "yarn");
                              w.set_f32(a + "rope.scaling.factor", 4.0f);
                            }),
       "rope.scaling.type"},
  };
  for (const Case& c : cases) {
    const std::string err = model_load_error(c.path);
    EXPECT_NE(err.find(c.needle), std::string::npos) << c.name << ": '" << err << "'";
  }
  // The unchanged file loads.
  EXPECT_EQ(model_load_error(src), "");
}

TEST(MinimaxM2, InfoNamesTheMetadataAndRefusedVariants) {
  const std::string src = gen_tiny();
  Cmd c = run_moeflow("info -m " + src);
  ASSERT_EQ(c.rc, 0) << c.out;
  EXPECT_NE(c.out.find("architecture: minimax-m2"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("minimax-m2.rope.dimension_count"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("minimax-m2.expert_gating_func"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("kv cache:"), std::string::npos) << c.out;  // loadable
  const std::string scaled = rewrite_minimax_file(src, "mm_info_scale", "", [](GgufWriter& w) {
    w.set_f32("minimax-m2.expert_weights_scale", 2.5f);
  });
  c = run_moeflow("info -m " + scaled);
  ASSERT_EQ(c.rc, 0) << c.out;  // info still describes a file it cannot run
  EXPECT_NE(c.out.find("not loadable"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("expert_weights_scale = 2.5 is not supported"), std::string::npos) << c.out;
}

}  // namespace
}  // namespace moeflow::test
