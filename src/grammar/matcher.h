#pragma once
// Runs a grammar over bytes as a lazily built deterministic automaton.
//
// Underneath is a pushdown recognizer: a configuration is the set of stacks the input so far can
// have led to, each stack a chain of return positions whose top is a byte set still to match.
// Stacks are interned as (position, parent) nodes, so equal stacks are equal ids and a
// configuration is a sorted list of ids; configurations are interned as states, and the
// transition of a state on a byte is computed once and then read from a table. The token masks
// (grammar/grammar_constraint.h) walk thousands of tokens' bytes per step, almost all of them
// through states and transitions seen before: an array read per byte.
#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace moeflow {

class GrammarMatcher {
 public:
  using State = int32_t;
  static constexpr State kDead = -1;  // no input continues to a sentence

  // max_states bounds memory (about 1 KiB per state): a grammar that needs more throws.
  explicit GrammarMatcher(std::shared_ptr<const Grammar> g, size_t max_states = 1 << 16);

  State start() const { return 0; }
  State step(State s, uint8_t byte) {
    const State t = trans_[(size_t)s * 256 + byte];
    return t != kUnknown ? t : compute(s, byte);
  }
  // kDead as soon as a byte does not fit.
  State walk(State s, std::string_view bytes) {
    for (char c : bytes) {
      s = step(s, (uint8_t)c);
      if (s == kDead) return kDead;
    }
    return s;
  }
  // The input that led here is a whole sentence of the grammar.
  bool accepting(State s) const { return !configs_[s].empty() && configs_[s][0] == 0; }
  // Some byte can still follow.
  bool can_continue(State s) const { return configs_[s].size() > (accepting(s) ? 1u : 0u); }
  size_t n_states() const { return configs_.size(); }
  const Grammar& grammar() const { return *g_; }

 private:
  static constexpr State kUnknown = -2;
  struct Node {
    uint32_t pos;     // top: a Bytes symbol to match; below: where the rule continues
    uint32_t parent;  // 0: the bottom (the root rule has ended)
  };
  struct ConfigHash {
    size_t operator()(const std::vector<uint32_t>& v) const;
  };

  State compute(State s, uint8_t byte);
  uint32_t node(uint32_t pos, uint32_t parent);
  // Adds to out the stacks reached from "continue at pos, then return to parent" without
  // consuming a byte: rules are entered, finished rules return.
  void closure(uint32_t pos, uint32_t parent, std::vector<uint32_t>& out);
  State intern(std::vector<uint32_t>& config);  // sorts and dedups config

  std::shared_ptr<const Grammar> g_;
  const std::vector<Symbol>& syms_;
  size_t max_states_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, uint32_t> node_ids_;
  std::vector<std::vector<uint32_t>> configs_;
  std::unordered_map<std::vector<uint32_t>, State, ConfigHash> config_ids_;
  std::vector<State> trans_;  // 256 per state
  // Scratch of closure() and compute(). A closure visits a few dozen (position, parent) pairs:
  // a flat list searched linearly beats a hash set (no allocation per pair).
  std::vector<std::pair<uint32_t, uint32_t>> work_;
  std::vector<uint64_t> seen_;
  std::vector<uint32_t> next_;
};

}  // namespace moeflow
