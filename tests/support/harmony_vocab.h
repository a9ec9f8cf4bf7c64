#pragma once
// A byte-level vocabulary with harmony's control tokens (gpt-oss's format without its 200k
// tokens): 256 byte tokens, one per byte, then the controls, so every character arrives byte by
// byte. Written into a GGUF by the tokenizer tests and into a generated gpt-oss by the server's.
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf_writer.h"
#include "tokenizer/unicode.h"

namespace moeflow::test {

// `call`: with <|call|> (without it the vocabulary is not harmony's).
inline void set_harmony_byte_vocab(GgufWriter& w, bool call = true) {
  std::vector<std::string> toks;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    unicode::append_utf8(s, unicode::byte_to_cp((uint8_t)b));
    toks.push_back(s);
    types.push_back(1);
  }
  for (const char* s : {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                        "<|return|>", "<|call|>", "<|endoftext|>"}) {
    if (!call && std::string(s) == "<|call|>") continue;
    toks.push_back(s);
    types.push_back(3);
  }
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "gpt-4o");
  w.set("tokenizer.ggml.tokens", GgufValue::make_string_array(toks));
  w.set("tokenizer.ggml.token_type", GgufValue::make_i32_array(types));
  w.set("tokenizer.ggml.merges", GgufValue::make_string_array({}));
  w.set_bool("tokenizer.ggml.add_bos_token", false);
}

}  // namespace moeflow::test
