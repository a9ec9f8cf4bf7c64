#pragma once
// Training data for ProMoE's learned predictor, cut from a trace with hidden states: the hidden
// state entering layer l paired with the experts the same token chose at layer l + stride.
#include <string>
#include <vector>

#include "policy/promoe_mlp.h"
#include "trace/trace.h"

namespace moeflow::trace {

// Throws naming the trace if it has no hidden states or stride is out of range. Steps keep
// their trace order, so the 9:1 split of train_promoe holds out every 10th (token, layer).
std::vector<PromoeSample> promoe_samples(const Trace& t, int stride, bool decode_only,
                                          const std::string& what);

}  // namespace moeflow::trace
