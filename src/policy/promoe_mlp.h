#pragma once
// ProMoE's learned predictor: per layer l, a small MLP maps the hidden state entering layer l
// to the experts of layer l + stride ("stride prefetching": far enough ahead for the copy to
// finish). Trained offline from traces with hidden states (`moeflow train-predictor`).
#include <cstdint>
#include <string>
#include <vector>

namespace moeflow {

struct PromoeSample {
  int layer = 0;              // source layer
  std::vector<float> hidden;  // hidden state entering `layer`
  std::vector<int> target;    // experts of layer + stride
  // The unit the 9:1 split holds out: samples whose key % 10 == 9 are the test set. -1 = the
  // sample's own index (every 10th sample); moeflow train-predictor sets the request id so that
  // no held-out request shares a context with a training one.
  int64_t split_key = -1;
};

// Whether samples[i] belongs to the held-out 10%.
bool promoe_held_out(const std::vector<PromoeSample>& samples, size_t i);

struct PromoeModel {
  int n_layers = 0, n_experts = 0, hidden_dim = 0, width = 64, stride = 1, top_k = 1;
  // Per source layer: W1 (width x hidden_dim), b1 (width), W2 (n_experts x width), b2 (n_experts).
  std::vector<std::vector<float>> w1, b1, w2, b2;

  void init(int layers, int experts, int hidden, int width_, int stride_, int top_k_,
            unsigned seed);
  // Returns expert logits for source layer `l`.
  void forward(int l, const float* h, std::vector<float>& logits,
               std::vector<float>* act = nullptr) const;
  void save(const std::string& path) const;
  static PromoeModel load(const std::string& path);
};

struct PromoeTrainReport {
  size_t train_samples = 0, test_samples = 0;
  double train_recall = 0, test_recall = 0;  // share of target experts found in the predicted top-k
};

// Deterministic 9:1 split (promoe_held_out); plain SGD on per-expert sigmoid cross-entropy.
// Throws if either side of the split is empty.
PromoeTrainReport train_promoe(PromoeModel& m, const std::vector<PromoeSample>& samples, int epochs,
                               float lr);
double promoe_recall(const PromoeModel& m, const std::vector<PromoeSample>& samples,
                     bool held_out_only);

}  // namespace moeflow
