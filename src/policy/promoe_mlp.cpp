#include "policy/promoe_mlp.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "core/error.h"
#include "policy/predictors.h"

namespace moeflow {

void PromoeModel::init(int layers, int experts, int hidden, int width_, int stride_, int top_k_,
                       unsigned seed) {
  MOEFLOW_CHECK(layers > 0 && experts > 0 && hidden > 0 && width_ > 0 && stride_ > 0 && top_k_ > 0,
                "promoe: bad model shape (layers {}, experts {}, hidden {}, width {}, stride {})",
                layers, experts, hidden, width_, stride_);
  n_layers = layers, n_experts = experts, hidden_dim = hidden, width = width_, stride = stride_,
  top_k = top_k_;
  std::mt19937 rng(seed);
  std::normal_distribution<float> n1(0.f, 1.f / std::sqrt((float)hidden)),
      n2(0.f, 1.f / std::sqrt((float)width));
  w1.assign(layers, {}), b1.assign(layers, {}), w2.assign(layers, {}), b2.assign(layers, {});
  for (int l = 0; l < layers; ++l) {
    w1[l].resize((size_t)width * hidden);
    for (auto& x : w1[l]) x = n1(rng);
    b1[l].assign(width, 0.f);
    w2[l].resize((size_t)experts * width);
    for (auto& x : w2[l]) x = n2(rng);
    b2[l].assign(experts, 0.f);
  }
}

void PromoeModel::forward(int l, const float* h, std::vector<float>& logits,
                          std::vector<float>* act) const {
  std::vector<float> a(width);
  for (int j = 0; j < width; ++j) {
    float s = b1[l][j];
    const float* w = &w1[l][(size_t)j * hidden_dim];
    for (int i = 0; i < hidden_dim; ++i) s += w[i] * h[i];
    a[j] = s > 0 ? s : 0;
  }
  logits.assign(n_experts, 0.f);
  for (int e = 0; e < n_experts; ++e) {
    float s = b2[l][e];
    const float* w = &w2[l][(size_t)e * width];
    for (int j = 0; j < width; ++j) s += w[j] * a[j];
    logits[e] = s;
  }
  if (act) *act = std::move(a);
}

namespace {
constexpr char kMagic[8] = {'M', 'F', 'P', 'R', 'O', 'M', 'O', 'E'};
void put_vec(std::ofstream& f, const std::vector<float>& v) {
  f.write((const char*)v.data(), (std::streamsize)(v.size() * 4));
}
void get_vec(std::ifstream& f, std::vector<float>& v, size_t n, const std::string& path) {
  v.resize(n);
  f.read((char*)v.data(), (std::streamsize)(n * 4));
  if (!f) fail("promoe model '{}': truncated", path);
}
}  // namespace

void PromoeModel::save(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("promoe model '{}': cannot open for writing", path);
  f.write(kMagic, 8);
  int32_t hdr[6] = {n_layers, n_experts, hidden_dim, width, stride, top_k};
  f.write((const char*)hdr, sizeof(hdr));
  for (int l = 0; l < n_layers; ++l)
    put_vec(f, w1[l]), put_vec(f, b1[l]), put_vec(f, w2[l]), put_vec(f, b2[l]);
  if (!f) fail("promoe model '{}': write failed", path);
}

PromoeModel PromoeModel::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("promoe model '{}': cannot open (train one with `moeflow train-predictor`)", path);
  char m[8];
  int32_t h[6];
  f.read(m, 8);
  f.read((char*)h, sizeof(h));
  if (!f || std::memcmp(m, kMagic, 8) != 0)
    fail("promoe model '{}': not a moeflow ProMoE predictor file", path);
  for (int v : h) MOEFLOW_CHECK(v > 0 && v < (1 << 20), "promoe model '{}': bad header", path);
  PromoeModel p;
  p.n_layers = h[0], p.n_experts = h[1], p.hidden_dim = h[2], p.width = h[3], p.stride = h[4],
  p.top_k = h[5];
  MOEFLOW_CHECK(
      (double)p.n_layers * ((double)p.width * p.hidden_dim + (double)p.n_experts * p.width) < 4e8,
      "promoe model '{}': implausibly large", path);
  p.w1.resize(p.n_layers), p.b1.resize(p.n_layers), p.w2.resize(p.n_layers),
      p.b2.resize(p.n_layers);
  for (int l = 0; l < p.n_layers; ++l) {
    get_vec(f, p.w1[l], (size_t)p.width * p.hidden_dim, path);
    get_vec(f, p.b1[l], p.width, path);
    get_vec(f, p.w2[l], (size_t)p.n_experts * p.width, path);
    get_vec(f, p.b2[l], p.n_experts, path);
  }
  return p;
}

bool promoe_held_out(const std::vector<PromoeSample>& samples, size_t i) {
  const int64_t key = samples[i].split_key >= 0 ? samples[i].split_key : (int64_t)i;
  return key % 10 == 9;
}

double promoe_recall(const PromoeModel& m, const std::vector<PromoeSample>& samples,
                     bool held_out_only) {
  size_t hit = 0, tot = 0;
  std::vector<float> lg;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (held_out_only != promoe_held_out(samples, i)) continue;
    const auto& s = samples[i];
    m.forward(s.layer, s.hidden.data(), lg);
    auto top = predictors::top_indices(lg, m.top_k);
    for (int e : s.target) hit += std::find(top.begin(), top.end(), e) != top.end(), tot++;
  }
  return tot ? (double)hit / (double)tot : 0;
}

PromoeTrainReport train_promoe(PromoeModel& m, const std::vector<PromoeSample>& samples, int epochs,
                               float lr) {
  PromoeTrainReport rep;
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    MOEFLOW_CHECK(s.layer >= 0 && s.layer < m.n_layers && (int)s.hidden.size() == m.hidden_dim,
                  "promoe: sample {} has layer {} / hidden size {} (model: {} layers, hidden {})",
                  i, s.layer, s.hidden.size(), m.n_layers, m.hidden_dim);
    (promoe_held_out(samples, i) ? rep.test_samples : rep.train_samples)++;
  }
  if (rep.train_samples == 0 || rep.test_samples == 0)
    fail(
        "promoe: the 9:1 split leaves {} training and {} held-out samples; both must be non-empty "
        "(a request "
        "split needs at least 10 requests)",
        rep.train_samples, rep.test_samples);
  std::vector<size_t> order;
  for (size_t i = 0; i < samples.size(); ++i)
    if (!promoe_held_out(samples, i)) order.push_back(i);
  std::mt19937 rng(7);
  std::vector<float> lg, act, ga(m.width);
  const size_t total_updates = order.size() * (size_t)epochs;
  size_t update = 0;
  for (int ep = 0; ep < epochs; ++ep) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i : order) {
      // Linear decay to 5% of --lr: late updates refine instead of bouncing around the optimum.
      const float step_lr = lr * (1.f - 0.95f * (float)update++ / (float)total_updates);
      const auto& s = samples[i];
      const int l = s.layer;
      m.forward(l, s.hidden.data(), lg, &act);
      std::fill(ga.begin(), ga.end(), 0.f);
      for (int e = 0; e < m.n_experts; ++e) {
        float y = std::find(s.target.begin(), s.target.end(), e) != s.target.end() ? 1.f : 0.f;
        float g = 1.f / (1.f + std::exp(-lg[e])) - y;
        float* w = &m.w2[l][(size_t)e * m.width];
        for (int j = 0; j < m.width; ++j) ga[j] += g * w[j], w[j] -= step_lr * g * act[j];
        m.b2[l][e] -= step_lr * g;
      }
      for (int j = 0; j < m.width; ++j) {
        if (act[j] <= 0) continue;
        float* w = &m.w1[l][(size_t)j * m.hidden_dim];
        for (int q = 0; q < m.hidden_dim; ++q) w[q] -= step_lr * ga[j] * s.hidden[q];
        m.b1[l][j] -= step_lr * ga[j];
      }
    }
  }
  rep.train_recall = promoe_recall(m, samples, false);
  rep.test_recall = promoe_recall(m, samples, true);
  return rep;
}

namespace predictors {
namespace {

class Promoe final : public Predictor {
 public:
  explicit Promoe(const PredictorOptions& o) : o_(o) {
    MOEFLOW_CHECK(!o.model_path.empty(),
                  "predictor 'promoe': needs trained weights (--predictor-model FILE from `moeflow "
                  "train-predictor`)");
    m_ = PromoeModel::load(o.model_path);
    // A predictor trained on another model's traces would silently predict nothing (or
    // nonsense): say so instead. 0 = the caller does not know that dimension.
    auto check = [&](const char* what, int mine, int want) {
      if (want > 0 && mine != want)
        fail(
            "predictor 'promoe': '{}' was trained for {} {}, this model has {} (retrain with "
            "`moeflow "
            "train-predictor` on a trace of this model)",
            o.model_path, mine, what, want);
    };
    check("layers", m_.n_layers, o.n_layers);
    check("experts", m_.n_experts, o.n_experts);
    check("hidden dimensions", m_.hidden_dim, o.hidden_dim);
  }
  std::string name() const override { return "promoe"; }
  void on_layer(const PredictorInput& in, std::vector<Prediction>& out) override {
    int l = in.route.layer;
    if (in.hidden.empty() || (int)in.hidden.size() != m_.hidden_dim || l < 0 || l >= m_.n_layers)
      return;
    int tgt = l + m_.stride;
    if (tgt >= m_.n_layers) return;
    m_.forward(l, in.hidden.data(), lg_);
    for (int e : top_indices(lg_, m_.top_k))
      out.push_back({tgt, e, 1.f / (1.f + std::exp(-lg_[e]))});
  }

 private:
  PredictorOptions o_;
  PromoeModel m_;
  std::vector<float> lg_;
};

}  // namespace

std::unique_ptr<Predictor> make_promoe(const PredictorOptions& o) {
  return std::make_unique<Promoe>(o);
}

}  // namespace predictors
}  // namespace moeflow
