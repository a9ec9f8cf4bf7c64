#include "grammar/grammar_constraint.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace moeflow {

namespace {
constexpr size_t kMaxCachedMasks = 1024;  // masks are |vocab| bits each
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> g,
                                     std::shared_ptr<const TokenVocab> vocab)
    : m_(std::move(g)), vocab_(std::move(vocab)), state_(m_.start()) {}

bool GrammarConstraint::fits(int32_t id) {
  if (ended_ || id < 0 || (size_t)id >= vocab_->size()) return false;
  if (vocab_->is_eog(id)) return complete();
  const std::string& b = vocab_->bytes(id);
  return !b.empty() && m_.walk(state_, b) != GrammarMatcher::kDead;
}

bool GrammarConstraint::allows(int32_t id) {
  const bool ok = fits(id);
  refused_ = 0.75f * refused_ + (ok ? 0.0f : 0.25f);
  return ok;
}

void GrammarConstraint::accept(int32_t id) {
  if (!fits(id)) fail("grammar: token {} does not continue the constrained output", id);
  if (vocab_->is_eog(id))
    ended_ = true;
  else
    state_ = m_.walk(state_, vocab_->bytes(id));
}

void GrammarConstraint::compute_mask(Mask& mk) {
  const TokenVocab& v = *vocab_;
  mk.bits.assign((v.size() + 63) / 64, 0);
  mk.count = 0;
  auto set = [&](int32_t id) {
    mk.bits[(size_t)id >> 6] |= uint64_t{1} << (id & 63);
    ++mk.count;
  };
  if (!ended_) {
    const auto& trie = v.trie();
    const auto& toks = v.trie_tokens();
    path_.resize(v.max_depth() + 1);
    path_[0] = state_;
    for (uint32_t i = 0; i < trie.size();) {
      const TokenVocab::TrieNode& n = trie[i];
      const GrammarMatcher::State s = m_.step(path_[n.depth - 1], n.byte);
      if (s == GrammarMatcher::kDead) {
        i = n.end;  // no token under this prefix can come next
        continue;
      }
      path_[n.depth] = s;
      for (uint32_t k = n.tok_begin; k < n.tok_end; ++k) set(toks[k]);
      ++i;
    }
    if (complete())
      for (int32_t id : v.eog()) set(id);
  }
}

const GrammarConstraint::Mask& GrammarConstraint::current_mask() {
  // After the end nothing is allowed; that mask is not cached under any state.
  if (ended_) {
    static const Mask none;
    return none;
  }
  auto it = masks_.find(state_);
  if (it != masks_.end()) return it->second;
  if (masks_.size() >= kMaxCachedMasks) masks_.clear();
  Mask& mk = masks_[state_];
  compute_mask(mk);
  return mk;
}

const std::vector<uint64_t>& GrammarConstraint::allowed_bits() {
  const Mask& mk = current_mask();
  if (mk.bits.empty()) {
    static thread_local std::vector<uint64_t> none;
    none.assign((vocab_->size() + 63) / 64, 0);
    return none;
  }
  return mk.bits;
}

size_t GrammarConstraint::mask(std::span<float> logits) {
  const Mask& mk = current_mask();
  constexpr float kNo = -std::numeric_limits<float>::infinity();
  // By 64-token words: most words of a mask are all allowed (inside a string) or all refused
  // (between values), and those take one fill or nothing instead of 64 bit tests.
  const size_t n = logits.size();
  for (size_t base = 0; base < n; base += 64) {
    const size_t w = base >> 6, len = std::min<size_t>(64, n - base);
    const uint64_t allowed = w < mk.bits.size() ? mk.bits[w] : 0;
    if (allowed == ~uint64_t{0}) continue;
    if (allowed == 0) {
      std::fill_n(logits.begin() + base, len, kNo);
      continue;
    }
    for (size_t k = 0; k < len; ++k)
      if (!((allowed >> k) & 1)) logits[base + k] = kNo;
  }
  return mk.count;
}

}  // namespace moeflow
