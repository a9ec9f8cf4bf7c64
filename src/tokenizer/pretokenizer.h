#pragma once
// Byte-level BPE pre-tokenization: splits text into words with the regex sequence that the
// vocabulary's tokenizer.ggml.pre names. Each regex of the sequence further splits every
// piece produced by the previous one (HuggingFace Sequence of Split(isolated)).
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace moeflow {

class PreTokenizer {
 public:
  // Throws moeflow::Error for an unknown name when `strict`; otherwise falls back to the
  // GPT-2 pattern (known() then returns false so callers can warn).
  explicit PreTokenizer(const std::string& pre_name, bool strict = false);

  // The UTF-8 words of `text`, in order; their concatenation is `text` (invalid UTF-8
  // bytes come back as U+FFFD).
  std::vector<std::string> split(std::string_view text) const;

  bool known() const { return known_; }
  // The regexes for a pre name (empty if unknown).
  static std::vector<std::string> patterns_for(const std::string& pre_name);
  // Whether BPE should look up a whole word in the vocabulary before merging (HF BPE
  // ignore_merges, set by Llama-3 style tokenizers).
  bool ignore_merges() const { return ignore_merges_; }

 private:
  std::vector<Regex> regexes_;
  bool known_ = true;
  bool ignore_merges_ = false;
};

}  // namespace moeflow
