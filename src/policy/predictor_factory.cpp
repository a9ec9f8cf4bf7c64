#include <utility>

#include "core/error.h"
#include "policy/predictors.h"

namespace moeflow {
namespace {

using PredictorMaker = std::unique_ptr<Predictor> (*)(const PredictorOptions&);

const std::vector<std::pair<std::string, PredictorMaker>>& predictor_table() {
  static const std::vector<std::pair<std::string, PredictorMaker>> t = {
      {"lookahead", predictors::make_lookahead}, {"gate", predictors::make_gate},
      {"stacked", predictors::make_stacked},     {"token", predictors::make_token},
      {"promoe", predictors::make_promoe},       {"duoserve", predictors::make_duoserve},
      {"eamc", predictors::make_eamc},
  };
  return t;
}

}  // namespace

std::unique_ptr<Predictor> make_predictor(const std::string& name, const PredictorOptions& opt) {
  for (auto& [n, make] : predictor_table())
    if (n == name) return make(opt);
  std::string known;
  for (auto& n : predictor_names()) known += (known.empty() ? "" : ", ") + n;
  fail("unknown predictor '{}' (known: {})", name, known);
}

bool predictor_reads_hidden_states(const std::string& name) {
  // lookahead and gate apply later layers' routers to this layer's hidden state, stacked and
  // promoe run trained models on it; token, duoserve and eamc learn from routing history only.
  return name == "lookahead" || name == "gate" || name == "stacked" || name == "promoe";
}

std::vector<std::string> predictor_names() {
  std::vector<std::string> v;
  for (auto& [n, make] : predictor_table()) v.push_back(n);
  return v;
}

}  // namespace moeflow
