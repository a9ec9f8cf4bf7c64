#include "model/gen/gen_vocab.h"

#include <fmt/format.h>

#include <unordered_set>

#include "core/error.h"

namespace moeflow::gen {
namespace {

const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's word-start marker

}  // namespace

SynthVocab make_synth_vocab(int64_t n_vocab) {
  if (n_vocab < 260) fail("gen-model: vocabulary of {} tokens is too small (minimum 260)", n_vocab);
  SynthVocab v;
  v.tokens.reserve(n_vocab);
  auto add = [&](std::string piece, float score, int32_t type) {
    v.tokens.push_back(std::move(piece));
    v.scores.push_back(score);
    v.types.push_back(type);
  };
  add("<unk>", 0.0f, 2);
  add("<s>", 0.0f, 3);
  add("</s>", 0.0f, 3);
  for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 0.0f, 6);

  // Normal pieces: word-start marker, single printable characters, word-start + letter, letter
  // pairs; numbered filler once those run out (large vocabularies). Scores fall with rank so
  // that SentencePiece merging prefers the earlier, shorter pieces deterministically.
  std::vector<std::string> pieces;
  pieces.push_back(kSpace);
  for (char c = 33; c < 127; ++c) pieces.emplace_back(1, c);
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
  for (char c : letters) pieces.push_back(kSpace + c);
  for (char a : letters)
    for (char b : letters) pieces.push_back(std::string{a, b});
  for (char a : letters)
    for (char b : letters) pieces.push_back(kSpace + a + b);
  std::unordered_set<std::string> seen(pieces.begin(), pieces.end());
  int64_t next = (int64_t)v.tokens.size();
  size_t p = 0;
  int64_t filler = 0;
  while (next < n_vocab) {
    std::string piece;
    if (p < pieces.size()) {
      piece = pieces[p++];
    } else {
      do {
        piece = fmt::format("{}w{}", kSpace, filler++);
      } while (seen.count(piece));
    }
    add(std::move(piece), -(float)(next - 259), 1);
    ++next;
  }
  return v;
}

}  // namespace moeflow::gen
