#include <cmath>
#include <random>

#include "policy/predictors.h"

namespace moeflow::predictors {
namespace {

// DuoServe-MoE's ExpertMLP, as we read it: a small MLP scores every expert of a target layer
// from routing features: popularity (the expert's share at that layer so far), affinity
// (co-activation with the experts the previous layer just chose: layer-to-layer transition
// counts), and routing history (used by the previous one and two tokens at that layer, share in
// the current request). It is trained online by SGD on the routing it observes, so it works on
// traces without hidden states. Two targets per routed layer l: layer l+1 of this token (with
// affinity) and layer l of the next token (history only: it has a whole token of lead time).
class DuoServe final : public Predictor {
 public:
  static constexpr int F = 6, H = 8;
  explicit DuoServe(const PredictorOptions& o)
      : o_(o), L_(std::max(1, o.n_layers)), E_(std::max(1, o.n_experts)) {
    pop_.assign((size_t)L_ * E_, 0);
    req_.assign((size_t)L_ * E_, 0);
    trans_.assign((size_t)L_ * E_ * E_, 0);
    hist1_.assign((size_t)L_ * E_, 0);
    hist2_.assign((size_t)L_ * E_, 0);
    cur_.assign((size_t)L_ * E_, 0);
    prev_layer_experts_.assign(L_, {});
    std::mt19937 rng(12345);
    std::normal_distribution<float> nd(0.f, 0.3f);
    for (auto& w : w1_) w = nd(rng);
    for (auto& w : w2_) w = nd(rng);
  }
  std::string name() const override { return "duoserve"; }
  void on_sequence_start() override {
    std::fill(req_.begin(), req_.end(), 0.f);
    std::fill(hist1_.begin(), hist1_.end(), 0.f);
    std::fill(hist2_.begin(), hist2_.end(), 0.f);
    std::fill(cur_.begin(), cur_.end(), 0.f);
    req_tokens_ = 0;
    last_layer_ = -1;
  }
  void on_layer(const PredictorInput& in, std::vector<Prediction>& out) override {
    const int l = in.route.layer;
    if (l < 0 || l >= L_) return;
    if (in.route.step != last_step_) {  // a new token: shift the history
      last_step_ = in.route.step;
      hist2_.swap(hist1_);
      hist1_.swap(cur_);
      std::fill(cur_.begin(), cur_.end(), 0.f);
      req_tokens_++;
      last_layer_ = -1;
    }
    // Train on this layer's actual routing, for both targets, before updating the counts.
    float x[F];
    for (int e = 0; e < E_; ++e) {
      float y =
          std::find(in.route.experts.begin(), in.route.experts.end(), e) != in.route.experts.end()
              ? 1.f
              : 0.f;
      if (last_layer_ >= 0 && last_layer_ == l - 1) {
        features(l, e, &prev_layer_experts_[l - 1], x);
        sgd(x, y);
      }
      features(l, e, nullptr, x);
      sgd(x, y);
    }
    // Update the counts.
    for (int e : in.route.experts) {
      if (e < 0 || e >= E_) continue;
      pop_[(size_t)l * E_ + e] += 1;
      req_[(size_t)l * E_ + e] += 1;
      cur_[(size_t)l * E_ + e] = 1;
      if (last_layer_ == l - 1 && l > 0)
        for (int a : prev_layer_experts_[l - 1]) trans_[((size_t)(l - 1) * E_ + a) * E_ + e] += 1;
    }
    prev_layer_experts_[l].assign(in.route.experts.begin(), in.route.experts.end());
    last_layer_ = l;
    // Predict: next layer of this token, then this layer of the next token (shifted history).
    std::vector<float> s(E_);
    if (l + 1 < L_) {
      for (int e = 0; e < E_; ++e)
        features(l + 1, e, &prev_layer_experts_[l], x), s[e] = forward(x);
      for (int e : top_indices(s, o_.top_k)) out.push_back({l + 1, e, s[e]});
    }
    for (int e = 0; e < E_; ++e) {
      next_features(l, e, x);
      s[e] = forward(x);
    }
    for (int e : top_indices(s, o_.top_k)) out.push_back({l, e, s[e] * 0.5f});
  }

 private:
  void features(int m, int e, const std::vector<int>* prev, float* x) const {
    const size_t i = (size_t)m * E_ + e;
    x[0] = share(pop_, m, e);
    x[1] = 0;
    if (prev && m > 0 && !prev->empty()) {
      for (int a : *prev) {
        double row = 0;
        for (int b = 0; b < E_; ++b) row += trans_[((size_t)(m - 1) * E_ + a) * E_ + b];
        if (row > 0) x[1] += (float)(trans_[((size_t)(m - 1) * E_ + a) * E_ + e] / row);
      }
      x[1] /= (float)prev->size();
    }
    x[2] = hist1_[i];
    x[3] = hist2_[i];
    x[4] = share(req_, m, e);
    x[5] = prev ? 1.f : 0.f;
  }
  // Features for (layer m, next token): the current token becomes history 1.
  void next_features(int m, int e, float* x) const {
    const size_t i = (size_t)m * E_ + e;
    x[0] = share(pop_, m, e);
    x[1] = 0;
    x[2] = cur_[i];
    x[3] = hist1_[i];
    x[4] = share(req_, m, e);
    x[5] = 0;
  }
  float share(const std::vector<float>& v, int m, int e) const {
    float tot = 0;
    for (int b = 0; b < E_; ++b) tot += v[(size_t)m * E_ + b];
    return tot > 0 ? v[(size_t)m * E_ + e] / tot * (float)o_.top_k : 0.f;
  }
  float forward(const float* x) {
    float z = b2_;
    for (int j = 0; j < H; ++j) {
      float a = b1_[j];
      for (int f = 0; f < F; ++f) a += w1_[j * F + f] * x[f];
      h_[j] = std::tanh(a);
      z += w2_[j] * h_[j];
    }
    return 1.f / (1.f + std::exp(-z));
  }
  void sgd(const float* x, float y) {
    float p = forward(x);
    float g = p - y;  // d(BCE)/dz
    for (int j = 0; j < H; ++j) {
      float gh = g * w2_[j] * (1 - h_[j] * h_[j]);
      w2_[j] -= kLr * g * h_[j];
      for (int f = 0; f < F; ++f) w1_[j * F + f] -= kLr * gh * x[f];
      b1_[j] -= kLr * gh;
    }
    b2_ -= kLr * g;
  }
  static constexpr float kLr = 0.02f;
  PredictorOptions o_;
  int L_, E_;
  uint64_t last_step_ = UINT64_MAX;
  int last_layer_ = -1;
  int req_tokens_ = 0;
  std::vector<float> pop_, req_, trans_, hist1_, hist2_, cur_;
  std::vector<std::vector<int>> prev_layer_experts_;
  float w1_[H * F] = {}, b1_[H] = {}, w2_[H] = {}, b2_ = 0, h_[H] = {};
};

}  // namespace

std::unique_ptr<Predictor> make_duoserve(const PredictorOptions& o) {
  return std::make_unique<DuoServe>(o);
}

}  // namespace moeflow::predictors
