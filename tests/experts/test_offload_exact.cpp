// End to end: the offloaded engine (CachedExpertProvider under many budgets, policies, thread
// counts and prefetch settings) produces bit-identical logits to the all-resident engine, and a
// `moeflow pack`ed model runs to the same logits.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/offload_session.h"
#include "gguf/gguf_file.h"
#include "runtime/engine.h"

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
// files: MXFP4 experts, Q8_0 elsewhere, 32 experts), LayerNorm + SparseMixer + LongRoPE (phimoe).
struct ArchModel {
  const char* name;
  const char* gen_args;
};
const ArchModel kModels[] = {
    {"mixtral", "--arch mixtral --preset tiny --type Q4_K"},
    {"gpt_oss", "--arch gpt-oss --preset tiny --experts 32 --type Q8_0 --expert-type MXFP4"},
    {"phimoe", "--arch phimoe --preset tiny --type Q4_K"},
};

class OffloadExact : public ::testing::TestWithParam<ArchModel> {
 protected:
  void SetUp() override {
    path_ = tmp_path(std::string("model_") + GetParam().name);
    const std::string cmd = std::string(MOEFLOW_BINARY) + " gen-model " + GetParam().gen_args +
                            " --seed 7 -q -o " + path_ + " > /dev/null 2>&1";
    ASSERT_EQ(0, std::system(cmd.c_str())) << cmd;
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::string path_;
};

INSTANTIATE_TEST_SUITE_P(Archs, OffloadExact, ::testing::ValuesIn(kModels),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_P(OffloadExact, LogitsBitIdenticalToResidentUnderEveryConfiguration) {
  std::shared_ptr<const GgufFile> file(GgufFile::open(path_));
  const RunResult ref = run_engine(file, 1, nullptr);
  struct Case { double rate; const char* cache; const char* policy; int threads; int io;
                const char* prefetch; bool early; bool per_layer; };
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
  for (const Case& c : cases) {
    OffloadOptions o;
    if (c.cache) {
      o.expert_cache = std::to_string(probe.slot_bytes() * top_k * (c.per_layer ? layers : 1));
    } else {
      o.cache_rate = c.rate;
    }
    o.policy = c.policy;
    o.io_threads = c.io;
    o.prefetch = c.prefetch;
    o.no_early_preemption = !c.early;
    o.per_layer = c.per_layer;
    SCOPED_TRACE(testing::Message() << "rate " << c.rate << " policy " << c.policy << " threads "
                                    << c.threads << " prefetch " << c.prefetch << " early " << c.early
                                    << " per_layer " << c.per_layer);
    OffloadStats st;
    const RunResult got = run_engine(file, c.threads, &o, &st);
    EXPECT_EQ(got.tokens, ref.tokens);
    ASSERT_EQ(got.logits.size(), ref.logits.size());
    EXPECT_EQ(0, std::memcmp(got.logits.data(), ref.logits.data(), ref.logits.size() * sizeof(float)));
    const LayerOffloadStats t = st.total();
    EXPECT_GT(t.acquires, 0u);
    EXPECT_GT(t.bytes_read, 0u);
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
  o.expert_cache = "4KiB";
  try {
    make_offload(o, *file);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top-k"), std::string::npos) << e.what();
  }
  o.expert_cache = "3 parsecs";
  EXPECT_THROW(make_offload(o, *file), Error);
  o.expert_cache.clear();
  o.cache_rate = 1.5;
  EXPECT_THROW(make_offload(o, *file), Error);
}

TEST_P(OffloadExact, PackedModelIsAlignedAndRunsToTheSameLogits) {
  const std::string out = tmp_path(std::string("packed_") + GetParam().name);
  const std::string cmd = std::string(MOEFLOW_BINARY) + " pack -m " + path_ + " -o " + out +
                          " > /dev/null 2>&1";
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

}  // namespace
}  // namespace moeflow
