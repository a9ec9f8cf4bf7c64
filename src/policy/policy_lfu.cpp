#include <unordered_map>

#include "core/error.h"
#include "policy/policies.h"

namespace moeflow::policies {
namespace {

// Counts survive eviction ("perfect" LFU): expert popularity is a property of the model and the
// workload, not of the time an expert happened to be resident. Ties go to the least recent.
class Lfu final : public EvictionPolicy {
 public:
  std::string name() const override { return "lfu"; }
  void on_access(ExpertKey k, uint64_t t) override {
    auto& s = st_[pack(k)];
    s.count++;
    s.last = t;
  }
  void on_insert(ExpertKey k, uint64_t t) override { st_[pack(k)].last = t; }
  void on_evict(ExpertKey) override {}
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t) override {
    MOEFLOW_CHECK(!c.empty(), "lfu: choose_victim called with no candidates");
    ExpertKey best = c[0];
    State bs{UINT64_MAX, UINT64_MAX};
    for (ExpertKey k : c) {
      auto it = st_.find(pack(k));
      State s = it == st_.end() ? State{} : it->second;
      if (s.count < bs.count || (s.count == bs.count && s.last < bs.last)) bs = s, best = k;
    }
    return best;
  }

 private:
  struct State {
    uint64_t count = 0;
    uint64_t last = 0;
  };
  std::unordered_map<uint64_t, State> st_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_lfu(const PolicyOptions&) { return std::make_unique<Lfu>(); }

}  // namespace moeflow::policies
