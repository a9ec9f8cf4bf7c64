#pragma once
// The text a scoring command (perplexity, calibrate) reads, tokenized the way llama.cpp's
// perplexity tool does: the whole file at once, BOS added, special-token text not parsed.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace moeflow::cli {

inline std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) fail("-f: '{}' is not a readable file", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("-f: cannot open '{}'", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    fail("-f: '{}' contains no text", path);
  return text;
}

struct ScoringTokens {
  std::vector<int32_t> tokens;
  int32_t bos_id = -1;  // >= 0 when the vocabulary adds BOS (each chunk starts with it)
};

inline ScoringTokens tokenize_for_scoring(const GgufFile& file, const std::string& text,
                                          const char* command) {
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = Tokenizer::from_gguf(file);
  } catch (const Error& e) {
    fail("{} needs the model's tokenizer to read text: {}", command, e.what());
  }
  if (!tok->warning().empty())
    std::fprintf(stderr, "moeflow: warning: %s\n", tok->warning().c_str());
  // llama.cpp refuses such vocabularies too: an EOS appended to the text would be scored.
  if (tok->add_eos_token())
    fail("{}: the vocabulary appends EOS to every text (add_eos_token)", command);
  ScoringTokens st;
  st.tokens = tok->encode(text, true, false);
  st.bos_id = tok->add_bos_token() ? tok->bos_id() : -1;
  return st;
}

}  // namespace moeflow::cli
