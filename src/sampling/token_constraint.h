#pragma once
// What a sampler asks of a constraint on its output (a grammar, src/grammar): whether a token may
// come next, the logits with every token that may not set to -inf, and the chosen token. The
// sampler knows no grammar; it only calls these, so sampling depends on nothing new.
#include <cstddef>
#include <cstdint>
#include <span>

namespace moeflow {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // May `id` come next? Cheap: the sampler asks this of the token it drew first and computes the
  // full mask only when the answer is no.
  virtual bool allows(int32_t id) = 0;
  // Sets the logit of every token that may not come next to -inf; returns how many may.
  virtual size_t mask(std::span<float> logits) = 0;
  // Mask before the draw rather than check after it: true when the mask here is known already
  // (cached), or when the draws checked lately were mostly refused, so that checking first would
  // mostly cost a wasted draw.
  virtual bool mask_first() { return false; }
  // `id` was chosen (it was allowed): the constraint moves past it.
  virtual void accept(int32_t id) = 0;
};

}  // namespace moeflow
