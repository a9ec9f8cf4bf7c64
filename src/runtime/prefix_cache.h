#pragma once
// Prompt (prefix) cache: remembers which tokens an engine's KV cache holds, so that a request
// whose prompt starts like the previous conversation resumes after the longest common prefix
// instead of prefilling it again (a multi-turn chat re-sends its whole history every turn; with
// experts offloaded, prefill is the expensive part).
//
// Exact: the keys and values of a position depend only on the tokens up to it, and prefill row t
// is bit-identical whichever chunk it ran in (the kernels' matmul/matvec contract), so logits and
// greedy tokens after a hit equal a cold run's (tested in tests/runtime/test_prefix_cache.cpp).
// Models with recurrent layers (qwen3next, qwen35moe) cannot rewind to any position: their
// state goes back to the latest state snapshot at or before the common prefix (the engine takes
// one before the last token of every prompt and every --snapshot-interval tokens of a prefill,
// model/state_snapshots.h), with the KV cache truncated there and the rest recomputed, or starts
// over without one. A chat whose next prompt re-renders the previous reply differently (a
// template that drops the reasoning) diverges inside that reply, after the previous prompt's
// snapshot.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace moeflow {

class Engine;

class PrefixCache {
 public:
  explicit PrefixCache(bool enabled = true) : enabled_(enabled) {}

  // Rewinds `eng` to the longest common prefix of what it holds and `prompt` (with recurrent
  // layers: to the latest state snapshot at or before it), keeping at least the last prompt
  // token to feed (its logits are needed), and returns how many prompt tokens are already in
  // place. Disabled, or when the engine was moved by someone else (its position
  // is not the one recorded here), the engine is reset and 0 is returned.
  size_t prepare(Engine& eng, std::span<const int32_t> prompt);
  // Records tokens just fed to the engine after what it held.
  void fed(std::span<const int32_t> tokens);
  void fed(int32_t token) { fed(std::span<const int32_t>(&token, 1)); }
  // Forgets everything (e.g. after a failed forward pass left the engine in an unknown state).
  void clear() { tokens_.clear(); }

  bool enabled() const { return enabled_; }
  size_t size() const { return tokens_.size(); }

 private:
  bool enabled_;
  std::vector<int32_t> tokens_;  // the engine's positions 0..size()-1
};

}  // namespace moeflow
