#pragma once
// llama.cpp tokenizer test vectors: FILE.inp holds inputs separated by
// "\n__ggml_vocab_test__\n", FILE.out one line of expected ids per input (encoded without
// BOS and without parsing special tokens).
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace moeflow {

struct VocabVector {
  std::string input;
  std::vector<int32_t> expected;
};

// Throws moeflow::Error naming the file if it cannot be read or the counts disagree.
std::vector<VocabVector> load_vocab_vectors(const std::string& inp_path,
                                            const std::string& out_path);

struct VocabVectorResult {
  size_t passed = 0, total = 0;
  std::vector<size_t> failed;  // indices into the vector list
};
VocabVectorResult check_vocab_vectors(const Tokenizer& tok, const std::vector<VocabVector>& v);

std::string format_ids(const std::vector<int32_t>& ids);

}  // namespace moeflow
