// qwen3next and qwen35moe (gated DeltaNet hybrids) on `moeflow gen-model` files: the layer
// layout read from metadata, the recurrent state continued across prefill chunks and decode
// steps and cleared for a new sequence, rewinding refused by name (the prefix cache starts over
// instead), the stand-in device computing the same bits, a backend without the recurrent ops
// refused by name, and bad files refused naming what is wrong. The logits themselves are checked
// against transformers and llama.cpp in tests/python.
#include <gtest/gtest.h>

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "experts/resident_provider.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/prefix_cache.h"
#include "support/model_file_edit.h"
#include "support/run_binary.h"
#include "support/stand_in_device.h"
#include "support/test_helpers.h"

namespace moeflow::test {
namespace {

std::string gen_hy(const std::string& arch, const std::string& preset = "tiny") {
  return gen_model_file(arch, preset, "F32", 7, "hy_");
}

EngineOptions opts(int batch = 256) {
  EngineOptions o;
  o.n_threads = 2;
  o.n_ctx = 64;
  o.batch = batch;
  return o;
}

TEST(QwenHybrid, LayoutFromMetadata) {
  for (const char* arch : {"qwen3next", "qwen35moe"}) {
    SCOPED_TRACE(arch);
    auto f = GgufFile::open(gen_hy(arch));
    Model m(*f);
    const auto& s = m.specs();
    ASSERT_EQ(s.size(), 4u);
    for (int l = 0; l < 4; ++l) {
      EXPECT_EQ(s[l].ffn, FfnKind::Moe);
      EXPECT_TRUE(s[l].moe.shared_expert);
      EXPECT_EQ(s[l].moe.shared_gate, GateFn::Sigmoid);
      EXPECT_TRUE(s[l].moe.routing.norm_weights);
    }
    // tiny: DeltaNet with 2 key heads, 4 value heads of 16 and 4 taps on layers 0-2, then gated
    // full attention with a quarter of each 32-wide head rotating.
    for (int l = 0; l < 3; ++l) {
      EXPECT_EQ(s[l].attn.kind, AttentionKind::GatedDeltaNet);
      const DeltaNetSpec& d = s[l].attn.delta;
      EXPECT_EQ(d.n_k_heads, 2);
      EXPECT_EQ(d.n_v_heads, 4);
      EXPECT_EQ(d.head_k, 16);
      EXPECT_EQ(d.head_v, 16);
      EXPECT_EQ(d.d_conv, 4);
      EXPECT_EQ(d.tiled, std::string(arch) == "qwen35moe");
      EXPECT_EQ(d.fused_ba, std::string(arch) == "qwen3next");
    }
    EXPECT_EQ(s[3].attn.kind, AttentionKind::Gqa);
    EXPECT_TRUE(s[3].attn.output_gate);
    EXPECT_EQ(s[3].attn.qk_norm, QkNorm::PerHead);
    EXPECT_EQ(s[3].attn.rope.mode, RopeMode::NeoX);
    EXPECT_EQ(s[3].attn.rope.n_rot, 8);
    EXPECT_TRUE(m.has_recurrent_layers());
    // Per sequence: 3 layers x (3 conv rows x 128 channels + 4 heads x 16 x 16 state floats).
    EXPECT_EQ(m.recurrent_state_bytes(), 3u * (3 * 128 + 4 * 16 * 16) * sizeof(float));
  }
}

TEST(QwenHybrid, StateContinuesAcrossChunksAndDecodeAndClearsOnReset) {
  const std::vector<int32_t> toks = {4, 8, 15, 16, 23, 42, 4, 8, 1, 95, 50, 300, 7};
  for (const char* arch : {"qwen3next", "qwen35moe"}) {
    SCOPED_TRACE(arch);
    const std::string path = gen_hy(arch);
    Engine a(path, opts()), b(path, opts()), c(path, opts(4));
    std::vector<float> la, lb, lc;
    a.prefill(toks, true, &la);
    b.prefill_sequential(toks, true, &lb);  // one token per step: the decode path
    c.prefill(toks, true, &lc);             // chunks of 4 continue the state
    const size_t V = a.n_vocab();
    ASSERT_EQ(la.size(), toks.size() * V);
    for (size_t t = 0; t < toks.size(); ++t) {
      // The same per-token arithmetic whatever the chunking: identical bits.
      EXPECT_EQ(rel_max_diff(la.data() + t * V, lb.data() + t * V, V), 0.0) << "pos " << t;
      EXPECT_EQ(rel_max_diff(la.data() + t * V, lc.data() + t * V, V), 0.0) << "pos " << t;
    }
    // A second sequence after reset starts from a zero state: the same logits again.
    a.reset();
    std::vector<float> again;
    a.prefill(toks, true, &again);
    EXPECT_EQ(rel_max_diff(la.data(), again.data(), la.size()), 0.0);
    // The state depends on the prefix: a different first token changes the last logits.
    std::vector<int32_t> other = toks;
    other[0] = 5;
    Engine d(path, opts());
    std::vector<float> ld;
    d.prefill(other, false, &ld);
    EXPECT_GT(rel_max_diff(la.data() + (toks.size() - 1) * V, ld.data(), V), 1e-4);
  }
}

TEST(QwenHybrid, RewindIsRefusedByNameAndThePrefixCacheStartsOver) {
  const std::string path = gen_hy("qwen3next");
  const std::vector<int32_t> p1 = {4, 8, 15, 16, 23, 42};
  Engine e(path, opts());
  e.prefill(p1, false, nullptr);
  EXPECT_FALSE(e.context().can_rewind());
  e.context().truncate(e.pos());  // no-op: allowed
  try {
    e.context().truncate(3);
    FAIL() << "truncate(3) of a recurrent model must throw";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("qwen3next"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("recurrent"), std::string::npos) << err.what();
  }
  EXPECT_EQ(e.pos(), 6);  // unchanged by the refused rewind

  // The prefix cache reuses an extension of what the engine holds, and starts over (exactly)
  // when the new prompt diverges inside it.
  Engine fresh(path, opts());
  PrefixCache pc;
  Engine g(path, opts());
  ASSERT_EQ(pc.prepare(g, p1), 0u);
  g.prefill(p1, false, nullptr);
  pc.fed(p1);
  const std::vector<int32_t> longer = {4, 8, 15, 16, 23, 42, 99, 7};
  ASSERT_EQ(pc.prepare(g, longer), 6u);
  std::vector<float> got, want;
  g.prefill(std::span(longer).subspan(6), false, &got);
  pc.fed(std::span(longer).subspan(6));
  fresh.prefill(longer, false, &want);
  EXPECT_EQ(rel_max_diff(got.data(), want.data(), got.size()), 0.0);
  const std::vector<int32_t> diverged = {4, 8, 15, 77, 23};
  EXPECT_EQ(pc.prepare(g, diverged), 0u);
  EXPECT_EQ(g.pos(), 0);
  g.prefill(diverged, false, &got);
  fresh.reset();
  fresh.prefill(diverged, false, &want);
  EXPECT_EQ(rel_max_diff(got.data(), want.data(), got.size()), 0.0);
}

TEST(QwenHybrid, StandInDeviceComputesTheSameBits) {
  for (const char* arch : {"qwen3next", "qwen35moe"}) {
    SCOPED_TRACE(arch);
    const std::string path = gen_hy(arch);
    const std::vector<int32_t> toks = {4, 8, 15, 16, 23, 42, 4, 8, 1};
    Engine cpu(path, opts(4));
    EngineOptions so = opts(4);
    so.backend = BackendKind::StandIn;
    Engine dev(path, so);
    std::vector<float> a, b;
    cpu.prefill(toks, true, &a);
    dev.prefill(toks, true, &b);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(rel_max_diff(a.data(), b.data(), a.size()), 0.0);
    const auto da = cpu.decode(3);
    std::vector<float> ra(da.begin(), da.end());
    const auto db = dev.decode(3);
    EXPECT_EQ(rel_max_diff(ra.data(), db.data(), ra.size()), 0.0);
  }
}

// Every production backend has the recurrent ops now (CPU, stand-in, CUDA); one without them
// (Backend's defaults: the test-support device of stand_in_device.h) is refused when the context
// is made, naming the backend and the architecture, not at the first token.
TEST(QwenHybrid, ABackendWithoutTheRecurrentOpsIsRefusedByName) {
  const std::string path = gen_hy("qwen35moe");
  auto file = GgufFile::open(path);
  const Model model(*file);
  ResidentExpertProvider provider(*file);
  StandInDevice device;
  ASSERT_FALSE(device.has_recurrent_ops());
  try {
    ForwardContext ctx(model, provider, 16, 4, device);
    FAIL() << "a backend without conv1d_silu / gated_delta_net must be refused";
  } catch (const Error& err) {
    const std::string what = err.what();
    EXPECT_NE(what.find("stand-in device"), std::string::npos) << what;
    EXPECT_NE(what.find("gated DeltaNet"), std::string::npos) << what;
    EXPECT_NE(what.find("qwen35moe"), std::string::npos) << what;
  }
}

TEST(QwenHybrid, BadFilesNameWhatIsWrong) {
  const std::string next = gen_hy("qwen3next"), v35 = gen_hy("qwen35moe");
  struct Case {
    std::string name, path, needle;
  };
  const Case cases[] = {
      {"conv",
       rewrite_model_file(next, "hy_no_conv", without("qwen3next.ssm.conv_kernel"), keep_all),
       "qwen3next.ssm.conv_kernel"},
      {"groups",
       rewrite_model_file(next, "hy_no_groups", without("qwen3next.ssm.group_count"), keep_all),
       "qwen3next.ssm.group_count"},
      {"inner",
       rewrite_model_file(next, "hy_inner", without("qwen3next.ssm.inner_size"), keep_all,
                          [](GgufWriter& w) { w.set_u32("qwen3next.ssm.inner_size", 48); }),
       "ssm.inner_size"},
      {"ssm_a", rewrite_model_file(next, "hy_no_a", keep_all, without("blk.1.ssm_a")),
       "blk.1.ssm_a"},
      {"ba", rewrite_model_file(next, "hy_no_ba", keep_all, without("blk.0.ssm_ba.weight")),
       "blk.0.ssm_ba.weight"},
      {"q_norm",
       rewrite_model_file(next, "hy_no_qn", keep_all, without("blk.3.attn_q_norm.weight")),
       "blk.3.attn_q_norm.weight"},
      {"shexp_gate",
       rewrite_model_file(next, "hy_no_shg", keep_all, without("blk.2.ffn_gate_inp_shexp.weight")),
       "blk.2.ffn_gate_inp_shexp.weight"},
      {"legacy",
       rewrite_model_file(next, "hy_legacy", keep_all, without("blk.0.attn_gate.weight"), nullptr,
                          [](const std::string& n) {
                            return n == "blk.0.attn_qkv.weight" ? std::string("blk.0.ssm_in.weight")
                                                                : n;
                          }),
       "legacy fused ssm_in"},
      {"sections",
       rewrite_model_file(v35, "hy_no_sections", without("qwen35moe.rope.dimension_sections"),
                          keep_all),
       "qwen35moe.rope.dimension_sections"},
      {"beta", rewrite_model_file(v35, "hy_no_beta", keep_all, without("blk.2.ssm_beta.weight")),
       "blk.2.ssm_beta.weight"},
  };
  for (const Case& c : cases) {
    const std::string err = model_load_error(c.path);
    EXPECT_NE(err.find(c.needle), std::string::npos) << c.name << ": '" << err << "'";
  }
}

TEST(QwenHybrid, InfoNamesTheRecurrentLayersAndSkippedBlocks) {
  const Cmd c = run_moeflow("info -m " + gen_hy("qwen35moe"));
  ASSERT_EQ(c.rc, 0) << c.out;
  EXPECT_NE(c.out.find("3 gated DeltaNet layer(s) of 4"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("qwen35moe.ssm.conv_kernel"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("qwen35moe.full_attention_interval"), std::string::npos) << c.out;
}

}  // namespace
}  // namespace moeflow::test
