#pragma once
// Small hand-made traces for the trace and simulator tests.
#include <random>
#include <string>
#include <vector>

#include "trace/trace.h"

namespace moeflow::trace::testing {

// One decode request; routes[s][l] = experts of step s at layer l (weights uniform).
inline Trace make_trace(int n_layers, int n_experts, int top_k,
                        const std::vector<std::vector<std::vector<int>>>& routes,
                        uint32_t request = 0) {
  Trace t;
  t.model = "hand-made";
  t.source = "test";
  t.n_layers = n_layers;
  t.n_experts = n_experts;
  t.top_k = top_k;
  for (size_t s = 0; s < routes.size(); ++s) {
    TokenStep st;
    st.request = request;
    st.phase = Phase::decode;
    st.pos = (uint32_t)s;
    for (int l = 0; l < (int)routes[s].size(); ++l)
      st.routes.push_back({l,
                           routes[s][l],
                           std::vector<float>(routes[s][l].size(), 1.f / routes[s][l].size()),
                           {}});
    t.steps.push_back(std::move(st));
  }
  return t;
}

// Single-layer, top-1 trace from a string of expert letters ("ABCABC").
inline Trace letters(const std::string& seq, int n_experts = 4) {
  std::vector<std::vector<std::vector<int>>> r;
  for (char c : seq) r.push_back({{c - 'A'}});
  return make_trace(1, n_experts, 1, r);
}

// Random routing with some temporal locality (an expert of the previous step is kept with
// probability `stay`), several requests.
inline Trace random_trace(std::mt19937& rng, int L, int E, int K, int steps, int requests,
                          double stay) {
  Trace t;
  t.model = "random";
  t.source = "random";
  t.n_layers = L, t.n_experts = E, t.top_k = K;
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::vector<int>> prev(L);
  for (int s = 0; s < steps; ++s) {
    TokenStep st;
    st.request = (uint32_t)(s * requests / steps);
    st.pos = (uint32_t)s;
    for (int l = 0; l < L; ++l) {
      std::vector<int> ex;
      for (int k = 0; k < K; ++k) {
        int e;
        do {
          e = !prev[l].empty() && u(rng) < stay ? prev[l][rng() % prev[l].size()]
                                                : (int)(rng() % E);
        } while (std::find(ex.begin(), ex.end(), e) != ex.end());
        ex.push_back(e);
      }
      prev[l] = ex;
      st.routes.push_back({l, ex, {}, {}});
    }
    t.steps.push_back(std::move(st));
  }
  return t;
}

}  // namespace moeflow::trace::testing
