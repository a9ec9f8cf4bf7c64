#pragma once
// Every expert's views by precision, layer and expert, built once so that acquire never
// allocates or searches: the table of the providers whose experts never move (resident in the
// mapped file, or all in VRAM).
#include <vector>

#include "core/error.h"
#include "model/moe/expert_provider.h"

namespace moeflow {

struct ExpertViewTable {
  std::vector<std::vector<ExpertView>> views[2];  // [precision][layer][expert]
  bool has_low = false;

  // Fails naming what is missing: a low-precision copy the model does not have, or an expert
  // outside the table.
  const ExpertView& at(int layer, int expert, Precision p) const {
    if (p == Precision::Low && !has_low)
      fail(
          "expert {} of layer {} was asked for in low precision, but the model has no "
          "low-precision copies (pack it with `moeflow pack --low TYPE`)",
          expert, layer);
    const auto& vs = views[p == Precision::Low ? 1 : 0];
    if (layer < 0 || layer >= (int)vs.size() || expert < 0 || expert >= (int)vs[layer].size())
      fail("no expert {} in layer {}", expert, layer);
    return vs[layer][expert];
  }
};

}  // namespace moeflow
