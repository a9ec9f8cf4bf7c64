#include <unordered_map>

#include "core/error.h"
#include "policy/policies.h"

namespace moeflow::policies {
namespace {

class Lru final : public EvictionPolicy {
 public:
  std::string name() const override { return "lru"; }
  void on_access(ExpertKey k, uint64_t t) override { last_[pack(k)] = t; }
  void on_insert(ExpertKey k, uint64_t t) override { last_[pack(k)] = t; }
  void on_evict(ExpertKey k) override { last_.erase(pack(k)); }
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t) override {
    MOEFLOW_CHECK(!c.empty(), "lru: choose_victim called with no candidates");
    ExpertKey best = c[0];
    uint64_t best_t = UINT64_MAX;
    for (ExpertKey k : c) {
      auto it = last_.find(pack(k));
      // Never-seen candidates are the oldest of all.
      uint64_t t = it == last_.end() ? 0 : it->second;
      if (t < best_t) best_t = t, best = k;
    }
    return best;
  }

 private:
  std::unordered_map<uint64_t, uint64_t> last_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_lru(const PolicyOptions&) { return std::make_unique<Lru>(); }

}  // namespace moeflow::policies
