// deepseek2 and glm4moe on `moeflow gen-model` files: the KV cache really holds only MLA's
// latent, MTP blocks are not run, batching and rewinding keep the cache consistent, and bad
// files (and unsupported architectures or types, from the CLI) are refused by name. The logits
// themselves are checked against transformers and llama.cpp in tests/python.
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

TEST(DeepseekGlm, MlaCacheHoldsOnlyTheLatentAndTheRotaryKey) {
  // tiny: 4 layers, 4 heads, kv_lora_rank 32, rope 8, nope 16, v 16.
  const std::string path = gen_model_file("deepseek2", "tiny");
  EngineOptions opt;
  opt.n_threads = 1;
  opt.n_ctx = 64;
  Engine e(path, opt);
  const Model& m = e.model();
  EXPECT_EQ(m.kv_widths().k, 32 + 8);
  EXPECT_EQ(m.kv_widths().v, 0);
  EXPECT_EQ(m.kv_bytes_per_token(), 4u * (32 + 8) * sizeof(float));
  EXPECT_EQ(m.kv_bytes_per_token_per_head(), 4u * 4 * (16 + 8 + 16) * sizeof(float));
  // The memory actually allocated for the context is that, not the per-head size.
  EXPECT_EQ(e.context().kv().bytes(), 64 * m.kv_bytes_per_token());
  // GQA is unchanged: K and V rows per kv head (glm4moe tiny: 2 kv heads of 32).
  Engine g(gen_model_file("glm4moe", "tiny"), opt);
  EXPECT_EQ(g.model().kv_bytes_per_token(), 4u * 2 * (2 * 32) * sizeof(float));
  EXPECT_EQ(g.model().kv_bytes_per_token(), g.model().kv_bytes_per_token_per_head());
}

TEST(DeepseekGlm, LayoutFromMetadata) {
  auto f = GgufFile::open(gen_model_file("deepseek2", "tiny-v3"));
  Model m(*f);
  const auto& s = m.specs();
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].ffn, FfnKind::Dense);  // leading_dense_block_count 1
  for (int l = 1; l < 4; ++l) {
    EXPECT_EQ(s[l].ffn, FfnKind::Moe);
    EXPECT_EQ(s[l].attn.kind, AttentionKind::Mla);
    EXPECT_EQ(s[l].moe.routing.gating, RoutingSpec::Gating::Sigmoid);
    EXPECT_EQ(s[l].moe.routing.n_group, 4);
    EXPECT_EQ(s[l].moe.routing.topk_group, 2);
    EXPECT_EQ(s[l].moe.routing.group_top, 2);
    EXPECT_TRUE(s[l].moe.routing.norm_weights);
    EXPECT_FLOAT_EQ(s[l].moe.routing.scale, 2.5f);
    EXPECT_TRUE(s[l].moe.shared_expert);
    EXPECT_EQ(s[l].moe.shared_gate, GateFn::None);
  }
  EXPECT_TRUE(m.weights().layers[1].exp_probs_bias);
  EXPECT_TRUE(m.weights().layers[1].wq_a);  // q_lora_rank 24
  // glm4moe tiny: block_count 5 of which 1 MTP block, not run; half of each head rotates.
  auto g = GgufFile::open(gen_model_file("glm4moe", "tiny"));
  EXPECT_EQ(g->get_int("glm4moe.block_count"), 5);
  Model mg(*g);
  EXPECT_EQ(mg.hparams().n_layer, 4);
  EXPECT_EQ(mg.specs()[1].attn.rope.mode, RopeMode::NeoX);
  EXPECT_EQ(mg.specs()[1].attn.rope.n_rot, 16);
  EXPECT_EQ(mg.specs()[1].attn.qk_norm, QkNorm::PerHead);
  EXPECT_TRUE(mg.weights().layers[1].bq);
}

TEST(DeepseekGlm, BatchedChunkedAndRewoundRunsAgree) {
  // Rewinding must not let stale latent rows leak in.
  for (const auto& [arch, preset] :
       {std::pair{"deepseek2", "tiny"}, std::pair{"deepseek2", "tiny-v3"},
        std::pair{"glm4moe", "tiny"}}) {
    SCOPED_TRACE(std::string(arch) + "/" + preset);
    expect_batched_chunked_and_rewound_runs_agree(gen_model_file(arch, preset),
                                                  {4, 8, 15, 16, 23, 42, 4, 8, 1, 95, 50, 300, 7});
  }
}

TEST(DeepseekGlm, BadFilesNameWhatIsWrong) {
  const std::string ds = gen_model_file("deepseek2", "tiny");
  struct Case {
    std::string name, path, needle;
  };
  const Case cases[] = {
      {"kv_lora",
       rewrite_model_file(ds, "no_kv_lora", without("deepseek2.attention.kv_lora_rank"), keep_all),
       "deepseek2.attention.kv_lora_rank"},
      {"shared",
       rewrite_model_file(ds, "no_shared", without("deepseek2.expert_shared_count"), keep_all),
       "deepseek2.expert_shared_count"},
      {"k_b", rewrite_model_file(ds, "no_k_b", keep_all, without("blk.2.attn_k_b.weight")),
       "blk.2.attn_k_b.weight"},
      {"kv_a", rewrite_model_file(ds, "no_kv_a", keep_all, without("blk.0.attn_kv_a_mqa.weight")),
       "blk.0.attn_kv_a_mqa.weight"},
      {"dense", rewrite_model_file(ds, "no_dense", keep_all, without("blk.0.ffn_up.weight")),
       "blk.0.ffn_up.weight"},
      {"longrope",
       rewrite_model_file(
           ds, "longrope", without("deepseek2.rope.scaling.type"), keep_all,
           [](GgufWriter& w) { w.set_string("deepseek2.rope.scaling.type", "longrope"); }),
       "longrope"},
      {"temperature",
       rewrite_model_file(
           ds, "temperature", keep_all, keep_all,
           [](GgufWriter& w) { w.set_f32("deepseek2.attention.temperature_scale", 0.1f); }),
       "temperature_scale"},
      {"gating",
       rewrite_model_file(ds, "gating", without("deepseek2.expert_gating_func"), keep_all,
                          [](GgufWriter& w) { w.set_u32("deepseek2.expert_gating_func", 4); }),
       "expert_gating_func"},
      {"groups",
       rewrite_model_file(ds, "groups", without("deepseek2.expert_group_count"), keep_all,
                          [](GgufWriter& w) { w.set_u32("deepseek2.expert_group_count", 3); }),
       "expert_group_count"},
      {"glm_bias",
       rewrite_model_file(gen_model_file("glm4moe", "tiny"), "glm_no_bias", keep_all,
                          without("blk.2.exp_probs_b.bias")),
       "blk.2.exp_probs_b.bias"},
  };
  for (const Case& c : cases) {
    const std::string err = model_load_error(c.path);
    EXPECT_NE(err.find(c.needle), std::string::npos) << c.name << ": '" << err << "'";
  }
}

TEST(DeepseekGlm, CliRefusesUnsupportedArchitectureAndTypeByName) {
  const std::string ds = gen_model_file("deepseek2", "tiny");
  const std::string arch = rewrite_model_file(
      ds, "arch", [](const std::string& k) { return k.rfind("general.architecture", 0) != 0; },
      keep_all, [](GgufWriter& w) { w.set_string("general.architecture", "deepseek4"); });
  Cmd c = run_moeflow("eval -m " + arch + " --tokens 1,2,3");
  EXPECT_NE(c.rc, 0);
  EXPECT_NE(c.out.find("unsupported architecture 'deepseek4'"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("deepseek2"), std::string::npos) << c.out;  // the supported ones are listed
  EXPECT_NE(c.out.find("glm4moe"), std::string::npos) << c.out;
  // A tensor of a type moeflow cannot compute with (IQ2_XXS: 66 bytes per 256 values).
  auto f = GgufFile::open(ds);
  GgufWriter w;
  for (const auto& kv : f->metadata()) w.set(kv.key, kv.value);
  for (const auto& t : f->tensors()) {
    if (t.name == "blk.1.attn_v_b.weight") {
      // dims {32, 16, 4}: rows of 32 do not fit 256-blocks, so the row length is stretched.
      std::vector<uint8_t> bytes(66 * 16 * 4, 0);
      w.add_tensor(t.name, GgmlType::IQ2_XXS, {256, 16, 4}, bytes.data(), bytes.size());
    } else {
      w.add_tensor(t.name, t.type, t.dims, f->data(t), t.nbytes);
    }
  }
  const std::string typ = temp_path("iq2.gguf");
  w.write(typ);
  c = run_moeflow("eval -m " + typ + " --tokens 1,2,3");
  EXPECT_NE(c.rc, 0);
  EXPECT_NE(c.out.find("IQ2_XXS"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("blk.1.attn_v_b.weight"), std::string::npos) << c.out;
}

}  // namespace
}  // namespace moeflow::test
