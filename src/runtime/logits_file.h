#pragma once
// The saved logits of an exact perplexity run (`moeflow perplexity --save-logits`), read back
// by `--kl-divergence` to measure how far a lossy run is from it. Only the scored rows are
// kept, as raw float32 logits, so a run compared with its own file gives KL exactly 0.
//
// Layout (little-endian, as written by the host):
//   char[8]  "MFLOGITS"            u32 version (1)
//   u32 n_vocab   u32 n_ctx   u32 n_chunks   u32 first   u64 n_rows
//   u64 vocab_hash                 FNV-1a of the vocabulary strings
//   u32 len + bytes  model shape   "arch n_layer=.. n_embd=.. n_expert=.. n_vocab=.."
//   u32 len + bytes  model name    general.name or the file name (for messages only)
//   i32[n_chunks * n_ctx]          the tokens each chunk was evaluated with
//   f32[n_rows * n_vocab]          logits of the scored rows, in order
// A file is accepted only when vocabulary, shape, n_ctx, chunk count and every token match:
// the KL divergence of two runs is meaningful only over the same positions of the same text.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace moeflow {

class GgufFile;

struct LogitsFileHeader {
  uint32_t n_vocab = 0, n_ctx = 0, n_chunks = 0, first = 0;
  uint64_t n_rows = 0;
  uint64_t vocab_hash = 0;
  std::string shape, model_name;
  std::vector<int32_t> tokens;
};

// FNV-1a over the vocabulary strings (each followed by a 0 byte).
uint64_t vocab_fingerprint(const std::vector<std::string>& tokens);
// "arch n_layer=.. n_embd=.. n_expert=.. n_vocab=..": what a lossy mode never changes.
std::string model_shape_string(const std::string& arch, int n_layer, int64_t n_embd, int n_expert,
                               int64_t n_vocab);

// Closes on every path, including a constructor that throws half-way.
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

class LogitsFileWriter {
 public:
  // Throws moeflow::Error if the file cannot be created.
  LogitsFileWriter(const std::string& path, const LogitsFileHeader& h);
  ~LogitsFileWriter();
  void write_row(std::span<const float> logits);
  // Checks that every announced row was written and closes; throws on a short or failed write.
  void finish();

 private:
  std::string path_;
  FilePtr f_;
  uint64_t expected_ = 0, written_ = 0;
  uint32_t n_vocab_ = 0;
};

class LogitsFileReader {
 public:
  // Reads and validates the header and the file size; throws moeflow::Error naming the path.
  explicit LogitsFileReader(const std::string& path);
  ~LogitsFileReader();
  const LogitsFileHeader& header() const { return h_; }
  // Throws a clear error naming the first difference between this file and the run `now`.
  void check_matches(const LogitsFileHeader& now) const;
  // The next saved row (n_vocab floats, valid until the next call).
  std::span<const float> next_row();

 private:
  std::string path_;
  FilePtr f_;
  LogitsFileHeader h_;
  uint64_t read_ = 0;
  std::vector<float> row_;
};

}  // namespace moeflow
