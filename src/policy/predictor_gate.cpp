#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "policy/predictors.h"

namespace moeflow::predictors {
namespace {

// Softmax probability of each of the top-k logits.
void emit_topk(int layer, const std::vector<float>& logits, int k, float scale,
               std::vector<Prediction>& out) {
  float mx = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (float x : logits) z += std::exp((double)x - mx);
  for (int e : top_indices(logits, k))
    out.push_back({layer, e, scale * (float)(std::exp((double)logits[e] - mx) / z)});
}

// Next-layer gate lookahead: the hidden state entering layer l is close to the one entering
// l+1 (residual stream), so layer l+1's router applied to it predicts l+1's experts.
class Gate final : public Predictor {
 public:
  explicit Gate(const PredictorOptions& o) : o_(o) {}
  std::string name() const override { return "gate"; }
  void set_router(RouterFn fn) override { router_ = std::move(fn); }
  void on_layer(const PredictorInput& in, std::vector<Prediction>& out) override {
    if (!router_ || in.hidden.empty()) return;
    int ahead = std::max(1, o_.lookahead);
    for (int d = 1; d <= ahead; ++d) {
      int l = in.route.layer + d;
      if (l >= o_.n_layers) break;
      router_(l, in.hidden, logits_);
      if (logits_.empty()) continue;
      emit_topk(l, logits_, o_.top_k, 1.0f / (float)d, out);
    }
  }

 private:
  PredictorOptions o_;
  RouterFn router_;
  std::vector<float> logits_;
};

// The engine's default prefetcher (--prefetch lookahead): the gate lookahead above, counted in
// MoE layers (dense layers have no experts to fetch), wrapping past the last MoE layer to the
// next token's first ones (a rougher guess from the last hidden state, but it overlaps the
// logits and sampling time with I/O), and in a lossy mode asking for each predicted expert in
// the precision the mode will want for its predicted weight (HOBBIT's rule); experts the mode
// would skip are not predicted. Confidence: the router's softmax probability, divided by the
// distance (farther layers are needed later).
class Lookahead final : public Predictor {
 public:
  explicit Lookahead(const PredictorOptions& o) : o_(o) {
    MOEFLOW_CHECK(o_.lookahead >= 1, "--lookahead must be >= 1 (got {})", o_.lookahead);
    if (o_.layer_experts.empty()) o_.layer_experts.assign(std::max(0, o_.n_layers), o_.n_experts);
    MOEFLOW_CHECK(static_cast<int>(o_.layer_experts.size()) == o_.n_layers,
                  "lookahead predictor: {} per-layer expert counts for {} layers",
                  o_.layer_experts.size(), o_.n_layers);
  }
  std::string name() const override { return "lookahead"; }
  void set_router(RouterFn fn) override { router_ = std::move(fn); }
  bool learns_from_every_token() const override { return false; }
  void on_layer(const PredictorInput& in, std::vector<Prediction>& out) override {
    if (!router_ || in.hidden.empty()) return;
    const int layer = in.route.layer;
    int target = layer;
    bool wrapped = false;
    for (int d = 0; d < o_.lookahead; ++d) {
      for (;;) {  // the next MoE layer, past the last one: the next token's first
        ++target;
        if (target >= o_.n_layers) {
          if (wrapped) return;
          wrapped = true;
          target = 0;
        }
        if (o_.layer_experts[target] > 0) break;
      }
      if (wrapped && target >= layer) return;
      const int n_exp = o_.layer_experts[target];
      const int k = std::min(o_.top_k, n_exp);
      router_(target, in.hidden, logits_);
      if (static_cast<int>(logits_.size()) < n_exp) return;
      const float mx = *std::max_element(logits_.begin(), logits_.begin() + n_exp);
      probs_.resize(n_exp);
      double sum = 0;
      for (int e = 0; e < n_exp; ++e) sum += probs_[e] = std::exp(logits_[e] - mx);
      order_.resize(n_exp);
      for (int e = 0; e < n_exp; ++e) order_[e] = e;
      std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), [&](int a, int b) {
        return probs_[a] > probs_[b] || (probs_[a] == probs_[b] && a < b);
      });
      topw_.resize(k);
      uses_.resize(k);
      for (int i = 0; i < k; ++i) topw_[i] = static_cast<float>(probs_[order_[i]] / sum);
      decide_uses(o_.mode, topw_.data(), k, uses_.data());
      const float discount = 1.0f / static_cast<float>(d + 1);
      for (int i = 0; i < k; ++i) {
        if (uses_[i] == ExpertUse::Skip) continue;
        out.push_back({target, order_[i], topw_[i] * discount,
                       uses_[i] == ExpertUse::Low ? Precision::Low : Precision::High});
      }
    }
  }

 private:
  PredictorOptions o_;
  RouterFn router_;
  std::vector<float> logits_, probs_, topw_;
  std::vector<int> order_;
  std::vector<ExpertUse> uses_;
};

// HOBBIT's stacked gating: routers of layers l+1..l+p applied to layer l's hidden state, p up to
// 3. The depth adapts: each depth's hit ratio is tracked against the routing that follows, and
// only depths whose running accuracy stays >= 0.5 are used (depth 1 always).
class Stacked final : public Predictor {
 public:
  explicit Stacked(const PredictorOptions& o)
      : o_(o), acc_(kMaxDepth + 1, 1.0), pending_(o.n_layers > 0 ? o.n_layers : 1) {}
  std::string name() const override { return "stacked"; }
  void set_router(RouterFn fn) override { router_ = std::move(fn); }
  void on_sequence_start() override {
    for (auto& p : pending_) p.clear();
  }
  void on_layer(const PredictorInput& in, std::vector<Prediction>& out) override {
    int l0 = in.route.layer;
    if (l0 >= 0 && l0 < (int)pending_.size()) {
      // Score what earlier layers predicted for this one.
      for (auto& [depth, experts] : pending_[l0]) {
        int hit = 0;
        for (int e : experts)
          hit += std::find(in.route.experts.begin(), in.route.experts.end(), e) !=
                 in.route.experts.end();
        double a = experts.empty() ? 0 : (double)hit / (double)experts.size();
        acc_[depth] = 0.9 * acc_[depth] + 0.1 * a;
      }
      pending_[l0].clear();
    }
    if (!router_ || in.hidden.empty()) return;
    for (int d = 1; d <= kMaxDepth; ++d) {
      if (d > 1 && acc_[d] < 0.5) break;
      int l = l0 + d;
      if (l >= o_.n_layers) break;
      router_(l, in.hidden, logits_);
      if (logits_.empty()) continue;
      size_t before = out.size();
      emit_topk(l, logits_, o_.top_k, (float)acc_[d], out);
      std::vector<int> ex;
      for (size_t i = before; i < out.size(); ++i) ex.push_back(out[i].expert);
      pending_[l].push_back({d, ex});
    }
  }
  int depth_in_use() const {
    int d = 1;
    while (d < kMaxDepth && acc_[d + 1] >= 0.5) ++d;
    return d;
  }

 private:
  static constexpr int kMaxDepth = 3;
  PredictorOptions o_;
  RouterFn router_;
  std::vector<double> acc_;
  std::vector<std::vector<std::pair<int, std::vector<int>>>> pending_;
  std::vector<float> logits_;
};

}  // namespace

std::unique_ptr<Predictor> make_gate(const PredictorOptions& o) {
  return std::make_unique<Gate>(o);
}
std::unique_ptr<Predictor> make_lookahead(const PredictorOptions& o) {
  return std::make_unique<Lookahead>(o);
}
std::unique_ptr<Predictor> make_stacked(const PredictorOptions& o) {
  return std::make_unique<Stacked>(o);
}

}  // namespace moeflow::predictors
