// The MoE block protocol: a provider that reports random residency (so experts run in random
// orders) must give bit-identical logits to the resident provider, and the block must follow
// the documented call order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "experts/resident_provider.h"
#include "gguf/gguf_file.h"
#include "model/moe/moe_block.h"
#include "runtime/engine.h"
#include "support/test_helpers.h"
#include "support/tiny_model.h"

namespace moeflow::test {
namespace {

class ShufflingProvider : public ExpertProvider {
 public:
  ShufflingProvider(const GgufFile& f, uint64_t seed) : inner_(f), rng_(seed) {}

  void on_route(int layer, std::span<const int> experts, std::span<const Precision>) override {
    EXPECT_TRUE(pinned_.empty()) << "on_route while experts are pinned";
    routed_layer_ = layer;
    routed_.assign(experts.begin(), experts.end());
    reported_.clear();
    acquired_.clear();
    ++n_on_route_;
  }
  Residency residency(int layer, int expert, Precision) const override {
    const auto r = (Residency)(rng_() % 3);
    reported_[expert] = r;
    return r;
  }
  ExpertView acquire(int layer, int expert, Precision p) override {
    EXPECT_EQ(layer, routed_layer_) << "acquire for a layer that has not routed";
    EXPECT_NE(std::find(routed_.begin(), routed_.end(), expert), routed_.end())
        << "acquired expert " << expert << " that on_route did not announce";
    EXPECT_TRUE(reported_.count(expert)) << "acquire before residency() was asked";
    EXPECT_TRUE(pinned_.insert(expert).second) << "expert acquired twice";
    acquired_.push_back(expert);
    return inner_.acquire(layer, expert, p);
  }
  void release(int layer, int expert, Precision p) override {
    EXPECT_EQ(pinned_.erase(expert), 1u) << "release without acquire";
    if (acquired_.size() == routed_.size()) check_order();
  }
  int n_on_route() const { return n_on_route_; }
  int n_out_of_rank_order = 0;  // steps where execution order differed from the router's

 private:
  void check_order() {
    // Execution must be resident, then in flight, then not started.
    for (size_t i = 1; i < acquired_.size(); ++i)
      EXPECT_LE((int)reported_[acquired_[i - 1]], (int)reported_[acquired_[i]]);
    if (acquired_ != routed_) ++n_out_of_rank_order;
  }
  ResidentExpertProvider inner_;
  mutable std::mt19937_64 rng_;
  mutable std::map<int, Residency> reported_;
  std::vector<int> routed_, acquired_;
  std::set<int> pinned_;
  int routed_layer_ = -1;
  int n_on_route_ = 0;
};

std::vector<float> run_all(const std::string& path, std::shared_ptr<ExpertProvider> prov,
                           const std::vector<int32_t>& prompt, int n_gen, int threads) {
  EngineOptions opt;
  opt.n_threads = threads;
  opt.n_ctx = 64;
  opt.batch = 5;  // several chunks
  auto file = std::shared_ptr<const GgufFile>(GgufFile::open(path));
  Engine eng(file, opt, prov);
  std::vector<float> all;
  eng.prefill(prompt, true, &all);
  int32_t tok = prompt.back();
  for (int i = 0; i < n_gen; ++i) {
    auto row = eng.decode(tok);
    all.insert(all.end(), row.begin(), row.end());
    tok = (tok * 7 + 3) % (int32_t)eng.n_vocab();
  }
  return all;
}

TEST(MoeBlock, RandomResidencyIsBitIdenticalToResident) {
  for (const char* arch : {"llama", "qwen2moe"}) {
    TinySpec s;
    s.arch = arch;
    s.n_expert = 8;
    s.top_k = 3;
    const std::string path = temp_path(std::string("shuffle_") + arch + ".gguf");
    write_tiny_model(s, path);
    const std::vector<int32_t> prompt = {5, 9, 2, 77, 31, 8, 8, 40, 11, 64, 3, 90};
    auto file = GgufFile::open(path);
    const auto ref = run_all(path, nullptr, prompt, 6, 2);
    auto shuffler = std::make_shared<ShufflingProvider>(*file, 42);
    const auto got = run_all(path, shuffler, prompt, 6, 2);
    ASSERT_EQ(ref.size(), got.size());
    EXPECT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float))) << arch;
    // 3 prefill chunks + 6 decode steps, each routing every layer.
    EXPECT_EQ(shuffler->n_on_route(), (3 + 6) * s.n_layer);
    EXPECT_GT(shuffler->n_out_of_rank_order, 0) << "the test never changed the execution order";
  }
}

TEST(MoeBlock, ThreadCountDoesNotChangeResults) {
  TinySpec s;
  s.arch = "olmoe";
  const std::string path = temp_path("threads.gguf");
  write_tiny_model(s, path);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7};
  const auto a = run_all(path, nullptr, prompt, 3, 1);
  const auto b = run_all(path, nullptr, prompt, 3, 3);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

TEST(MoeBlock, SelectTopkMatchesDefinition) {
  std::mt19937 rng(7);
  std::normal_distribution<float> N(0, 2);
  std::vector<float> logits(16), scratch(16);
  for (int trial = 0; trial < 50; ++trial) {
    for (auto& l : logits) l = N(rng);
    for (bool renorm : {false, true}) {
      int ex[4];
      float w[4];
      select_topk(logits.data(), 16, 4, renorm, ex, w, scratch.data());
      std::vector<double> p(16);
      double sum = 0;
      for (int e = 0; e < 16; ++e) sum += (p[e] = std::exp((double)logits[e]));
      std::vector<int> idx(16);
      for (int e = 0; e < 16; ++e) idx[e] = e;
      std::sort(idx.begin(), idx.end(), [&](int a, int b) { return p[a] > p[b]; });
      double ksum = 0;
      for (int r = 0; r < 4; ++r) ksum += p[idx[r]];
      for (int r = 0; r < 4; ++r) {
        EXPECT_EQ(ex[r], idx[r]);
        const double want = renorm ? p[idx[r]] / ksum : p[idx[r]] / sum;
        EXPECT_NEAR(w[r], want, 1e-6);
      }
    }
  }
}

}  // namespace
}  // namespace moeflow::test
