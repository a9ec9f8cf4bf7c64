#pragma once
// Constructors of the built-in predictors, gathered by predictor_factory.cpp.
#include <algorithm>
#include <memory>
#include <vector>

#include "policy/predictor.h"

namespace moeflow::predictors {

std::unique_ptr<Predictor> make_gate(const PredictorOptions& o);
std::unique_ptr<Predictor> make_lookahead(const PredictorOptions& o);
std::unique_ptr<Predictor> make_stacked(const PredictorOptions& o);
std::unique_ptr<Predictor> make_token(const PredictorOptions& o);
std::unique_ptr<Predictor> make_promoe(const PredictorOptions& o);
std::unique_ptr<Predictor> make_duoserve(const PredictorOptions& o);
std::unique_ptr<Predictor> make_eamc(const PredictorOptions& o);

// Indices of the k largest values, largest first.
inline std::vector<int> top_indices(const std::vector<float>& v, int k) {
  std::vector<int> idx(v.size());
  for (size_t i = 0; i < v.size(); ++i) idx[i] = (int)i;
  k = std::min<int>(k, (int)v.size());
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  idx.resize(k);
  return idx;
}

}  // namespace moeflow::predictors
