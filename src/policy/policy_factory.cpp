#include <functional>
#include <utility>

#include "core/error.h"
#include "policy/policies.h"

namespace moeflow {
namespace {

using PolicyMaker = std::unique_ptr<EvictionPolicy> (*)(const PolicyOptions&);

const std::vector<std::pair<std::string, PolicyMaker>>& policy_table() {
  static const std::vector<std::pair<std::string, PolicyMaker>> t = {
      {"lru", policies::make_lru},
      {"lfu", policies::make_lfu},
      {"static", policies::make_static},
      {"moe-infinity", policies::make_moe_infinity},
      {"hobbit", policies::make_hobbit},
      {"daop", policies::make_daop},
  };
  return t;
}

}  // namespace

std::unique_ptr<EvictionPolicy> make_eviction_policy(const std::string& name, const PolicyOptions& opt) {
  for (auto& [n, make] : policy_table())
    if (n == name) return make(opt);
  std::string known;
  for (auto& n : eviction_policy_names()) known += (known.empty() ? "" : ", ") + n;
  fail("unknown eviction policy '{}' (known: {})", name, known);
}

std::vector<std::string> eviction_policy_names() {
  std::vector<std::string> v;
  for (auto& [n, make] : policy_table()) v.push_back(n);
  return v;
}

}  // namespace moeflow
