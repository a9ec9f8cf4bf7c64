#include <unordered_map>

#include "policy/predictors.h"

namespace moeflow::predictors {
namespace {

// ProMoE's token-id baseline: the experts a token id was routed to before, per layer, predict
// where it goes now. Learned online from the routing it observes. When the trace carries no
// token ids it degrades to per-layer popularity in the current sequence (documented baseline).
// Predictions for all later layers are made when a token's first layer routes.
class TokenBased final : public Predictor {
 public:
  explicit TokenBased(const PredictorOptions& o)
      : o_(o), L_(std::max(1, o.n_layers)), E_(std::max(1, o.n_experts)) {
    pop_.assign((size_t)L_ * E_, 0);
  }
  std::string name() const override { return "token"; }
  void on_sequence_start() override { std::fill(pop_.begin(), pop_.end(), 0.f); }
  void on_layer(const PredictorInput& in, std::vector<Prediction>& out) override {
    const int l = in.route.layer;
    if (l < 0 || l >= L_) return;
    std::vector<float>* table = nullptr;
    if (in.token_id >= 0) {
      auto& t = by_token_[in.token_id];
      if (t.empty()) t.assign((size_t)L_ * E_, 0);
      table = &t;
    }
    bool first = in.route.step != last_step_;
    last_step_ = in.route.step;
    if (first) {
      const std::vector<float>& src = table && has_any(*table) ? *table : pop_;
      for (int m = l + 1; m < L_; ++m) {
        std::vector<float> row(src.begin() + (long)m * E_, src.begin() + (long)(m + 1) * E_);
        float tot = 0;
        for (float x : row) tot += x;
        if (tot <= 0) continue;
        for (int e : top_indices(row, o_.top_k)) out.push_back({m, e, row[e] / tot});
      }
    }
    for (int e : in.route.experts) {
      if (e < 0 || e >= E_) continue;
      pop_[(size_t)l * E_ + e] += 1;
      if (table) (*table)[(size_t)l * E_ + e] += 1;
    }
  }

 private:
  static bool has_any(const std::vector<float>& v) {
    for (float x : v)
      if (x > 0) return true;
    return false;
  }
  PredictorOptions o_;
  int L_, E_;
  uint64_t last_step_ = UINT64_MAX;
  std::vector<float> pop_;
  std::unordered_map<int, std::vector<float>> by_token_;
};

}  // namespace

std::unique_ptr<Predictor> make_token(const PredictorOptions& o) {
  return std::make_unique<TokenBased>(o);
}

}  // namespace moeflow::predictors
