#include <unordered_map>

#include "core/error.h"
#include "policy/policies.h"

namespace moeflow::policies {
namespace {

// MoE-Infinity's activation-aware cache (its Algorithm 1, as we read it): each resident expert
// gets priority = (activations of that expert in the current request's expert activation matrix,
// EAM, + 1 smoothing) / (tokens seen + 1) * (1 - layer / n_layers); the lowest priority is
// evicted. The layer decay keeps early layers resident because prefetching cannot hide their
// loads (there is little compute before them to overlap with). The EAM resets per request.
// Ties fall back to LRU.
class MoeInfinity final : public EvictionPolicy {
 public:
  explicit MoeInfinity(const PolicyOptions& o) : n_layers_(o.n_layers) {}
  std::string name() const override { return "moe-infinity"; }
  void on_access(ExpertKey k, uint64_t t) override { last_[pack(k)] = t; }
  void on_insert(ExpertKey k, uint64_t t) override { last_[pack(k)] = t; }
  void on_evict(ExpertKey) override {}
  void on_route(const RouteEvent& ev) override {
    for (int e : ev.experts) eam_[pack({ev.layer, e})] += 1;
    if (ev.step != last_step_) {
      tokens_++;
      last_step_ = ev.step;
    }
  }
  void on_sequence_start() override {
    eam_.clear();
    tokens_ = 0;
  }
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t) override {
    MOEFLOW_CHECK(!c.empty(), "moe-infinity: choose_victim called with no candidates");
    ExpertKey best = c[0];
    double bp = 1e300;
    uint64_t bl = UINT64_MAX;
    for (ExpertKey k : c) {
      double p = priority(k);
      uint64_t l = last_[pack(k)];
      if (p < bp || (p == bp && l < bl)) bp = p, bl = l, best = k;
    }
    return best;
  }

 private:
  double priority(ExpertKey k) {
    auto it = eam_.find(pack(k));
    double f = ((it == eam_.end() ? 0.0 : it->second) + 1.0) / ((double)tokens_ + 1.0);
    double decay = n_layers_ > 0 ? 1.0 - (double)k.layer / (double)n_layers_ : 1.0;
    return f * decay;
  }
  int n_layers_;
  uint64_t tokens_ = 0;
  uint64_t last_step_ = UINT64_MAX;
  std::unordered_map<uint64_t, double> eam_;
  std::unordered_map<uint64_t, uint64_t> last_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_moe_infinity(const PolicyOptions& opt) {
  return std::make_unique<MoeInfinity>(opt);
}

}  // namespace moeflow::policies
