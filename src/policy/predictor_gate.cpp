#include <cmath>

#include "core/error.h"
#include "policy/predictors.h"

namespace moeflow::predictors {
namespace {

// Softmax probability of each of the top-k logits.
void emit_topk(int layer, const std::vector<float>& logits, int k, float scale, std::vector<Prediction>& out) {
  float mx = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (float x : logits) z += std::exp((double)x - mx);
  for (int e : top_indices(logits, k)) out.push_back({layer, e, scale * (float)(std::exp((double)logits[e] - mx) / z)});
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

// HOBBIT's stacked gating: routers of layers l+1..l+p applied to layer l's hidden state, p up to
// 3. The depth adapts: each depth's hit ratio is tracked against the routing that follows, and
// only depths whose running accuracy stays >= 0.5 are used (depth 1 always).
class Stacked final : public Predictor {
 public:
  explicit Stacked(const PredictorOptions& o) : o_(o), acc_(kMaxDepth + 1, 1.0), pending_(o.n_layers > 0 ? o.n_layers : 1) {}
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
        for (int e : experts) hit += std::find(in.route.experts.begin(), in.route.experts.end(), e) != in.route.experts.end();
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

std::unique_ptr<Predictor> make_gate(const PredictorOptions& o) { return std::make_unique<Gate>(o); }
std::unique_ptr<Predictor> make_stacked(const PredictorOptions& o) { return std::make_unique<Stacked>(o); }

}  // namespace moeflow::predictors
