#pragma once
// Each MoE layer's routing of a run, recorded through the forward observer: (position, layer)
// -> the experts in router rank order and their weights. Tests replay it (model/routing_override.h)
// or compare two runs' routing.
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "model/observer.h"

namespace moeflow::test {

class RoutingLog final : public ForwardObserver {
 public:
  void on_route(const RouteRecord& r) override {
    for (int t = 0; t < r.n_tokens; ++t) {
      routes[{r.pos0 + t, r.layer}].assign(r.experts.begin() + t * r.top_k,
                                           r.experts.begin() + (t + 1) * r.top_k);
      weights[{r.pos0 + t, r.layer}].assign(r.weights.begin() + t * r.top_k,
                                            r.weights.begin() + (t + 1) * r.top_k);
    }
  }
  std::map<std::pair<int64_t, int>, std::vector<int>> routes;
  std::map<std::pair<int64_t, int>, std::vector<float>> weights;
};

}  // namespace moeflow::test
