#pragma once
// A minimal SentencePiece-style ("llama") vocabulary of any size >= 260, enough for llama.cpp
// to load the model and for a tokenizer to round-trip text: <unk>, <s>, </s>, the 256 byte
// fallback tokens <0x00>..<0xFF>, then printable pieces with decreasing scores.
#include <cstdint>
#include <string>
#include <vector>

namespace moeflow::gen {

struct SynthVocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;  // llama.cpp token types: 1 normal, 2 unknown, 3 control, 6 byte
  int32_t unk_id = 0, bos_id = 1, eos_id = 2;
};

SynthVocab make_synth_vocab(int64_t n_vocab);

}  // namespace moeflow::gen
