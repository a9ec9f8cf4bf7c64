// qwen3next and qwen35moe (gated DeltaNet hybrids) on `moeflow gen-model` files: the layer
// layout read from metadata, the KV cache holding rows only for the attention layers and the
// memory plan counting the recurrent state and its snapshots, the recurrent state continued
// across prefill chunks and decode steps and cleared for a new sequence, rewinding refused by
// name without a snapshot, the prefix cache going back to a state snapshot with the bits of a
// cold run (CPU and stand-in device), the stand-in device computing the same bits, a backend
// without the recurrent ops refused by name, and bad files
// refused naming what is wrong. The logits themselves are checked against transformers and
// llama.cpp in tests/python.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "backend/standin/standin_device.h"
#include "core/error.h"
#include "experts/resident_provider.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"
#include "runtime/auto_fit.h"
#include "runtime/engine.h"
#include "runtime/offload_options.h"
#include "runtime/prefix_cache.h"
#include "runtime/vram_plan.h"
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

// Per sequence of the tiny preset: 3 DeltaNet layers x (3 conv rows x 128 channels + 4 heads x 16
// x 16 state floats).
constexpr uint64_t kTinyHybridStateBytes = 3u * (3 * 128 + 4 * 16 * 16) * sizeof(float);

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
    EXPECT_EQ(m.recurrent_state_bytes(), kTinyHybridStateBytes);
  }
}

TEST(QwenHybrid, KvCacheHoldsRowsOnlyForAttentionLayersAndThePlanCountsTheState) {
  for (const char* arch : {"qwen3next", "qwen35moe"}) {
    SCOPED_TRACE(arch);
    const std::string path = gen_hy(arch);
    const uint64_t want = kv_bytes_from_tensors(path, 64);
    // One full-attention layer of 4: a quarter of a cache sized by its widest layer.
    auto f = GgufFile::open(path);
    const int64_t k_rows = f->find_tensor("blk.3.attn_k.weight")->rows();
    EXPECT_EQ(want, 64u * 2 * k_rows * sizeof(float));
    Engine e(path, opts());
    EXPECT_EQ(e.context().kv().bytes(), want);
    EXPECT_FALSE(e.context().kv().has(0));
    EXPECT_THROW(e.context().kv().k_view(0), Error);
    EXPECT_EQ(e.model().kv_bytes_per_token() * 64, want);
    FitContext fc;
    fc.n_ctx = 64;
    fc.state_snapshots = 3;
    const ModelMemory m = model_memory(*f, fc);
    EXPECT_EQ(m.kv_bytes, want);
    EXPECT_EQ(m.state_bytes, kTinyHybridStateBytes);
    EXPECT_EQ(m.snapshot_bytes, 3 * kTinyHybridStateBytes);
    // The backend's memory holds the state; host memory the state and the 3 snapshots.
    EXPECT_EQ(m.fixed(), m.non_expert_bytes + want + m.state_bytes + m.scratch_bytes);
    EXPECT_EQ(m.fixed_host(), m.fixed() - m.table_bytes + 3 * kTinyHybridStateBytes);
    const FitDecision d = auto_fit(m, m.fixed_host() + m.expert_bytes + (1ull << 30), "test");
    EXPECT_NE(d.reason.find("recurrent state and 3 snapshots"), std::string::npos) << d.reason;
    // A GPU's plan leaves the snapshots out of VRAM (a cache of every byte the device has left
    // beside fixed(): the state alone) and says where they are.
    OffloadOptions o;
    o.vram_free = 1 << 20;
    const uint64_t vram = m.fixed() + *o.vram_free + m.expert_bytes / 2;
    const VramPlan v = plan_vram(o, m, vram, vram, 0);
    EXPECT_EQ(v.budget, m.expert_bytes / 2);
    EXPECT_NE(v.reason.find("3 snapshots"), std::string::npos) << v.reason;
    EXPECT_NE(v.reason.find("in host memory"), std::string::npos) << v.reason;
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

// Logits of every prompt token a turn feeds after PrefixCache::prepare kept *reused of them.
std::vector<float> hybrid_turn(Engine& eng, PrefixCache& pc, const std::vector<int32_t>& prompt,
                               size_t* reused) {
  *reused = pc.prepare(eng, prompt);
  std::vector<float> out;
  eng.prefill(std::span(prompt).subspan(*reused), true, &out);
  pc.fed(std::span(prompt).subspan(*reused));
  return out;
}

// Cold runs of prompts (every row's logits), each from a fresh sequence, on the CPU.
struct HybridColdRuns {
  Engine eng;
  explicit HybridColdRuns(const std::string& path) : eng(path, opts()) {}
  // Row `from` on of a cold run of `prompt` equal `got` bit for bit.
  void expect_rows(const std::vector<int32_t>& prompt, size_t from, const std::vector<float>& got) {
    eng.reset();
    std::vector<float> want;
    eng.prefill(prompt, true, &want);
    const size_t V = eng.n_vocab();
    ASSERT_EQ(got.size(), (prompt.size() - from) * V);
    EXPECT_EQ(std::memcmp(got.data(), want.data() + from * V, got.size() * sizeof(float)), 0)
        << "from " << from;
  }
};

TEST(QwenHybrid, ThePrefixCacheGoesBackToAStateSnapshotExactly) {
  const std::vector<int32_t> p1 = {4, 8, 15, 16, 23, 42, 4, 8, 1, 95};
  std::vector<int32_t> p2 = p1;
  for (int32_t t : {5, 6, 7, 9, 11}) p2.push_back(t);
  std::vector<int32_t> p3(p2.begin(), p2.begin() + 13);
  p3.push_back(200);
  p3.push_back(201);
  const std::vector<int32_t> p4 = {4, 8, 77, 78, 79, 80};
  for (const char* arch : {"qwen3next", "qwen35moe"}) {
    const std::string path = gen_hy(arch);
    HybridColdRuns cold(path);
    for (BackendKind be : {BackendKind::Cpu, BackendKind::StandIn}) {
      SCOPED_TRACE(std::string(arch) + " " + backend_kind_name(be));
      EngineOptions o = opts(3);  // chunks of 3 tokens; snapshots every 4 positions, 3 kept
      o.backend = be;
      o.state_snapshots = 3;
      o.snapshot_interval = 4;
      Engine e(path, o);
      PrefixCache pc;
      size_t reused = 99;
      std::vector<float> got = hybrid_turn(e, pc, p1, &reused);
      EXPECT_EQ(reused, 0u);
      cold.expect_rows(p1, 0, got);
      // Every 4 positions and before the prompt's last token.
      EXPECT_EQ(e.context().snapshot_positions(), (std::vector<int64_t>{4, 8, 9}));
      // Everything held is a prefix: reused whole (the state is there); the lowest snapshots make
      // room for 12 and 14.
      got = hybrid_turn(e, pc, p2, &reused);
      EXPECT_EQ(reused, p1.size());
      cold.expect_rows(p2, reused, got);
      EXPECT_EQ(e.context().snapshot_positions(), (std::vector<int64_t>{9, 12, 14}));
      // Divergence at 13, after the snapshot of 12: back to it, 3 tokens computed again.
      got = hybrid_turn(e, pc, p3, &reused);
      EXPECT_EQ(reused, 12u);
      cold.expect_rows(p3, reused, got);
      EXPECT_EQ(e.context().snapshot_positions(), (std::vector<int64_t>{9, 12, 14}));
      // Divergence at 2, before every snapshot: a new sequence.
      got = hybrid_turn(e, pc, p4, &reused);
      EXPECT_EQ(reused, 0u);
      cold.expect_rows(p4, 0, got);
      EXPECT_EQ(e.context().snapshot_positions(), (std::vector<int64_t>{4, 5}));
      // The same prompt again (a regenerated reply) keeps its last token to feed: back to the
      // snapshot before it, not to the interval's 4.
      got = hybrid_turn(e, pc, p4, &reused);
      EXPECT_EQ(reused, p4.size() - 1);
      cold.expect_rows(p4, reused, got);
      // truncate() reaches a snapshot's position exactly and refuses any other.
      EXPECT_THROW(e.context().truncate(3), Error);
      e.context().truncate(4);
      EXPECT_EQ(e.pos(), 4);
    }
  }
}

TEST(QwenHybrid, StateSnapshotsTakeNoDeviceMemory) {
  // On a device the snapshots are kept in host memory (model/state_snapshots.h): an engine that
  // keeps 3 ends its turns with as much VRAM in use as one that keeps none, and still goes back
  // to them exactly (the test above, on the stand-in).
  const std::string path = gen_hy("qwen3next");
  const std::vector<int32_t> p1 = {4, 8, 15, 16, 23, 42, 4, 8, 1, 95};
  std::vector<int32_t> p2(p1.begin(), p1.begin() + 9);
  p2.push_back(200);
  uint64_t used[2] = {0, 0};
  for (int snapshots : {0, 3}) {
    SCOPED_TRACE(snapshots);
    const uint64_t before = standin_vram_used();
    {
      EngineOptions o = opts(3);
      o.backend = BackendKind::StandIn;
      o.state_snapshots = snapshots;
      o.snapshot_interval = 4;
      Engine e(path, o);
      PrefixCache pc;
      size_t reused = 0;
      hybrid_turn(e, pc, p1, &reused);
      const std::vector<float> got = hybrid_turn(e, pc, p2, &reused);
      EXPECT_EQ(reused, snapshots ? 9u : 0u);  // back to the snapshot before p1's last token
      HybridColdRuns(path).expect_rows(p2, reused, got);
      EXPECT_EQ(e.context().snapshot_positions().size(), snapshots ? 3u : 0u);
      used[snapshots ? 1 : 0] = standin_vram_used() - before;
    }
    EXPECT_EQ(standin_vram_used(), before);
  }
  EXPECT_GT(used[0], 0u);
  EXPECT_EQ(used[1], used[0]);
}

TEST(QwenHybrid, WithoutSnapshotsADivergedPromptStartsOver) {
  // The behaviour before state snapshots (state_snapshots 0, the library's default): p3 of the
  // test above reuses nothing.
  const std::string path = gen_hy("qwen35moe");
  Engine e(path, opts(3));
  PrefixCache pc;
  size_t reused = 99;
  const std::vector<int32_t> p1 = {4, 8, 15, 16, 23, 42, 4, 8, 1, 95, 5, 6, 7, 9, 11};
  std::vector<int32_t> p2(p1.begin(), p1.begin() + 13);
  p2.push_back(200);
  hybrid_turn(e, pc, p1, &reused);
  EXPECT_TRUE(e.context().snapshot_positions().empty());
  const std::vector<float> got = hybrid_turn(e, pc, p2, &reused);
  EXPECT_EQ(reused, 0u);
  HybridColdRuns(path).expect_rows(p2, 0, got);
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
