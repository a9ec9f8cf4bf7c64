#pragma once
// Training data for ProMoE's learned predictor, cut from a trace with hidden states: the hidden
// state entering layer l paired with the experts the same token chose at layer l + stride.
#include <string>
#include <vector>

#include "policy/promoe_mlp.h"
#include "trace/trace.h"

namespace moeflow::trace {

enum class SplitBy {
  request,  // every 10th request is held out: the test tokens' contexts were never trained on
  sample,   // every 10th (token, layer) sample in trace order: neighbours of a test token train
};

// Throws naming the trace if it has no hidden states, stride is out of range, nothing pairs up,
// or a request split has fewer than 10 requests.
std::vector<PromoeSample> promoe_samples(const Trace& t, int stride, bool decode_only,
                                         SplitBy split, const std::string& what);

}  // namespace moeflow::trace
