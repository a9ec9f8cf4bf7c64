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

#include "backend/cpu/cpu_backend.h"
#include "experts/resident_provider.h"
#include "gguf/gguf_file.h"
#include "model/model.h"
#include "reference_forward.h"
#include "runtime/engine.h"
#include "support/stand_in_device.h"
#include "support/test_helpers.h"
#include "support/tiny_model.h"

namespace moeflow::test {
namespace {

bool in_flight(int layer, int expert) { return (layer * 5 + expert * 3) % 4 == 0; }

// Every expert is in RAM; residency() reports the fixed pattern above, so a layer "waits"
// exactly when it routes to an expert the pattern marks in flight.
class PatternProvider final : public ExpertProvider {
 public:
  explicit PatternProvider(const GgufFile& f) : inner_(f) {}
  void on_route(int layer, std::span<const int> experts, std::span<const Precision>) override {
    routed_layer_ = layer;
    routed_.assign(experts.begin(), experts.end());
  }
  Residency residency(int layer, int expert, Precision) const override {
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
  // With host views: the experts a device's host backend pre-calculates (never acquired).
  bool host_view(int layer, int expert, ExpertView& out) const override {
    if (!offer_host_views) return false;
    EXPECT_EQ(layer, routed_layer_ + 1) << "a host view for a layer other than the next";
    EXPECT_TRUE(in_flight(layer, expert)) << "a host view asked for a resident expert";
    out = inner_.acquire(layer, expert, Precision::High);
    ++host_views_;
    return true;
  }
  bool offer_host_views = false;
  int precalc_acquires() const { return precalc_acquires_; }
  int host_views() const { return host_views_; }

 private:
  mutable ResidentExpertProvider inner_;
  int routed_layer_ = -1;
  std::vector<int> routed_;
  int precalc_acquires_ = 0;
  mutable int host_views_ = 0;
};

struct PrecalcRun {
  std::vector<float> logits;  // decode positions only, n_vocab each
  PrecisionUsage::Counts uses;
};

PrecalcRun run_engine(const std::string& path, std::shared_ptr<ExpertProvider> provider,
                      const std::vector<int32_t>& prompt, const std::vector<int32_t>& fed,
                      bool precalc) {
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

// A 4-layer tiny model of `arch` (6 experts, top-2), its prompt and decode tokens, and the
// reference's reading of the residency pattern.
struct PrecalcCase {
  PrecalcCase(const char* arch, const std::string& tag) {
    s.arch = arch;
    s.n_layer = 4;
    s.n_expert = 6;
    s.top_k = 2;
    path = temp_path(tag + arch + ".gguf");
    W = write_tiny_model(s, path);
    all = prompt;
    all.insert(all.end(), fed.begin(), fed.end());
  }
  RefPrecalc rule() const {
    RefPrecalc r;
    r.first_pos = (int)prompt.size();
    r.in_flight = in_flight;
    return r;
  }
  TinySpec s;
  std::string path;
  TinyWeights W;
  std::vector<int32_t> prompt = {3, 17, 42, 5, 88, 0};
  std::vector<int32_t> fed = {63, 17, 29, 7, 51, 12, 90, 33, 4, 71};
  std::vector<int32_t> all;
};

TEST(Precalc, DecodeMatchesTheFloat64ReferenceOfTheRule) {
  for (const char* arch : {"llama", "qwen2moe", "olmoe"}) {
    const PrecalcCase c(arch, "precalc_");
    const TinySpec& s = c.s;
    const TinyWeights& W = c.W;
    const std::string& path = c.path;
    const std::vector<int32_t>&prompt = c.prompt, &fed = c.fed, &all = c.all;
    RefPrecalc rule = c.rule();
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
      worst_vs_rule =
          std::max(worst_vs_rule, rel_max_diff(got.logits.data() + i * V, ref.logits[pos], V));
      worst_vs_plain =
          std::max(worst_vs_plain, rel_max_diff(got.logits.data() + i * V, plain.logits[pos], V));
    }
    EXPECT_LT(worst_vs_rule, 2e-4) << arch;
    // The rule must have changed the output, or this test would not see a missing pre-calculation.
    EXPECT_GT(worst_vs_plain, 50 * 2e-4)
        << arch << ": the pattern never exercised the pre-calculation";
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
  const PrecalcRun exact =
      run_engine(path, std::make_shared<ResidentExpertProvider>(*file), prompt, fed, false);
  const PrecalcRun pre =
      run_engine(path, std::make_shared<ResidentExpertProvider>(*file), prompt, fed, true);
  ASSERT_EQ(exact.logits.size(), pre.logits.size());
  EXPECT_EQ(
      0, std::memcmp(exact.logits.data(), pre.logits.data(), exact.logits.size() * sizeof(float)));
  EXPECT_EQ(pre.uses.precalc_computed, 0u);
}

// DAOP's CPU pre-calculation: on a device backend with a host backend, every decode step also
// computes the next layer's predicted experts that are not resident, on the host backend from
// the provider's host views, while the device runs the layer; the resident ones are still
// pre-calculated when the layer waits. Against the float64 reference of that rule.
TEST(Precalc, ADeviceComputesTheNextLayersMissesOnTheHost) {
  for (const char* arch : {"llama", "qwen2moe", "olmoe"}) {
    const PrecalcCase c(arch, "precalc_dev_");
    const TinySpec& s = c.s;
    const TinyWeights& W = c.W;
    const std::vector<int32_t>&prompt = c.prompt, &fed = c.fed, &all = c.all;
    RefPrecalc rule = c.rule();
    rule.host_share = true;
    const RefResult ref = reference_forward(s, W, all, &rule);
    rule.host_share = false;
    const RefResult waits_only = reference_forward(s, W, all, &rule);

    auto file = GgufFile::open(c.path);
    const Model model(*file);
    PatternProvider provider(*file);
    provider.offer_host_views = true;
    StandInDevice device;
    CpuBackend host;
    ForwardContext ctx(model, provider, 32, (int)prompt.size(), device);
    ctx.moe().set_host_backend(&host);
    PrecisionModeConfig mode;
    mode.precalc = true;
    auto usage = std::make_shared<PrecisionUsage>();
    ctx.moe().set_mode(mode, usage);
    ctx.forward(prompt, LogitsMode::Last);
    const size_t V = s.n_vocab;
    double worst_vs_rule = 0, worst_vs_waits_only = 0;
    for (size_t i = 0; i < fed.size(); ++i) {
      ctx.forward(std::span<const int32_t>(&fed[i], 1), LogitsMode::Last);
      const size_t pos = prompt.size() + i;
      worst_vs_rule = std::max(worst_vs_rule, rel_max_diff(ctx.logits(), ref.logits[pos], V));
      worst_vs_waits_only =
          std::max(worst_vs_waits_only, rel_max_diff(ctx.logits(), waits_only.logits[pos], V));
    }
    EXPECT_LT(worst_vs_rule, 2e-4) << arch;
    // The host's share changed the output: without it the test would not see it missing.
    EXPECT_GT(worst_vs_waits_only, 50 * 2e-4) << arch << ": the host never pre-calculated";
    const PrecisionUsage::Counts u = usage->total();
    EXPECT_GT(provider.host_views(), 0) << arch;
    EXPECT_EQ((int)u.precalc_computed, provider.precalc_acquires() + provider.host_views()) << arch;
    EXPECT_GT(u.precalc, 0u) << arch;
  }
}

}  // namespace
}  // namespace moeflow::test
