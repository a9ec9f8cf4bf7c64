#include <algorithm>
#include <unordered_map>

#include "core/error.h"
#include "policy/policies.h"

namespace moeflow::policies {

std::vector<double> hobbit_default_weights() { return {0.4, 0.3, 0.1, 0.2}; }

namespace {

// HOBBIT's multidimensional cache policy, as we read it: each candidate gets a weighted sum of
// four normalised "keep" scores and the lowest sum is evicted:
//  LRU  recency of the last use (1 = most recent among the candidates),
//  LFU  uses in the current sequence,
//  LHU  high-precision uses in the current sequence: in the live cache, the precision each
//       use was served in (RouteEvent::precisions, set by the mixed-precision modes); without
//       it (traces) uses whose gate weight is at least the mean weight 1/top_k, which HOBBIT's
//       loader would have served at full precision. Keeping them saves the expensive loads,
//  FLD  closeness of the expert's layer to the layer about to run (layers just executed are
//       the farthest away in a forward pass).
// LFU/LHU counts reset at each sequence start (sequence-level reset). The weights are fitted on
// a calibration trace by the simulator (grid search, trace/calibrate.*).
class Hobbit final : public EvictionPolicy {
 public:
  Hobbit(const PolicyOptions& o, std::string name, std::vector<double> w)
      : name_(std::move(name)), n_layers_(o.n_layers), top_k_(o.top_k), w_(std::move(w)) {
    MOEFLOW_CHECK(w_.size() == 4, "policy '{}': expects 4 weights (lru, lfu, lhu, fld), got {}",
                  name_, w_.size());
  }
  std::string name() const override { return name_; }
  void on_access(ExpertKey k, uint64_t t) override { st_[pack(k)].last = t; }
  void on_insert(ExpertKey k, uint64_t t) override { st_[pack(k)].last = t; }
  void on_evict(ExpertKey) override {}
  void on_route(const RouteEvent& ev) override {
    cur_layer_ = ev.layer;
    int k = std::max<int>(1, top_k_ > 0 ? top_k_ : (int)ev.experts.size());
    for (size_t i = 0; i < ev.experts.size(); ++i) {
      auto& s = st_[pack({ev.layer, ev.experts[i]})];
      s.freq += 1;
      bool high = ev.precisions.size() == ev.experts.size() ? ev.precisions[i] == 0
                  : ev.weights.size() == ev.experts.size()
                      ? ev.weights[i] >= 1.0f / (float)k - 1e-6f
                      : i == 0;
      if (high) s.high += 1;
    }
  }
  void on_sequence_start() override {
    for (auto& [key, s] : st_) s.freq = s.high = 0;
  }
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t) override {
    MOEFLOW_CHECK(!c.empty(), "{}: choose_victim called with no candidates", name_);
    uint64_t lo = UINT64_MAX, hi = 0;
    double fmax = 0, hmax = 0;
    for (ExpertKey k : c) {
      const S& s = st_[pack(k)];
      lo = std::min(lo, s.last), hi = std::max(hi, s.last);
      fmax = std::max(fmax, s.freq), hmax = std::max(hmax, s.high);
    }
    int L = std::max(n_layers_, 1);
    ExpertKey best = c[0];
    double bs = 1e300;
    for (ExpertKey k : c) {
      const S& s = st_[pack(k)];
      double r = hi > lo ? (double)(s.last - lo) / (double)(hi - lo) : 1.0;
      double f = fmax > 0 ? s.freq / fmax : 0.0;
      double h = hmax > 0 ? s.high / hmax : 0.0;
      int dist = ((k.layer - cur_layer_ - 1) % L + L) % L;  // layers until it runs again
      double d = 1.0 - (double)dist / (double)L;
      double score = w_[0] * r + w_[1] * f + w_[2] * h + w_[3] * d;
      if (score < bs) bs = score, best = k;
    }
    return best;
  }

 private:
  struct S {
    uint64_t last = 0;
    double freq = 0, high = 0;
  };
  std::string name_;
  int n_layers_, top_k_;
  int cur_layer_ = 0;
  std::vector<double> w_;
  std::unordered_map<uint64_t, S> st_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_hobbit(const PolicyOptions& opt) {
  return std::make_unique<Hobbit>(opt, "hobbit",
                                  opt.weights.empty() ? hobbit_default_weights() : opt.weights);
}

// HOBBIT's score with only its frequency and layer-distance terms, for one budget over all
// layers: a decode step visits the layers in a cycle, so among equally popular experts the ones
// of the layer that just ran are needed last. Plain LFU ignores that and, with fewer places than
// the cycle's routed experts, evicts the next layer's experts to make room for this one's. On
// every recorded routing we have (real Mixtral and Qwen1.5 traces, the benchmark models) it
// hits at least as often as LFU at every global budget; with per-layer budgets the distance term
// is the same for all candidates and it is LFU over the current sequence.
std::unique_ptr<EvictionPolicy> make_lfu_cycle(const PolicyOptions& opt) {
  return std::make_unique<Hobbit>(opt, "lfu-cycle", std::vector<double>{0.0, 1.0, 0.0, 1.0});
}

}  // namespace moeflow::policies
