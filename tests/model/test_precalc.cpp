// DAOP stale-input pre-calculation (PrecisionModeConfig::precalc) against the float64 reference's
// reading of the rule (reference_forward.h, RefPrecalc): a provider with a fixed residency
// pattern decides where layers wait, so the reference knows which experts the engine must have
// pre-calculated and which routed uses must have taken those outputs.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "experts/resident_provider.h"
#include "gguf/gguf_file.h"
#include "reference_forward.h"
#include "runtime/engine.h"
#include "test_helpers.h"
#include "tiny_model.h"

namespace moeflow::test {
namespace {

bool in_flight(int layer, int expert) { return (layer * 5 + expert * 3) % 4 == 0; }

// Every expert is in RAM; residency() reports the fixed pattern above, so a layer "waits"
// exactly when it routes to an expert the pattern marks in flight.
class PatternProvider final : public ExpertProvider {
 public:
  explicit PatternProvider(const GgufFile& f) : inner_(f) {}
  void on_route(int layer, std::span<const int> experts) override {
    routed_layer_ = layer;
    routed_.assign(experts.begin(), experts.end());
  }
  Residency residency(int layer, int expert) const override {
    return in_flight(layer, expert) ? Residency::InFlight : Residency::Resident;
  }
  ExpertView acquire(int layer, int expert, Precision p) override {
    if (layer != routed_layer_) {
      // A pre-calculation for the next layer: only experts that cost no read.
      EXPECT_EQ(layer, routed_layer_ + 1) << "pre-calculation for a layer other than the next";
      EXPECT_FALSE(in_flight(layer, expert)) << "pre-calculated an expert that is in flight";
      ++precalc_acquires_;
    }
    return inner_.acquire(layer, expert, p);
  }
  void release(int layer, int expert, Precision p) override { inner_.release(layer, expert, p); }
  int precalc_acquires() const { return precalc_acquires_; }

 private:
  ResidentExpertProvider inner_;
  int routed_layer_ = -1;
  std::vector<int> routed_;
  int precalc_acquires_ = 0;
};

struct PrecalcRun {
  std::vector<float> logits;  // decode positions only, n_vocab each
  PrecisionUsage::Counts uses;
};

PrecalcRun run_engine(const std::string& path, std::shared_ptr<ExpertProvider> provider,
               const std::vector<int32_t>& prompt, const std::vector<int32_t>& fed, bool precalc) {
  EngineOptions opt;
  opt.n_threads = 2;
  opt.n_ctx = 32;
  opt.batch = (int)prompt.size();  // one prefill batch: pre-calculation is for decode steps
  auto file = std::shared_ptr<const GgufFile>(GgufFile::open(path));
  Engine eng(file, opt, provider);
  PrecisionModeConfig mode;
  mode.precalc = precalc;
  auto usage = std::make_shared<PrecisionUsage>();
  eng.context().moe().set_mode(mode, usage);
  eng.prefill(prompt, false, nullptr);
  PrecalcRun r;
  for (int32_t tok : fed) {
    auto row = eng.decode(tok);
    r.logits.insert(r.logits.end(), row.begin(), row.end());
  }
  r.uses = usage->total();
  return r;
}

TEST(Precalc, DecodeMatchesTheFloat64ReferenceOfTheRule) {
  for (const char* arch : {"llama", "qwen2moe", "olmoe"}) {
    TinySpec s;
    s.arch = arch;
    s.n_layer = 4;
    s.n_expert = 6;
    s.top_k = 2;
    const std::string path = temp_path(std::string("precalc_") + arch + ".gguf");
    const TinyWeights W = write_tiny_model(s, path);
    const std::vector<int32_t> prompt = {3, 17, 42, 5, 88, 0};
    const std::vector<int32_t> fed = {63, 17, 29, 7, 51, 12, 90, 33, 4, 71};
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), fed.begin(), fed.end());

    RefPrecalc rule;
    rule.first_pos = (int)prompt.size();
    rule.in_flight = in_flight;
    const RefResult ref = reference_forward(s, W, all, &rule);
    const RefResult plain = reference_forward(s, W, all);

    auto file = GgufFile::open(path);
    auto provider = std::make_shared<PatternProvider>(*file);
    const PrecalcRun got = run_engine(path, provider, prompt, fed, true);
    const size_t V = s.n_vocab;
    ASSERT_EQ(got.logits.size(), fed.size() * V);
    double worst_vs_rule = 0, worst_vs_plain = 0;
    for (size_t i = 0; i < fed.size(); ++i) {
      const size_t pos = prompt.size() + i;
      worst_vs_rule = std::max(worst_vs_rule, rel_max_diff(got.logits.data() + i * V, ref.logits[pos], V));
      worst_vs_plain = std::max(worst_vs_plain, rel_max_diff(got.logits.data() + i * V, plain.logits[pos], V));
    }
    EXPECT_LT(worst_vs_rule, 2e-4) << arch;
    // The rule must have changed the output, or this test would not see a missing pre-calculation.
    EXPECT_GT(worst_vs_plain, 50 * 2e-4) << arch << ": the pattern never exercised the pre-calculation";
    EXPECT_GT(got.uses.precalc, 0u) << arch;
    EXPECT_GE(got.uses.precalc_computed, got.uses.precalc) << arch;
    EXPECT_EQ((int)got.uses.precalc_computed, provider->precalc_acquires()) << arch;
  }
}

// Without a wait there is nothing to fill: all-resident runs are bit-identical to exact mode.
TEST(Precalc, NeverChangesARunThatDoesNotWait) {
  TinySpec s;
  s.n_layer = 3;
  const std::string path = temp_path("precalc_resident.gguf");
  write_tiny_model(s, path);
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  const std::vector<int32_t> fed = {5, 6, 7, 8, 9};
  auto file = GgufFile::open(path);
  const PrecalcRun exact = run_engine(path, std::make_shared<ResidentExpertProvider>(*file), prompt, fed, false);
  const PrecalcRun pre = run_engine(path, std::make_shared<ResidentExpertProvider>(*file), prompt, fed, true);
  ASSERT_EQ(exact.logits.size(), pre.logits.size());
  EXPECT_EQ(0, std::memcmp(exact.logits.data(), pre.logits.data(), exact.logits.size() * sizeof(float)));
  EXPECT_EQ(pre.uses.precalc_computed, 0u);
}

}  // namespace
}  // namespace moeflow::test
