// End to end: the offloaded engine (CachedExpertProvider under many budgets, policies, thread
// counts and prefetch settings) produces bit-identical logits to the all-resident engine, and a
// `moeflow pack`ed model runs to the same logits.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "policy/eviction_policy.h"
#include "runtime/engine.h"
#include "runtime/offload_session.h"

namespace moeflow {
namespace {

std::string tmp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("moeflow_offload_exact_" + name + "_" + std::to_string(::getpid()) + ".gguf"))
      .string();
}

struct RunResult {
  std::vector<float> logits;  // prefill last row + every decode row
  std::vector<int32_t> tokens;
};

RunResult run_engine(std::shared_ptr<const GgufFile> file, int threads, const OffloadOptions* off,
                     OffloadStats* stats = nullptr) {
  EngineOptions opt;
  opt.n_threads = threads;
  opt.n_ctx = 64;
  opt.batch = 5;  // several prefill chunks, each routing a union of experts
  OffloadSession session;
  if (off) session = make_offload(*off, *file);
  Engine eng(file, opt, session.provider);
  if (off) session.attach(eng.context(), eng.model());
  RunResult r;
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 3, 250, 7, 8, 300, 11, 12};
  std::vector<float> last;
  eng.prefill(prompt, false, &last);
  r.logits = last;
  int32_t tok = 0;
  for (int i = 0; i < 12; ++i) {
    tok = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    r.tokens.push_back(tok);
    auto row = eng.decode(tok);
    last.assign(row.begin(), row.end());
    r.logits.insert(r.logits.end(), row.begin(), row.end());
  }
  if (stats && session.provider) *stats = session.provider->stats();
  return r;
}

// One tiny model per architecture family the offloading has to serve: plain experts (mixtral),
// experts with resident biases, MXFP4 experts, sinks and a window (gpt-oss, as the released
// files: MXFP4 experts, Q8_0 elsewhere, 32 experts), LayerNorm + SparseMixer + LongRoPE (phimoe),
// fused gate_up experts with per-expert weight factors beside a dense FFN, a router on its own
// input, sliding and global layers of different cache widths (gemma4: the small shape, whose
// experts are large enough that the rate-based budgets hold top-k slots per layer; the tiny
// one's Q4_K experts are a fraction of an O_DIRECT-aligned slot).
struct ArchModel {
  const char* name;
  const char* gen_args;
};
const ArchModel kModels[] = {
    {"mixtral", "--arch mixtral --preset tiny --type Q4_K"},
    {"gpt_oss", "--arch gpt-oss --preset tiny --experts 32 --type Q8_0 --expert-type MXFP4"},
    {"phimoe", "--arch phimoe --preset tiny --type Q4_K"},
    {"gemma4", "--arch gemma4 --preset small --layers 2 --type Q4_K"},
};

class OffloadExact : public ::testing::TestWithParam<ArchModel> {
 protected:
  void SetUp() override {
    path_ = tmp_path(std::string("model_") + GetParam().name);
    const std::string cmd = std::string(MOEFLOW_BINARY) + " gen-model " + GetParam().gen_args +
                            " --seed 7 -q -o " + path_ + " > /dev/null 2>&1";
    ASSERT_EQ(0, std::system(cmd.c_str())) << cmd;
    // A routing trace of the same model calibrates the placement policies (static, daop).
    calib_ = tmp_path(std::string("calib_") + GetParam().name) + ".mft";
    const std::string prompts = tmp_path("prompts") + ".txt";
    {
      std::ofstream f(prompts);
      f << "the quick brown fox\nonce upon a time there was\n";
    }
    const std::string rec = std::string(MOEFLOW_BINARY) + " trace -m " + path_ + " --prompts " +
                            prompts + " -o " + calib_ + " -n 6 > /dev/null 2>&1";
    ASSERT_EQ(0, std::system(rec.c_str())) << rec;
    std::filesystem::remove(prompts);
  }
  void TearDown() override {
    std::filesystem::remove(path_);
    std::filesystem::remove(calib_);
  }
  std::string path_, calib_;
};

INSTANTIATE_TEST_SUITE_P(Archs, OffloadExact, ::testing::ValuesIn(kModels),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_P(OffloadExact, LogitsBitIdenticalToResidentUnderEveryConfiguration) {
  std::shared_ptr<const GgufFile> file(GgufFile::open(path_));
  std::deque<std::string> policy_names;  // keeps the names the cases point at
  const RunResult ref = run_engine(file, 1, nullptr);
  struct Case {
    double rate;
    const char* cache;
    const char* policy;
    int threads;
    int io;
    const char* prefetch;
    bool early;
    bool per_layer;
  };
  // "min" budgets hold exactly top-k experts (global) or top-k per layer.
  const Case cases[] = {
      {0.0, "min", "lru", 1, 1, "none", false, false},
      {0.0, "min", "lru", 2, 2, "lookahead", true, false},
      {0.3, nullptr, "lru", 2, 2, "lookahead", true, false},
      {0.3, nullptr, "lfu", 1, 3, "lookahead", false, false},
      {0.9, nullptr, "lru", 2, 1, "none", true, true},
      {1.0, nullptr, "lfu", 2, 2, "lookahead", true, false},
  };
  ExpertStore probe(file->split_paths(), build_expert_index(*file));
  const std::string arch = file->get_string("general.architecture");
  const uint64_t top_k = (uint64_t)file->get_int(arch + ".expert_used_count");
  const uint64_t layers = (uint64_t)file->get_int(arch + ".block_count");
  std::vector<Case> all(std::begin(cases), std::end(cases));
  // Every policy the factory knows, each with its hooks live (placement, declined misses,
  // sequence and prefill signals), at a budget that makes it evict and with both prefetch
  // settings: none of it may change a bit of the output.
  for (const std::string& name : eviction_policy_names()) {
    policy_names.push_back(name);
    all.push_back({0.45, nullptr, policy_names.back().c_str(), 2, 2, "lookahead", true, false});
    all.push_back({0.75, nullptr, policy_names.back().c_str(), 1, 1, "none", false, true});
  }
  for (const Case& c : all) {
    OffloadOptions o;
    if (c.cache) {
      o.expert_cache = probe.slot_bytes() * top_k * (c.per_layer ? layers : 1);
    } else {
      o.cache_rate = c.rate;
    }
    o.policy = c.policy;
    if (eviction_policy_needs_calibration(c.policy)) o.policy_calib = calib_;
    o.io_threads = c.io;
    o.prefetch = c.prefetch;
    o.no_early_preemption = !c.early;
    o.per_layer = c.per_layer;
    SCOPED_TRACE(testing::Message() << "rate " << c.rate << " policy " << c.policy << " threads "
                                    << c.threads << " prefetch " << c.prefetch << " early "
                                    << c.early << " per_layer " << c.per_layer);
    OffloadStats st;
    const RunResult got = run_engine(file, c.threads, &o, &st);
    EXPECT_EQ(got.tokens, ref.tokens);
    ASSERT_EQ(got.logits.size(), ref.logits.size());
    EXPECT_EQ(0,
              std::memcmp(got.logits.data(), ref.logits.data(), ref.logits.size() * sizeof(float)));
    const LayerOffloadStats t = st.total();
    EXPECT_GT(t.acquires, 0u);
    EXPECT_GT(t.bytes_read, 0u);
    if (c.rate > 0 && c.rate < 0.9) {
      EXPECT_GT(t.evictions + t.streamed, 0u);  // the budget was tight
    }
    const std::string pol = c.policy;
    if (pol == "static" || pol == "daop") {
      EXPECT_GT(t.placements, 0u);
    }
    if (pol == "daop") {
      EXPECT_GT(t.streamed, 0u);
    }
    if (std::string(c.prefetch) == "lookahead") {
      EXPECT_GT(t.prefetch_issued + t.prefetch_dropped + t.prefetch_too_late, 0u);
    } else {
      EXPECT_EQ(t.prefetch_issued, 0u);
    }
  }
}

TEST_P(OffloadExact, BudgetSmallerThanTopKFailsAtStart) {
  std::shared_ptr<const GgufFile> file(GgufFile::open(path_));
  OffloadOptions o;
  o.expert_cache = 4096;
  try {
    make_offload(o, *file);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top-k"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_byte_size("3 parsecs", "--expert-cache"), Error);
  // A placement policy without its calibration, or a calibration no policy reads, is refused
  // naming the flag; a trace of another model's shape too.
  o.expert_cache.reset();
  o.cache_rate = 0.5;
  for (const char* p : {"static", "daop"}) {
    o.policy = p;
    try {
      make_offload(o, *file);
      FAIL() << "expected an error for " << p;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--policy-calib"), std::string::npos) << e.what();
    }
  }
  o.policy = "lru";
  o.policy_calib = calib_;
  EXPECT_THROW(make_offload(o, *file), Error);
  o.policy = "static";
  EXPECT_NO_THROW(make_offload(o, *file));
  o.policy_calib = MOEFLOW_SHARED_DATA
      "/traces/mixtral-8x7b-instruct_speculative-moe/analysis/deep_analysis/routing_raw.jsonl";
  if (std::filesystem::exists(o.policy_calib)) {
    try {
      make_offload(o, *file);
      FAIL() << "a 32-layer trace calibrated a tiny model";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("32 layers"), std::string::npos) << e.what();
    }
  }
  o.policy = "lru";
  o.policy_calib.clear();
  o.expert_cache.reset();
  o.cache_rate = 1.5;
  EXPECT_THROW(make_offload(o, *file), Error);
}

TEST_P(OffloadExact, PackedModelIsAlignedAndRunsToTheSameLogits) {
  const std::string out = tmp_path(std::string("packed_") + GetParam().name);
  const std::string cmd =
      std::string(MOEFLOW_BINARY) + " pack -m " + path_ + " -o " + out + " > /dev/null 2>&1";
  ASSERT_EQ(0, std::system(cmd.c_str())) << cmd;
  std::shared_ptr<const GgufFile> orig(GgufFile::open(path_));
  std::shared_ptr<const GgufFile> packed(GgufFile::open(out));
  EXPECT_TRUE(packed->get_bool("moeflow.packed", false));
  EXPECT_EQ(packed->alignment(), 4096u);
  ASSERT_EQ(packed->tensors().size(), orig->tensors().size());
  for (const auto& t : orig->tensors()) {
    const GgufTensorInfo& p = packed->tensor(t.name);
    EXPECT_EQ(p.file_offset % 4096, 0u) << t.name;
    ASSERT_EQ(p.nbytes, t.nbytes);
    EXPECT_EQ(0, std::memcmp(packed->data(p), orig->data(t), t.nbytes)) << t.name;
  }
  const RunResult a = run_engine(orig, 1, nullptr);
  OffloadOptions o;
  o.cache_rate = 0.3;
  const RunResult b = run_engine(packed, 1, &o);
  EXPECT_EQ(0, std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)));
  std::filesystem::remove(out);
}

// The DeepSeek, GLM and MiniMax-M2 layouts (leading dense layer, shared experts, sigmoid routing
// with a selection bias and expert groups, MLA's latent cache, GLM's MTP block whose experts are
// never indexed, MiniMax's full-width q/k norms and partial RoPE; the hybrids' recurrent layers)
// under budgets from exactly top-k experts to all of them.
class OffloadExactArch : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(OffloadExactArch, LogitsBitIdenticalToResidentAtEveryBudget) {
  const auto [arch, preset] = GetParam();
  const std::string path = tmp_path(std::string(arch) + "_" + preset);
  const std::string cmd = std::string(MOEFLOW_BINARY) + " gen-model --arch " + arch + " --preset " +
                          preset + " --type Q4_K --seed 3 -q -o " + path + " > /dev/null 2>&1";
  ASSERT_EQ(0, std::system(cmd.c_str())) << cmd;
  std::shared_ptr<const GgufFile> file(GgufFile::open(path));
  const RunResult ref = run_engine(file, 1, nullptr);
  ExpertStore probe(file->split_paths(), build_expert_index(*file));
  const int top_k = (int)file->get_int(std::string(arch) + ".expert_used_count");
  // Budgets in expert slots (tiny experts are small next to the O_DIRECT alignment of a slot):
  // exactly top-k, a few more, half the MoE layers' experts per layer, everything.
  int n_moe = 0;  // deepseek2 / glm4moe: layer 0 is dense; minimax-m2: every layer is MoE
  for (const auto& l : probe.index().layers) n_moe += l.n_expert > 0;
  const int n_exp = (int)file->get_int(std::string(arch) + ".expert_count");
  struct Case {
    int slots;
    bool all;
    const char* prefetch;
    int threads;
    bool per_layer;
  };
  const Case cases[] = {
      {top_k, false, "none", 1, false},
      {top_k, false, "lookahead", 2, false},
      {top_k + 2, false, "lookahead", 2, false},
      {n_exp / 2 * (n_moe + 1), false, "none", 1, true},
      {n_exp * n_moe / 2, false, "lookahead", 2, false},
      {0, true, "lookahead", 1, false},
  };
  for (const Case& c : cases) {
    OffloadOptions o;
    if (c.all)
      o.cache_rate = 1.0;
    else
      o.expert_cache = probe.slot_bytes() * c.slots;
    o.prefetch = c.prefetch;
    o.per_layer = c.per_layer;
    SCOPED_TRACE(testing::Message() << arch << "/" << preset << " slots " << c.slots << " all "
                                    << c.all << " prefetch " << c.prefetch << " threads "
                                    << c.threads << " per_layer " << c.per_layer);
    OffloadStats st;
    const RunResult got = run_engine(file, c.threads, &o, &st);
    EXPECT_EQ(got.tokens, ref.tokens);
    ASSERT_EQ(got.logits.size(), ref.logits.size());
    EXPECT_EQ(0,
              std::memcmp(got.logits.data(), ref.logits.data(), ref.logits.size() * sizeof(float)));
    EXPECT_GT(st.total().bytes_read, 0u);
  }
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(DeepseekGlm, OffloadExactArch,
                         ::testing::Values(std::pair{"deepseek2", "tiny"},
                                           std::pair{"deepseek2", "tiny-v3"},
                                           std::pair{"glm4moe", "tiny"},
                                           // gated DeltaNet hybrids: a recurrent state beside
                                           // the KV cache, sigmoid-gated shared experts
                                           std::pair{"qwen3next", "tiny"},
                                           std::pair{"qwen35moe", "tiny"}),
                         [](const auto& info) {
                           std::string n = std::string(info.param.first) + "_" + info.param.second;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });
INSTANTIATE_TEST_SUITE_P(MinimaxM2, OffloadExactArch,
                         ::testing::Values(std::pair{"minimax-m2", "tiny"}), [](const auto& info) {
                           std::string n = std::string(info.param.first) + "_" + info.param.second;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace moeflow
