#include "grammar/token_vocab.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace moeflow {

TokenVocab::TokenVocab(std::vector<std::string> bytes, std::vector<int32_t> eog)
    : bytes_(std::move(bytes)), eog_flag_(bytes_.size(), 0) {
  for (int32_t id : eog)
    if (id >= 0 && (size_t)id < bytes_.size() && !eog_flag_[id]) {
      eog_flag_[id] = 1;
      eog_.push_back(id);
    }
  // Sorted byte strings give the preorder directly: a string's new nodes start after its common
  // prefix with the one before, and equal strings (a byte-fallback token and a normal token of
  // one byte) end at the same node, one after the other.
  std::vector<int32_t> order;
  for (size_t i = 0; i < bytes_.size(); ++i)
    if (!bytes_[i].empty() && !eog_flag_[i]) order.push_back((int32_t)i);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes_[a] < bytes_[b] || (bytes_[a] == bytes_[b] && a < b);
  });
  if (bytes_.size() > UINT32_MAX / 2) fail("token vocabulary too large");
  std::vector<uint32_t> open;  // open[d - 1]: the node at depth d on the current path
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = bytes_[id];
    if (s.size() > UINT16_MAX) fail("token {} is longer than {} bytes", id, UINT16_MAX);
    size_t common = 0;
    if (prev)
      while (common < std::min(s.size(), prev->size()) && s[common] == (*prev)[common]) ++common;
    while (open.size() > common) {
      trie_[open.back()].end = (uint32_t)trie_.size();
      open.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      open.push_back((uint32_t)trie_.size());
      const uint32_t t = (uint32_t)trie_tokens_.size();
      trie_.push_back({(uint8_t)s[d], (uint16_t)(d + 1), 0, t, t});
    }
    trie_[open.back()].tok_end = (uint32_t)trie_tokens_.size() + 1;
    trie_tokens_.push_back(id);
    max_depth_ = std::max(max_depth_, s.size());
    prev = &s;
  }
  for (uint32_t n : open) trie_[n].end = (uint32_t)trie_.size();
}

std::shared_ptr<const TokenVocab> TokenVocab::from_tokenizer(const Tokenizer& tok) {
  std::vector<std::string> bytes(tok.n_vocab());
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    const TokenType t = tok.token_type(id);
    if (t == TokenType::Control || t == TokenType::Unknown || t == TokenType::Unused) continue;
    bytes[id] = tok.token_to_piece(id);
  }
  return std::make_shared<const TokenVocab>(std::move(bytes), tok.eog_ids());
}

}  // namespace moeflow
