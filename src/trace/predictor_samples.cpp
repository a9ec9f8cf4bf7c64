#include "trace/predictor_samples.h"

#include <set>

#include "core/error.h"

namespace moeflow::trace {

std::vector<PromoeSample> promoe_samples(const Trace& t, int stride, bool decode_only,
                                         SplitBy split, const std::string& what) {
  if (t.steps.empty()) fail("trace '{}' is empty: no token steps to train on", what);
  if (!t.has_hidden())
    fail("trace '{}' has no hidden states: record it with `moeflow trace --hidden`", what);
  if (stride < 1 || stride >= t.n_layers)
    fail("--stride must be in 1..{} for a trace of {} layers, got {}", t.n_layers - 1, t.n_layers,
         stride);
  std::vector<PromoeSample> out;
  std::set<uint32_t> requests;
  for (const TokenStep& s : t.steps) {
    if (decode_only && s.phase != Phase::decode) continue;
    for (const LayerRoute& src : s.routes) {
      if (src.hidden.empty()) continue;
      for (const LayerRoute& dst : s.routes) {
        if (dst.layer != src.layer + stride) continue;
        PromoeSample p;
        p.layer = src.layer;
        p.hidden = src.hidden;
        p.target = dst.experts;
        p.split_key = split == SplitBy::request ? (int64_t)s.request : -1;
        out.push_back(std::move(p));
        requests.insert(s.request);
      }
    }
  }
  if (out.empty())
    fail("trace '{}': no (hidden state, layer + {}) pairs to train on{}", what, stride,
         decode_only ? " in decode steps (try --with-prefill)" : "");
  // Request ids are what the split keys on: it needs one id ending in 9 and one not.
  bool test = false, train = false;
  for (uint32_t r : requests) (r % 10 == 9 ? test : train) = true;
  if (split == SplitBy::request && !(test && train))
    fail(
        "trace '{}': the request split needs requests on both sides of the 9:1 split (ids ending "
        "in 9 are "
        "held out; this trace has {} request(s)); use --split sample",
        what, requests.size());
  return out;
}

}  // namespace moeflow::trace
