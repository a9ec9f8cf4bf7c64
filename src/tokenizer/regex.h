#pragma once
// A small backtracking regex engine over Unicode code points, just large enough for the
// pre-tokenizer patterns of GGUF vocabularies (GPT-2, Llama-3, Qwen2, DeepSeek, ...).
// Why not std::regex: it has no \p{L}/\p{N} and is slow. Why not PCRE: no extra dependency.
//
// Supported: literals, '.', [...] classes with ranges and escapes, \s \S \d \D \w \W,
// \p{X} / \P{X} (general categories and major classes: L Lu Ll Lt Lm Lo M N Nd P S Z C ...),
// \r \n \t \f \v \xHH \uHHHH, groups (...) (?:...) (?i:...), lookahead (?=...) (?!...),
// anchors ^ $, alternation, greedy ? * + {m} {m,} {m,n}. Alternation is ordered (first
// alternative that leads to a match wins), as in PCRE/Oniguruma.
// Malformed or unsupported patterns throw moeflow::Error quoting the pattern.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moeflow {

class Regex {
 public:
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // End of the match that starts exactly at `pos` in s[0, n), or -1 if none matches there.
  // A successful empty match returns pos.
  long match_at(const uint32_t* s, size_t n, size_t pos) const;

  // Splits s[begin, end) like HuggingFace's Split(behavior="isolated"): every non-empty
  // match becomes a piece and so does every gap between matches. Appends (start, end) pairs.
  void split(const uint32_t* s, size_t begin, size_t end,
             std::vector<std::pair<size_t, size_t>>& out) const;

  const std::string& pattern() const { return pattern_; }

  struct Node;

 private:
  std::string pattern_;
  std::unique_ptr<Node> root_;
};

}  // namespace moeflow
