#pragma once
#include <filesystem>
#include <memory>
#include <string>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace moeflow::test {

inline std::string vocab_dir() { return std::string(MOEFLOW_SHARED_DATA) + "/tokenizers/llamacpp_vocab"; }

struct LoadedVocab {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};

// Opens ggml-vocab-NAME.gguf; returns an empty result (caller skips) if the data is absent.
inline LoadedVocab load_vocab(const std::string& name) {
  const std::string path = vocab_dir() + "/ggml-vocab-" + name + ".gguf";
  LoadedVocab v;
  if (!std::filesystem::exists(path)) return v;
  v.file = GgufFile::open(path);
  v.tok = Tokenizer::from_gguf(*v.file);
  return v;
}

}  // namespace moeflow::test
