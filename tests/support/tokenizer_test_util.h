#pragma once
#include <filesystem>
#include <memory>
#include <string>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "support/require_data.h"
#include "tokenizer/tokenizer.h"

namespace moeflow::test {

inline std::string vocab_dir() {
  return std::string(MOEFLOW_SHARED_DATA) + "/tokenizers/llamacpp_vocab";
}

inline std::string vocab_path(const std::string& name) {
  return vocab_dir() + "/ggml-vocab-" + name + ".gguf";
}

// The vocabularies newer than the shared data (qwen35, gemma-4), with their .inp/.out:
// scripts/setup-deps.sh extracts them from the llama-cpp-python sdist into .deps/.
inline std::string deps_vocab_path(const std::string& name) {
  return std::string(MOEFLOW_SOURCE_DIR) + "/.deps/llamacpp_vocab/ggml-vocab-" + name + ".gguf";
}

struct LoadedVocab {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};

// Opens ggml-vocab-NAME.gguf (throws naming the file if it is missing: callers first say
// MOEFLOW_REQUIRE_PATH(vocab_path(NAME)), which skips outside CI and fails under CI).
inline LoadedVocab load_vocab(const std::string& name) {
  LoadedVocab v;
  v.file = GgufFile::open(vocab_path(name));
  v.tok = Tokenizer::from_gguf(*v.file);
  return v;
}

}  // namespace moeflow::test
