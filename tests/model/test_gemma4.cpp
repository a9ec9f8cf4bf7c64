// gemma4 on `moeflow gen-model` files: what each layer computes is read from the metadata (the
// sliding and global layers' own head sizes, kv heads, RoPE and windows, values from the keys
// on the global layers), the KV cache holds the widest layer's rows and the narrower layers
// use the leading part of them consistently across batching and rewinding, and bad or
// unsupported files are refused by name. The logits themselves are checked against
// transformers and llama.cpp in tests/python.
#include <gtest/gtest.h>

#include <cmath>
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

// Files of this test carry a tag of their own in the shared temp folder.
std::string gen_g4(const std::string& arch, const std::string& preset,
                   const std::string& type = "F32") {
  return gen_model_file(arch, preset, type, 5, "g4_");
}

TEST(Gemma4, LayoutFromMetadata) {
  // tiny: 4 layers, 1 and 3 global; 8 heads; sliding heads of 16 (4 kv heads, window 8, base
  // 1e4), global heads of 32 (1 kv head, keys as values, a quarter of each head rotating at base
  // 1e6).
  auto f = GgufFile::open(gen_g4("gemma4", "tiny"));
  Model m(*f);
  const HParams& hp = m.hparams();
  EXPECT_FLOAT_EQ(hp.embd_scale, 8.0f);
  EXPECT_FLOAT_EQ(hp.logit_softcap, 30.0f);
  const auto& s = m.specs();
  ASSERT_EQ(s.size(), 4u);
  for (int l = 0; l < 4; ++l) {
    SCOPED_TRACE(l);
    const bool global = l % 2 == 1;
    const LayerWeights& L = m.weights().layers[l];
    const AttentionSpec& a = s[l].attn;
    EXPECT_EQ(a.params.head_dim, global ? 32 : 16);
    EXPECT_EQ(a.params.head_dim_v, a.params.head_dim);
    EXPECT_EQ(a.params.n_head_kv, global ? 1 : 4);
    EXPECT_EQ(a.params.window, global ? 0 : 8);
    EXPECT_FLOAT_EQ(a.params.scale, 1.0f);
    EXPECT_EQ(a.rope.mode, RopeMode::NeoX);
    EXPECT_EQ(a.rope.n_rot, global ? 32 : 16);
    EXPECT_FLOAT_EQ(a.rope.freq_base, global ? 1e6f : 1e4f);
    EXPECT_EQ(a.v_from_k, global);
    EXPECT_EQ((bool)L.wv, !global);
    EXPECT_TRUE(a.v_norm);
    EXPECT_EQ(a.qk_norm, QkNorm::PerHead);
    ASSERT_EQ((bool)L.rope_freqs, global);
    if (global) {  // 32 / 2 pairs, the leading quarter of the head rotating
      const float* fr = L.rope_freqs.as<float>();
      for (int i = 0; i < 16; ++i) EXPECT_EQ(fr[i], i < 4 ? 1.0f : 1e30f) << i;
    }
    EXPECT_TRUE(s[l].post_norms && s[l].dense_beside_moe);
    EXPECT_EQ(s[l].ffn, FfnKind::Moe);
    EXPECT_EQ(s[l].moe.act.kind, GluKind::GeGLU);
    EXPECT_EQ(s[l].dense_act.kind, GluKind::GeGLU);
    EXPECT_TRUE(s[l].moe.routing.norm_weights);
    EXPECT_NE(s[l].out_scale, 1.0f);  // drawn around 1
    EXPECT_TRUE(L.exp_weight_scale && L.router_norm && L.ffn_pre_norm_2);
  }
  // Output head tied to the embedding.
  EXPECT_EQ(m.weights().output.data, m.weights().token_embd.data);
  // The widest layer's rows are 4 x 16 (sliding); the global layers' 1 x 32 are half of that.
  EXPECT_EQ(m.kv_widths().k, 64);
  EXPECT_EQ(m.kv_widths().v, 64);
  // The cache keeps each layer's own: 2 sliding x 2 x 64 + 2 global x 2 x 32 floats a position.
  EXPECT_EQ(m.kv_bytes_per_token(), (2u * 2 * 64 + 2u * 2 * 32) * sizeof(float));
}

TEST(Gemma4, KvCacheKeepsEachLayersOwnRows) {
  const std::string path = gen_g4("gemma4", "tiny");
  EngineOptions o;
  o.n_threads = 1;
  o.n_ctx = 40;
  Engine e(path, o);
  EXPECT_EQ(e.context().kv().bytes(), kv_bytes_from_tensors(path, 40));
  EXPECT_EQ(e.model().kv_bytes_per_token() * 40, kv_bytes_from_tensors(path, 40));
  EXPECT_EQ(e.context().kv().k_view(1).cols(), 32);  // a global layer's rows, contiguous
  EXPECT_EQ(e.context().kv().k_view(1).row_stride(), 32 * sizeof(float));
  EXPECT_EQ(e.context().kv().v_view(2).cols(), 64);
}

TEST(Gemma4, NarrowerLayersUseTheLeadingColumnsOfTheCacheRows) {
  KvCache kv(2, 8, 32, 32);
  const TensorView k = kv.k_view(1, 16);
  EXPECT_EQ(k.cols(), 16);
  EXPECT_EQ(k.rows(), 8);
  EXPECT_EQ(k.row_stride(), 32 * sizeof(float));
  EXPECT_TRUE(k.data == reinterpret_cast<const uint8_t*>(kv.k(1, 0)));
  EXPECT_EQ(kv.k_view(1, 0).cols(), 32);
  EXPECT_THROW(kv.v_view(0, 33), Error);
}

TEST(Gemma4, BatchedChunkedAndRewoundRunsAgree) {
  // 13 tokens cross the sliding layers' 8-token window.
  const std::vector<float> logits = expect_batched_chunked_and_rewound_runs_agree(
      gen_g4("gemma4", "tiny"), {4, 8, 15, 16, 23, 42, 4, 8, 1, 95, 50, 300, 7});
  ASSERT_FALSE(logits.empty());
  for (float v : logits) ASSERT_LT(std::fabs(v), 30.0f);  // soft-capped at 30
}

TEST(Gemma4, BadAndUnsupportedFilesNameWhatIsWrong) {
  const std::string g = gen_g4("gemma4", "tiny");
  const std::string p = "gemma4.";
  struct Case {
    std::string name, path, needle;
  };
  const Case cases[] = {
      {"pattern",
       rewrite_model_file(g, "no_pattern", without(p + "attention.sliding_window_pattern"),
                          keep_all),
       "gemma4.attention.sliding_window_pattern"},
      {"window",
       rewrite_model_file(g, "no_window", without(p + "attention.sliding_window"), keep_all),
       "gemma4.attention.sliding_window"},
      {"ple",
       rewrite_model_file(
           g, "ple", without(p + "embedding_length_per_layer_input"), keep_all,
           [&](GgufWriter& w) { w.set_u32(p + "embedding_length_per_layer_input", 256); }),
       "per-layer input embeddings"},
      {"shared_kv",
       rewrite_model_file(g, "shared_kv", without(p + "attention.shared_kv_layers"), keep_all,
                          [&](GgufWriter& w) { w.set_u32(p + "attention.shared_kv_layers", 2); }),
       "gemma4.attention.shared_kv_layers"},
      {"dense", rewrite_model_file(g, "dense", without(p + "expert_count"), keep_all),
       "dense Gemma 4 models"},
      {"rope_scaling",
       rewrite_model_file(g, "rope_scaling", keep_all, keep_all,
                          [&](GgufWriter& w) {
                            w.set_string(p + "rope.scaling.type", "yarn");
                            w.set_f32(p + "rope.scaling.factor", 4.0f);
                          }),
       "rope.scaling"},
      {"rope_freqs", rewrite_model_file(g, "no_rope_freqs", keep_all, without("rope_freqs.weight")),
       "rope_freqs.weight"},
      {"pre_norm_2",
       rewrite_model_file(g, "no_pre_norm_2", keep_all, without("blk.1.pre_ffw_norm_2.weight")),
       "blk.1.pre_ffw_norm_2.weight"},
      {"router_scale",
       rewrite_model_file(g, "no_router_scale", keep_all, without("blk.0.ffn_gate_inp.scale")),
       "blk.0.ffn_gate_inp.scale"},
      {"post_norm",
       rewrite_model_file(g, "no_post_norm", keep_all, without("blk.3.post_ffw_norm.weight")),
       "blk.3.post_ffw_norm.weight"},
      {"dense_layer",
       rewrite_model_file(g, "dense_layer", keep_all, without("blk.2.ffn_gate_inp.weight")),
       "dense Gemma 4 layers"},
  };
  for (const Case& c : cases) {
    const std::string err = model_load_error(c.path);
    EXPECT_NE(err.find(c.needle), std::string::npos) << c.name << ": '" << err << "'";
  }
}

TEST(Gemma4, InfoNamesTheMetadataAndWhyAFileCannotRun) {
  const std::string g = gen_g4("gemma4", "tiny");
  Cmd c = run_moeflow("info -m " + g);
  ASSERT_EQ(c.rc, 0) << c.out;
  for (const char* needle :
       {"gemma4.attention.head_count_kv", "[4, 1, 4, 1]", "gemma4.attention.sliding_window_pattern",
        "[true, false, true, false]", "gemma4.attention.key_length_swa",
        "gemma4.rope.dimension_count_swa", "gemma4.rope.freq_base_swa",
        "gemma4.final_logit_softcapping", "kv cache:"})
    EXPECT_NE(c.out.find(needle), std::string::npos) << needle << "\n" << c.out;
  const std::string ple = rewrite_model_file(
      g, "info_ple", without("gemma4.embedding_length_per_layer_input"), keep_all,
      [](GgufWriter& w) { w.set_u32("gemma4.embedding_length_per_layer_input", 256); });
  c = run_moeflow("info -m " + ple);
  ASSERT_EQ(c.rc, 0) << c.out;
  EXPECT_NE(c.out.find("not loadable"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("per-layer input embeddings"), std::string::npos) << c.out;
}

TEST(Gemma4, PerLayerKvHeadsAreRefusedByArchitecturesThatDoNotBuildThem) {
  const std::string q = gen_g4("qwen3moe", "tiny");
  const std::string path = rewrite_model_file(
      q, "qwen_kv_array", without("qwen3moe.attention.head_count_kv"), keep_all, [](GgufWriter& w) {
        w.set("qwen3moe.attention.head_count_kv", GgufValue::make_i32_array({2, 1, 2, 1}));
      });
  EXPECT_NE(model_load_error(path).find("head_count_kv differs between layers"), std::string::npos)
      << model_load_error(path);
  // A uniform array is one number.
  const std::string same = rewrite_model_file(
      q, "qwen_kv_same", without("qwen3moe.attention.head_count_kv"), keep_all, [](GgufWriter& w) {
        w.set("qwen3moe.attention.head_count_kv", GgufValue::make_i32_array({2, 2, 2, 2}));
      });
  EXPECT_EQ(model_load_error(same), "");
}

}  // namespace
}  // namespace moeflow::test
