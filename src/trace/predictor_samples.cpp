#include "trace/predictor_samples.h"

#include "core/error.h"

namespace moeflow::trace {

std::vector<PromoeSample> promoe_samples(const Trace& t, int stride, bool decode_only,
                                          const std::string& what) {
  if (!t.has_hidden())
    fail("trace '{}' has no hidden states: record it with `moeflow trace --hidden`", what);
  if (stride < 1 || stride >= t.n_layers)
    fail("--stride must be in 1..{} for a trace of {} layers, got {}", t.n_layers - 1, t.n_layers, stride);
  std::vector<PromoeSample> out;
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
        out.push_back(std::move(p));
      }
    }
  }
  if (out.empty())
    fail("trace '{}': no (hidden state, layer + {}) pairs to train on{}", what, stride,
         decode_only ? " in decode steps (try --with-prefill)" : "");
  return out;
}

}  // namespace moeflow::trace
