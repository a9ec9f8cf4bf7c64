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
  explicit Hobbit(const PolicyOptions& o) : n_layers_(o.n_layers), top_k_(o.top_k), w_(o.weights) {
    if (w_.empty()) w_ = hobbit_default_weights();
    MOEFLOW_CHECK(w_.size() == 4, "policy 'hobbit': expects 4 weights (lru, lfu, lhu, fld), got {}", w_.size());
  }
  std::string name() const override { return "hobbit"; }
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
                  : ev.weights.size() == ev.experts.size() ? ev.weights[i] >= 1.0f / (float)k - 1e-6f
                                                           : i == 0;
      if (high) s.high += 1;
    }
  }
  void on_sequence_start() override {
    for (auto& [key, s] : st_) s.freq = s.high = 0;
  }
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t) override {
    MOEFLOW_CHECK(!c.empty(), "hobbit: choose_victim called with no candidates");
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
  int n_layers_, top_k_;
  int cur_layer_ = 0;
  std::vector<double> w_;
  std::unordered_map<uint64_t, S> st_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_hobbit(const PolicyOptions& opt) { return std::make_unique<Hobbit>(opt); }

}  // namespace moeflow::policies
