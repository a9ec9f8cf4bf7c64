#pragma once
// What every token of a vocabulary writes, as bytes, and the same strings as a byte trie laid
// out in preorder: one pass over the array visits every token, and a prefix no token may start
// with is skipped with all the tokens under it (grammar/grammar_constraint.h). Built once per
// vocabulary and shared by every constrained request.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moeflow {

class Tokenizer;

class TokenVocab {
 public:
  struct TrieNode {
    uint8_t byte;        // the edge from the parent
    uint16_t depth;      // 1 for a child of the root (the tokens' first byte)
    uint32_t end;        // index just past this node's subtree
    uint32_t tok_begin;  // the tokens whose bytes end here: trie_tokens()[tok_begin, tok_end)
    uint32_t tok_end;
  };

  // bytes[id]: what token id writes; "" for one that writes no text (control tokens), which a
  // grammar never allows. eog: the end-of-generation tokens, allowed once the grammar is complete.
  TokenVocab(std::vector<std::string> bytes, std::vector<int32_t> eog);
  // From a model's tokenizer: token_to_piece of every token; control, unknown and unused tokens
  // write nothing.
  static std::shared_ptr<const TokenVocab> from_tokenizer(const Tokenizer& tok);

  size_t size() const { return bytes_.size(); }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  bool is_eog(int32_t id) const { return id >= 0 && (size_t)id < size() && eog_flag_[id]; }
  const std::vector<int32_t>& eog() const { return eog_; }
  const std::vector<TrieNode>& trie() const { return trie_; }
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }
  size_t max_depth() const { return max_depth_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> eog_;
  std::vector<char> eog_flag_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_tokens_;
  size_t max_depth_ = 0;
};

}  // namespace moeflow
