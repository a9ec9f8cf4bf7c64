#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/error.h"
#include "policy/policies.h"

namespace moeflow::policies {

std::vector<ExpertKey> rank_by_calibration(const PolicyOptions& o, int layer);

namespace {

// DAOP's data-aware placement, as we read it: the fast tier holds a placement computed from a
// calibration trace (each layer's top-k most used experts first, so every layer can serve a
// typical token, then the remaining budget by global popularity). During decode the placement
// is fixed: a miss is served without caching (DAOP computes it on the CPU). After each
// sequence's prefill, per layer, a non-resident expert replaces a resident one when its prefill
// activation count exceeds the resident's by the 1.05 threshold (sequence-specific adaptation).
class Daop final : public EvictionPolicy {
 public:
  explicit Daop(const PolicyOptions& o) : opt_(o) {
    MOEFLOW_CHECK(
        !o.calib_counts.empty(),
        "policy 'daop': needs a calibration trace (PolicyOptions::calib_counts is empty)");
    MOEFLOW_CHECK(o.calib_counts.size() == (size_t)o.n_layers * o.n_experts,
                  "policy 'daop': calib_counts has {} entries, expected n_layers*n_experts = {}",
                  o.calib_counts.size(), (size_t)o.n_layers * o.n_experts);
  }
  std::string name() const override { return "daop"; }
  void on_access(ExpertKey, uint64_t) override {}
  void on_insert(ExpertKey k, uint64_t) override {
    resident_.insert(pack(k));
    wanted_.erase(pack(k));
  }
  void on_evict(ExpertKey k) override {
    resident_.erase(pack(k));
    doomed_.erase(pack(k));
  }
  bool admit(ExpertKey k, uint64_t) override { return wanted_.count(pack(k)) > 0; }
  bool admits_everything() const override { return false; }
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t) override {
    MOEFLOW_CHECK(!c.empty(), "daop: choose_victim called with no candidates");
    for (ExpertKey k : c)
      if (doomed_.count(pack(k))) return k;
    ExpertKey best = c[0];
    for (ExpertKey k : c)
      if (calib_count(opt_, k) < calib_count(opt_, best)) best = k;
    return best;
  }
  std::vector<ExpertKey> initial_residents(int layer, int capacity) override {
    if (layer >= 0) {
      auto v = rank_by_calibration(opt_, layer);
      if ((int)v.size() > capacity) v.resize(std::max(0, capacity));
      return v;
    }
    std::vector<ExpertKey> out;
    std::unordered_set<uint64_t> taken;
    int per_layer = std::min(opt_.top_k, opt_.n_experts);
    for (int l = 0; l < opt_.n_layers && (int)out.size() < capacity; ++l) {
      // A layer the calibration never routed has no experts (dense, or not traced): a place
      // given to it would stay empty.
      double used = 0;
      for (int e = 0; e < opt_.n_experts; ++e) used += calib_count(opt_, {l, e});
      if (used == 0) continue;
      auto v = rank_by_calibration(opt_, l);
      for (int i = 0; i < per_layer && (int)out.size() < capacity; ++i)
        out.push_back(v[i]), taken.insert(pack(v[i]));
    }
    for (ExpertKey k : rank_by_calibration(opt_, -1)) {
      if ((int)out.size() >= capacity) break;
      if (taken.insert(pack(k)).second) out.push_back(k);
    }
    return out;
  }
  void on_prefill_done(std::span<const double> counts) override {
    if (counts.size() != (size_t)opt_.n_layers * opt_.n_experts) return;
    auto cnt = [&](ExpertKey k) { return counts[(size_t)k.layer * opt_.n_experts + k.expert]; };
    for (int l = 0; l < opt_.n_layers; ++l) {
      std::vector<ExpertKey> in, out;
      for (int e = 0; e < opt_.n_experts; ++e)
        (resident_.count(pack({l, e})) ? in : out).push_back({l, e});
      std::sort(in.begin(), in.end(), [&](ExpertKey a, ExpertKey b) { return cnt(a) < cnt(b); });
      std::sort(out.begin(), out.end(), [&](ExpertKey a, ExpertKey b) { return cnt(a) > cnt(b); });
      for (size_t i = 0; i < in.size() && i < out.size(); ++i) {
        if (!(cnt(out[i]) > kSwapThreshold * cnt(in[i]))) break;
        doomed_.insert(pack(in[i]));
        wanted_.insert(pack(out[i]));
        requests_.push_back(out[i]);
      }
    }
  }
  std::vector<ExpertKey> take_placement_requests() override { return std::exchange(requests_, {}); }

 private:
  static constexpr double kSwapThreshold = 1.05;
  PolicyOptions opt_;
  std::unordered_set<uint64_t> resident_, doomed_, wanted_;
  std::vector<ExpertKey> requests_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_daop(const PolicyOptions& opt) {
  return std::make_unique<Daop>(opt);
}

}  // namespace moeflow::policies
