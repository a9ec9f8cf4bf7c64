// The cache-aware lossy modes (docs/lossy-modes.md): HOBBIT proper (`--mode hobbit`: only
// cache misses of less critical experts get the low copy or are skipped) and DAOP's graceful
// degradation (`--mode daop`: a token's second miss is replaced by the most probable cached
// expert). A provider that reports a fixed set of experts as cached makes every decision
// known in advance; the test recomputes it from the router (applied to the hidden state the
// block saw) and compares it with what the block asked the provider for.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "experts/resident_provider.h"
#include "gguf/gguf_file.h"
#include "low_copy_models.h"
#include "model/moe/moe_block.h"
#include "runtime/engine.h"
#include "runtime/offload_session.h"

namespace moeflow {
namespace {

using Held = std::function<bool(int layer, int expert)>;

// Serves every expert from the file in both precisions, but says only the `held` ones are
// cached; records what the block routed to it (experts and precisions) for each layer, and
// checks it, when the observer hook fires, against the test's own reading of the mode.
class FixedCache final : public ResidentExpertProvider, public ForwardObserver {
 public:
  using Expect = std::function<void(const RouteRecord& r, const std::vector<int>& experts,
                                    const std::vector<Precision>& precisions)>;
  FixedCache(const GgufFile& f, Held held) : ResidentExpertProvider(f), held_(std::move(held)) {}
  void set_expect(Expect e) { expect_ = std::move(e); }

  Residency residency(int layer, int expert, Precision p) const override {
    return p == Precision::High && held_(layer, expert) ? Residency::Resident
                                                        : Residency::NotStarted;
  }
  void on_route(int layer, std::span<const int> experts,
                std::span<const Precision> precisions) override {
    experts_.assign(experts.begin(), experts.end());
    if (precisions.empty())
      prec_.assign(experts.size(), Precision::High);
    else
      prec_.assign(precisions.begin(), precisions.end());
  }
  void on_route(const RouteRecord& r) override {
    if (expect_) expect_(r, experts_, prec_);
  }

 private:
  Held held_;
  Expect expect_;
  std::vector<int> experts_;
  std::vector<Precision> prec_;
};

class CacheAwareModes : public test::LowCopySuite<5> {};

const std::vector<int32_t> kPrompt = {1, 17, 42, 99, 3, 250, 7, 8, 300, 11, 12};
constexpr int kDecode = 16;

using Outcome = test::GreedyRun;

// The mode comes from `o` (applied the way the CLI does); `cache` (optional) replaces the
// session's provider and watches the routing.
Outcome run(std::shared_ptr<const GgufFile> f, const OffloadOptions& o, int batch,
            std::shared_ptr<FixedCache> cache = nullptr) {
  return test::run_greedy(f, kPrompt, kDecode, batch, &o, cache, cache.get());
}

bool same(const Outcome& a, const Outcome& b) { return a.logits == b.logits; }

uint64_t total(const std::vector<PrecisionUsage::Counts>& u, uint64_t PrecisionUsage::Counts::*f) {
  uint64_t s = 0;
  for (const auto& c : u) s += c.*f;
  return s;
}

// The router's own top-k of one token, recomputed from the hidden state the block saw.
struct Routing {
  std::vector<int> experts;
  std::vector<float> weights, probs;
};
Routing route(const Model& m, const RouteRecord& r, int t) {
  const HParams& hp = m.hparams();
  std::vector<float> logits;
  m.router_logits(r.layer, r.hidden.subspan((size_t)t * r.n_embd, r.n_embd), logits);
  Routing g;
  g.experts.resize(hp.n_expert_used);
  g.weights.resize(hp.n_expert_used);
  g.probs.resize(hp.n_expert);
  select_topk(logits.data(), hp.n_expert, hp.n_expert_used, hp.norm_topk, g.experts.data(),
              g.weights.data(), g.probs.data());
  return g;
}

TEST_F(CacheAwareModes, HobbitChangesOnlyMisses) {
  auto f = packed();
  const Held held = [](int l, int e) { return (e + l) % 3 == 0; };
  OffloadOptions o;
  o.mode = ExpertMode::Hobbit;
  o.hobbit_t1 = 0.0;  // every miss but the top-1's loads the low copy
  o.hobbit_t2 = 1.0;
  auto cache = std::make_shared<FixedCache>(*f, held);
  EngineOptions probe_opt;
  Engine probe(f, probe_opt);
  uint64_t checked = 0, low = 0, held_high = 0;
  cache->set_expect(
      [&](const RouteRecord& r, const std::vector<int>& ex, const std::vector<Precision>& pr) {
        ASSERT_EQ(r.n_tokens, 1);
        const Routing g = route(probe.model(), r, 0);
        ASSERT_EQ(ex.size(), g.experts.size());
        for (size_t i = 0; i < ex.size(); ++i) {
          const bool h = held(r.layer, g.experts[i]);
          const Precision want = i == 0 || h ? Precision::High : Precision::Low;
          EXPECT_EQ(ex[i], g.experts[i]) << "layer " << r.layer << " rank " << i;
          EXPECT_EQ(pr[i], want) << "layer " << r.layer << " rank " << i;
          low += want == Precision::Low;
          held_high += i > 0 && h;
          ++checked;
        }
      });
  const Outcome got = run(f, o, 1, cache);
  EXPECT_EQ(checked, (kPrompt.size() + kDecode) * 4 * 2);
  EXPECT_GT(low, 0u);
  EXPECT_GT(held_high, 0u) << "no cached second expert: the test would not see the rule";
  EXPECT_EQ(total(got.uses, &PrecisionUsage::Counts::low), low);

  // The same rule with nothing cached is hobbit-all's; with everything cached it is exact.
  OffloadOptions all = o;
  all.mode = ExpertMode::HobbitAll;
  const Outcome none_cached =
      run(f, o, 1, std::make_shared<FixedCache>(*f, [](int, int) { return false; }));
  EXPECT_TRUE(same(none_cached, run(f, all, 1)));
  OffloadOptions exact;
  EXPECT_TRUE(same(run(f, o, 1), run(f, exact, 1)));
}

TEST_F(CacheAwareModes, DaopReplacesTheSecondMissByTheBestCachedExpert) {
  auto f = packed();
  const Held held = [](int l, int e) { return (e + l) % 2 == 0; };
  OffloadOptions o;
  o.mode = ExpertMode::Daop;
  auto cache = std::make_shared<FixedCache>(*f, held);
  EngineOptions probe_opt;
  Engine probe(f, probe_opt);
  const HParams& hp = probe.model().hparams();
  uint64_t substituted = 0, decode_checked = 0;
  cache->set_expect([&](const RouteRecord& r, const std::vector<int>& ex,
                        const std::vector<Precision>&) {
    for (int t = 0; t < r.n_tokens; ++t) {
      Routing g = route(probe.model(), r, t);
      std::vector<int> want = g.experts;
      std::vector<float> wantw = g.weights;
      if (r.n_tokens == 1) {  // decode: DAOP's rule, read from the paper
        ++decode_checked;
        bool kept = false;
        for (size_t i = 0; i < want.size(); ++i) {
          if (held(r.layer, want[i])) continue;
          if (!kept) {
            kept = true;
            continue;
          }
          int best = -1;
          for (int c = 0; c < hp.n_expert; ++c)
            if (held(r.layer, c) && std::find(want.begin(), want.end(), c) == want.end() &&
                (best < 0 || g.probs[c] > g.probs[best]))
              best = c;
          ASSERT_GE(best, 0);
          want[i] = best;
          ++substituted;
          double s = 0;
          for (int e : want) s += g.probs[e];
          for (size_t j = 0; j < want.size(); ++j)
            wantw[j] = hp.norm_topk ? (float)(g.probs[want[j]] / s) : g.probs[want[j]];
        }
      }
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(r.experts[t * want.size() + i], want[i]) << "layer " << r.layer << " token " << t;
        EXPECT_NEAR(r.weights[t * want.size() + i], wantw[i], 1e-6);
      }
    }
    if (r.n_tokens == 1) {
      std::vector<int> want_units(r.experts.begin(), r.experts.end());
      EXPECT_EQ(ex, want_units);
    }
  });
  const Outcome got = run(f, o, 4, cache);
  EXPECT_EQ(decode_checked, (uint64_t)kDecode * 4);
  EXPECT_GT(substituted, 0u) << "no token missed twice: the test would not see the rule";
  EXPECT_EQ(total(got.uses, &PrecisionUsage::Counts::substituted), substituted);
  OffloadOptions exact;
  EXPECT_FALSE(same(got, run(f, exact, 4)));
  // With everything resident nothing is replaced: exact.
  const Outcome resident = run(f, o, 4);
  EXPECT_TRUE(same(resident, run(f, exact, 4)));
  EXPECT_EQ(total(resident.uses, &PrecisionUsage::Counts::substituted), 0u);
}

TEST_F(CacheAwareModes, OneBudgetForBothPrecisions) {
  auto f = packed();
  for (const char* mode : {"hobbit", "daop"}) {
    SCOPED_TRACE(mode);
    OffloadOptions o;
    o.mode = parse_expert_mode(mode);
    o.cache_rate = 0.4;
    o.prefetch = "lookahead";
    const Outcome got = run(f, o, 1);
    ASSERT_GT(got.logits.size(), 0u);
    const uint64_t budget = (uint64_t)std::ceil(0.4 * (double)got.stats.total_expert_bytes);
    // The low-precision cache comes out of the expert budget, not on top of it.
    EXPECT_LE(got.stats.budget_bytes + got.stats.low_budget_bytes, budget);
    if (std::string(mode) == "hobbit") {
      EXPECT_GT(got.stats.low_budget_bytes, 0u);
      EXPECT_NEAR((double)got.stats.low_budget_bytes, 0.1 * budget, 0.01 * budget + 1);
    } else {
      EXPECT_EQ(got.stats.low_budget_bytes, 0u);
    }
  }
  OffloadOptions o;
  o.mode = ExpertMode::Hobbit;
  o.cache_rate = 0.4;
  o.low_share = 0.5;
  const Outcome half = run(f, o, 1);
  EXPECT_NEAR((double)half.stats.low_budget_bytes, (double)half.stats.budget_bytes,
              0.01 * (double)half.stats.budget_bytes + 1);
}

TEST(CacheAwareStats, UsesTotalsSumEveryCounter) {
  OffloadSession s;
  s.mode.mode = ExpertMode::Daop;
  s.usage = std::make_shared<PrecisionUsage>();
  PrecisionUsage::Counts a, b;
  a.high = 3, a.substituted = 2;
  b.high = 4, b.low = 1, b.skip = 5, b.substituted = 1;
  s.usage->add(0, a);
  s.usage->add(2, b);
  const nlohmann::json j = offload_stats_json(s);
  EXPECT_EQ(j["mode"], "daop");
  EXPECT_EQ(j["uses"]["high"], 7u);
  EXPECT_EQ(j["uses"]["low"], 1u);
  EXPECT_EQ(j["uses"]["skip"], 5u);
  EXPECT_EQ(j["uses"]["substituted"], 3u);
  ASSERT_EQ(j["uses_per_layer"].size(), 3u);
  EXPECT_EQ(j["uses_per_layer"][2]["substituted"], 1u);
}

}  // namespace
}  // namespace moeflow
