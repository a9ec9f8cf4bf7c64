#include <cmath>

#include "policy/predictors.h"

namespace moeflow::predictors {
namespace {

// MoE-Infinity's Expert Activation Matrix Collection (EAMC), as we read it. An EAM counts, for
// one request, how often each (layer, expert) was activated. The collection keeps up to
// kCapacity past EAMs; inserting into a full collection replaces the most similar one (keeps it
// diverse). While a request runs, its partial EAM is matched (cosine similarity over the layers
// seen so far) against the collection, and the best match's activations for the coming layers
// become prefetch priorities weighted by proximity (1 / layer distance).
// Long decodes are cut into windows of kWindow tokens, each entering the collection as its own
// EAM, so that a single long request can still be matched against its own recent past.
class Eamc final : public Predictor {
 public:
  explicit Eamc(const PredictorOptions& o)
      : o_(o), L_(std::max(1, o.n_layers)), E_(std::max(1, o.n_experts)) {
    cur_.assign((size_t)L_ * E_, 0);
  }
  std::string name() const override { return "eamc"; }
  void on_sequence_start() override { commit(); }
  void on_layer(const PredictorInput& in, std::vector<Prediction>& out) override {
    const int l = in.route.layer;
    if (l < 0 || l >= L_) return;
    if (in.route.step != last_step_) {
      last_step_ = in.route.step;
      if (++tokens_ > kWindow) commit();
    }
    for (int e : in.route.experts)
      if (e >= 0 && e < E_) cur_[(size_t)l * E_ + e] += 1;
    if (eams_.empty()) return;
    // Best match on the rows seen so far in this window (all rows once a full token passed).
    const int rows = tokens_ > 1 ? L_ : l + 1;
    int best = -1;
    double bs = -1;
    for (size_t i = 0; i < eams_.size(); ++i) {
      double c = cosine(cur_, eams_[i], rows);
      if (c > bs) bs = c, best = (int)i;
    }
    const auto& m = eams_[best];
    for (int d = 1; d <= L_; ++d) {
      int t = (l + d) % L_;
      std::vector<float> row(m.begin() + (long)t * E_, m.begin() + (long)(t + 1) * E_);
      float tot = 0;
      for (float x : row) tot += x;
      if (tot <= 0) continue;
      for (int e : top_indices(row, o_.top_k)) out.push_back({t, e, (row[e] / tot) / (float)d});
    }
  }

 private:
  static constexpr size_t kCapacity = 64;
  static constexpr int kWindow = 32;
  double cosine(const std::vector<float>& a, const std::vector<float>& b, int rows) const {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < (size_t)rows * E_; ++i)
      ab += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
    return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 0;
  }
  void commit() {
    bool any = false;
    for (float x : cur_) any |= x > 0;
    if (any) {
      if (eams_.size() < kCapacity) {
        eams_.push_back(cur_);
      } else {
        size_t best = 0;
        double bs = -1;
        for (size_t i = 0; i < eams_.size(); ++i) {
          double c = cosine(cur_, eams_[i], L_);
          if (c > bs) bs = c, best = i;
        }
        eams_[best] = cur_;
      }
    }
    std::fill(cur_.begin(), cur_.end(), 0.f);
    tokens_ = 0;
  }
  PredictorOptions o_;
  int L_, E_;
  uint64_t last_step_ = UINT64_MAX;
  int tokens_ = 0;
  std::vector<float> cur_;
  std::vector<std::vector<float>> eams_;
};

}  // namespace

std::unique_ptr<Predictor> make_eamc(const PredictorOptions& o) {
  return std::make_unique<Eamc>(o);
}

}  // namespace moeflow::predictors
