#include <algorithm>
#include <cstddef>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "trace/oracle.h"

namespace moeflow::trace {
namespace {

uint64_t pack(ExpertKey k) { return ((uint64_t)(uint32_t)k.layer << 32) | (uint32_t)k.expert; }

class Belady final : public BeladyPolicy {
 public:
  Belady(const Trace& t, bool bypass) : bypass_(bypass), L_(t.n_layers), E_(t.n_experts) {
    for (size_t s = 0; s < t.steps.size(); ++s)
      for (auto& r : t.steps[s].routes)
        for (int e : r.experts)
          uses_[pack({r.layer, e})].push_back(logical_time(s, r.layer, t.n_layers));
  }
  std::string name() const override { return bypass_ ? "belady" : "belady-forced"; }
  bool bypass() const override { return bypass_; }
  // The bound may start warm: placement policies (static, DAOP) preload for free, so Belady
  // preloads the experts used first. Classic MIN (forced) starts cold.
  std::vector<ExpertKey> initial_residents(int layer, int capacity) override {
    if (!bypass_) return {};
    std::vector<std::pair<uint64_t, ExpertKey>> v;
    for (int l = 0; l < L_; ++l) {
      if (layer >= 0 && l != layer) continue;
      for (int e = 0; e < E_; ++e) {
        auto it = uses_.find(pack({l, e}));
        if (it != uses_.end() && !it->second.empty()) v.push_back({it->second.front(), {l, e}});
      }
    }
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) {
      return a.first != b.first ? a.first < b.first : a.second.expert < b.second.expert;
    });
    std::vector<ExpertKey> out;
    for (size_t i = 0; i < v.size() && (int)i < capacity; ++i) out.push_back(v[i].second);
    return out;
  }
  void on_access(ExpertKey, uint64_t) override {}
  void on_insert(ExpertKey, uint64_t) override {}
  void on_evict(ExpertKey) override {}
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t t) override {
    MOEFLOW_CHECK(!c.empty(), "belady: choose_victim called with no candidates");
    ExpertKey best = c[0];
    uint64_t far = 0;
    for (ExpertKey k : c) {
      uint64_t n = next_use(k, t);
      if (n > far || (n == far && k.expert < best.expert)) far = n, best = k;
      if (n == UINT64_MAX) return k;
    }
    return best;
  }

  uint64_t next_use(ExpertKey k, uint64_t t) const override {
    auto it = uses_.find(pack(k));
    if (it == uses_.end()) return UINT64_MAX;
    auto p = std::upper_bound(it->second.begin(), it->second.end(), t);
    return p == it->second.end() ? UINT64_MAX : *p;
  }

 private:
  bool bypass_;
  int L_, E_;
  std::unordered_map<uint64_t, std::vector<uint64_t>> uses_;
};

// A uniform draw in [0, 1) from four integers (splitmix64 finaliser over their mix).
double draw(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull ^ a * 0xBF58476D1CE4E5B9ull ^
               b * 0x94D049BB133111EBull ^ (c + 0x632BE59BD9B4E019ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1.0p-53;
}

class Oracle final : public Predictor {
 public:
  Oracle(const Trace& t, int lookahead, const OracleQuality& q) : t_(t), look_(lookahead), q_(q) {
    MOEFLOW_CHECK(q.recall >= 0 && q.recall <= 1, "oracle recall must be in [0, 1], got {}",
                  q.recall);
    MOEFLOW_CHECK(q.wrong >= 0 && q.wrong <= t.n_experts,
                  "oracle wrong experts per route must be in [0, {}], got {}", t.n_experts,
                  q.wrong);
    for (size_t s = 0; s < t.steps.size(); ++s)
      for (size_t r = 0; r < t.steps[s].routes.size(); ++r) order_.push_back({s, r});
  }
  std::string name() const override { return "oracle"; }
  void on_layer(const PredictorInput& in, std::vector<Prediction>& out) override {
    // The simulator passes step = index into the trace.
    size_t s = (size_t)in.route.step;
    auto it = std::lower_bound(order_.begin(), order_.end(), std::make_pair(s, (size_t)0));
    while (it != order_.end() && it->first == s &&
           t_.steps[s].routes[it->second].layer != in.route.layer)
      ++it;
    if (it == order_.end()) return;
    ++it;
    uint32_t req = t_.steps[s].request;
    for (int n = 0; n < look_ && it != order_.end(); ++n, ++it) {
      const auto& st = t_.steps[it->first];
      if (st.request != req) break;  // a new request's routing is unknowable
      const auto& r = st.routes[it->second];
      const float score = 1.0f - (float)n / (float)(look_ + 1);
      const uint64_t step = it->first, layer = (uint64_t)r.layer;
      for (int e : r.experts)
        if (q_.recall >= 1 || draw(q_.seed, step, layer, (uint64_t)e) < q_.recall)
          out.push_back({r.layer, e, score});
      add_wrong(r, step, score, out);
    }
  }

 private:
  // The route's wrong guesses: experts it does not use, drawn uniformly without repeats.
  void add_wrong(const LayerRoute& r, uint64_t step, float score,
                 std::vector<Prediction>& out) const {
    if (q_.wrong <= 0) return;
    std::vector<int> unused;
    for (int e = 0; e < t_.n_experts; ++e)
      if (std::find(r.experts.begin(), r.experts.end(), e) == r.experts.end()) unused.push_back(e);
    const uint64_t layer = (uint64_t)r.layer, salt = (uint64_t)t_.n_experts;
    int n = (int)q_.wrong;
    if (draw(q_.seed, step, layer, salt) < q_.wrong - n) ++n;
    for (int k = 0; k < n && !unused.empty(); ++k) {
      const size_t pick = std::min(
          unused.size() - 1,
          (size_t)(draw(q_.seed, step, layer, salt + 1 + (uint64_t)k) * (double)unused.size()));
      out.push_back({r.layer, unused[pick], score});
      unused.erase(unused.begin() + (std::ptrdiff_t)pick);
    }
  }

  const Trace& t_;
  int look_;
  OracleQuality q_;
  std::vector<std::pair<size_t, size_t>> order_;
};

}  // namespace

std::unique_ptr<BeladyPolicy> make_belady(const Trace& t, bool bypass) {
  return std::make_unique<Belady>(t, bypass);
}
std::unique_ptr<Predictor> make_oracle_predictor(const Trace& t, int lookahead,
                                                 const OracleQuality& q) {
  return std::make_unique<Oracle>(t, lookahead, q);
}

}  // namespace moeflow::trace
