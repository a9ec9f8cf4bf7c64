#pragma once
// A grammar as the sampler's TokenConstraint: a token may come next when all its bytes continue
// the grammar, an end-of-generation token when the output so far is complete.
//
// Speed: the sampler checks the token it drew first (a walk over that token's bytes) and asks
// for the full mask only when it is refused, unless the mask of this state is cached or most
// recent checks were refused: then it masks first and draws once. A mask is one pass over the
// vocabulary's byte trie, each trie node one step of the matcher's lazy automaton from its parent's
// state, a dead state skipping the node's subtree; the mask is cached per automaton state, so the
// states an output keeps coming back to (inside a string, between array items) cost one pass in
// all.
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "grammar/matcher.h"
#include "grammar/token_vocab.h"
#include "sampling/token_constraint.h"

namespace moeflow {

class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> vocab);

  bool allows(int32_t id) override;
  size_t mask(std::span<float> logits) override;
  bool mask_first() override { return ended_ || refused_ > 0.5f || masks_.count(state_) != 0; }
  // Throws moeflow::Error for a token the grammar does not allow.
  void accept(int32_t id) override;

  // The output so far is a whole sentence of the grammar.
  bool complete() const { return m_.accepting(state_); }
  // Complete and nothing can follow but the end: generation may stop here.
  bool done() const { return ended_ || (complete() && !m_.can_continue(state_)); }

  // The allowed tokens at the current state, as a bitset over the vocabulary (tests compare it
  // with a brute-force reference).
  const std::vector<uint64_t>& allowed_bits();

 private:
  struct Mask {
    std::vector<uint64_t> bits;
    size_t count = 0;
  };
  bool fits(int32_t id);  // allows() without the bookkeeping
  const Mask& current_mask();
  void compute_mask(Mask& m);

  GrammarMatcher m_;
  std::shared_ptr<const TokenVocab> vocab_;
  GrammarMatcher::State state_;
  bool ended_ = false;  // an end-of-generation token was accepted
  float refused_ = 0;   // share of the recent allows() checks that said no (decaying average)
  std::unordered_map<GrammarMatcher::State, Mask> masks_;
  std::vector<GrammarMatcher::State> path_;  // scratch: the state at each trie depth
};

}  // namespace moeflow
