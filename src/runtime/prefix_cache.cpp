#include "runtime/prefix_cache.h"

#include <algorithm>

#include "runtime/engine.h"

namespace moeflow {

size_t PrefixCache::prepare(Engine& eng, std::span<const int32_t> prompt) {
  if (!enabled_ || eng.pos() != (int64_t)tokens_.size()) {
    eng.reset();
    tokens_.clear();
    return 0;
  }
  const size_t limit = std::min(tokens_.size(), prompt.empty() ? 0 : prompt.size() - 1);
  const size_t common =
      (size_t)(std::mismatch(tokens_.begin(), tokens_.begin() + (std::ptrdiff_t)limit,
                             prompt.begin())
                   .first -
               tokens_.begin());
  // A recurrent state (gated DeltaNet layers) goes back only to a snapshot of it: the latest at
  // or before the common prefix, else position 0 (exact either way; the tokens after it are
  // computed again).
  const size_t reached = (size_t)eng.context().rewind_to((int64_t)common);
  tokens_.resize(reached);
  return reached;
}

void PrefixCache::fed(std::span<const int32_t> tokens) {
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
}

}  // namespace moeflow
