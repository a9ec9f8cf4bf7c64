#include <functional>
#include <utility>

#include "core/error.h"
#include "policy/policies.h"

namespace moeflow {
namespace {

using PolicyMaker = std::unique_ptr<EvictionPolicy> (*)(const PolicyOptions&);

struct PolicyEntry {
  std::string name;
  PolicyMaker make;
  bool calibrated;  // needs PolicyOptions::calib_counts
};

const std::vector<PolicyEntry>& policy_table() {
  static const std::vector<PolicyEntry> t = {
      {"lru", policies::make_lru, false},
      {"lfu", policies::make_lfu, false},
      {"static", policies::make_static, true},
      {"moe-infinity", policies::make_moe_infinity, false},
      {"hobbit", policies::make_hobbit, false},
      {"lfu-cycle", policies::make_lfu_cycle, false},
      {"daop", policies::make_daop, true},
  };
  return t;
}

}  // namespace

std::unique_ptr<EvictionPolicy> make_eviction_policy(const std::string& name,
                                                     const PolicyOptions& opt) {
  for (const PolicyEntry& p : policy_table())
    if (p.name == name) return p.make(opt);
  std::string known;
  for (auto& n : eviction_policy_names()) known += (known.empty() ? "" : ", ") + n;
  fail("unknown eviction policy '{}' (known: {})", name, known);
}

std::vector<std::string> eviction_policy_names() {
  std::vector<std::string> v;
  for (const PolicyEntry& p : policy_table()) v.push_back(p.name);
  return v;
}

bool eviction_policy_needs_calibration(const std::string& name) {
  for (const PolicyEntry& p : policy_table())
    if (p.name == name) return p.calibrated;
  return false;
}

}  // namespace moeflow
