#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "core/error.h"
#include "policy/policies.h"

namespace moeflow::policies {

// Experts of `layer` (all layers when layer < 0) sorted by calibrated count, most used first.
std::vector<ExpertKey> rank_by_calibration(const PolicyOptions& o, int layer) {
  std::vector<ExpertKey> v;
  for (int l = 0; l < o.n_layers; ++l) {
    if (layer >= 0 && l != layer) continue;
    for (int e = 0; e < o.n_experts; ++e) v.push_back({l, e});
  }
  std::stable_sort(v.begin(), v.end(),
                   [&](ExpertKey a, ExpertKey b) { return calib_count(o, a) > calib_count(o, b); });
  return v;
}

namespace {

// Pins the calibration's most frequent experts: the cache starts with them, and a miss never
// displaces one of them while a less frequent resident exists, so all but one slot stay pinned
// and the last slot acts as the streaming buffer for everything else.
class StaticCalibrated final : public EvictionPolicy {
 public:
  explicit StaticCalibrated(const PolicyOptions& o) : opt_(o) {
    MOEFLOW_CHECK(
        !o.calib_counts.empty(),
        "policy 'static': needs a calibration trace (PolicyOptions::calib_counts is empty)");
    MOEFLOW_CHECK(o.calib_counts.size() == (size_t)o.n_layers * o.n_experts,
                  "policy 'static': calib_counts has {} entries, expected n_layers*n_experts = {}",
                  o.calib_counts.size(), (size_t)o.n_layers * o.n_experts);
  }
  std::string name() const override { return "static"; }
  void on_access(ExpertKey k, uint64_t t) override { last_[pack(k)] = t; }
  void on_insert(ExpertKey k, uint64_t t) override { last_[pack(k)] = t; }
  void on_evict(ExpertKey k) override {}
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t) override {
    MOEFLOW_CHECK(!c.empty(), "static: choose_victim called with no candidates");
    ExpertKey best = c[0];
    for (ExpertKey k : c) {
      double a = calib_count(opt_, k), b = calib_count(opt_, best);
      if (a < b || (a == b && last_[pack(k)] < last_[pack(best)])) best = k;
    }
    return best;
  }
  std::vector<ExpertKey> initial_residents(int layer, int capacity) override {
    auto v = rank_by_calibration(opt_, layer);
    if ((int)v.size() > capacity) v.resize(std::max(0, capacity));
    return v;
  }

 private:
  PolicyOptions opt_;
  std::unordered_map<uint64_t, uint64_t> last_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_static(const PolicyOptions& opt) {
  return std::make_unique<StaticCalibrated>(opt);
}

}  // namespace moeflow::policies
