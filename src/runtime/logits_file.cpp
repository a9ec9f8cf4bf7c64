#include "runtime/logits_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"

namespace moeflow {

namespace {

constexpr char kMagic[8] = {'M', 'F', 'L', 'O', 'G', 'I', 'T', 'S'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxString = 4096;

template <typename T>
void put(std::FILE* f, const T& v, const std::string& path) {
  if (std::fwrite(&v, sizeof v, 1, f) != 1) fail("--save-logits: write to '{}' failed", path);
}

void put_string(std::FILE* f, const std::string& s, const std::string& path) {
  const uint32_t n = (uint32_t)std::min<size_t>(s.size(), kMaxString);
  put(f, n, path);
  if (n && std::fwrite(s.data(), 1, n, f) != n) fail("--save-logits: write to '{}' failed", path);
}

template <typename T>
T get(std::FILE* f, const std::string& path) {
  T v;
  if (std::fread(&v, sizeof v, 1, f) != 1)
    fail("--kl-divergence: '{}' is truncated (header incomplete)", path);
  return v;
}

std::string get_string(std::FILE* f, const std::string& path) {
  const uint32_t n = get<uint32_t>(f, path);
  if (n > kMaxString) fail("--kl-divergence: '{}' is not a moeflow logits file (bad header)", path);
  std::string s(n, '\0');
  if (n && std::fread(s.data(), 1, n, f) != n)
    fail("--kl-divergence: '{}' is truncated (header incomplete)", path);
  return s;
}

}  // namespace

uint64_t vocab_fingerprint(const std::vector<std::string>& tokens) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](unsigned char c) {
    h ^= c;
    h *= 1099511628211ull;
  };
  for (const std::string& t : tokens) {
    for (char c : t) mix((unsigned char)c);
    mix(0);
  }
  return h;
}

std::string model_shape_string(const std::string& arch, int n_layer, int64_t n_embd, int n_expert,
                               int64_t n_vocab) {
  return fmt::format("{} n_layer={} n_embd={} n_expert={} n_vocab={}", arch, n_layer, n_embd,
                     n_expert, n_vocab);
}

LogitsFileWriter::LogitsFileWriter(const std::string& path, const LogitsFileHeader& h)
    : path_(path), expected_(h.n_rows), n_vocab_(h.n_vocab) {
  if (h.tokens.size() != (size_t)h.n_chunks * h.n_ctx)
    fail("--save-logits: {} tokens for {} chunks of {}", h.tokens.size(), h.n_chunks, h.n_ctx);
  f_.reset(std::fopen(path.c_str(), "wb"));
  if (!f_) fail("--save-logits: cannot open '{}' for writing: {}", path, std::strerror(errno));
  if (std::fwrite(kMagic, 1, sizeof kMagic, f_.get()) != sizeof kMagic)
    fail("--save-logits: write to '{}' failed", path);
  put(f_.get(), kVersion, path);
  put(f_.get(), h.n_vocab, path);
  put(f_.get(), h.n_ctx, path);
  put(f_.get(), h.n_chunks, path);
  put(f_.get(), h.first, path);
  put(f_.get(), h.n_rows, path);
  put(f_.get(), h.vocab_hash, path);
  put_string(f_.get(), h.shape, path);
  put_string(f_.get(), h.model_name, path);
  if (std::fwrite(h.tokens.data(), sizeof(int32_t), h.tokens.size(), f_.get()) != h.tokens.size())
    fail("--save-logits: write to '{}' failed", path);
}

LogitsFileWriter::~LogitsFileWriter() = default;

void LogitsFileWriter::write_row(std::span<const float> logits) {
  if (logits.size() != n_vocab_)
    fail("--save-logits: row of {} logits, expected {}", logits.size(), n_vocab_);
  if (written_ == expected_) fail("--save-logits: more rows than the {} announced", expected_);
  if (std::fwrite(logits.data(), sizeof(float), logits.size(), f_.get()) != logits.size())
    fail("--save-logits: write to '{}' failed (disk full?)", path_);
  ++written_;
}

void LogitsFileWriter::finish() {
  if (written_ != expected_)
    fail("--save-logits: {} rows written to '{}', {} announced", written_, path_, expected_);
  if (std::fclose(f_.release()) != 0) fail("--save-logits: closing '{}' failed", path_);
}

LogitsFileReader::LogitsFileReader(const std::string& path) : path_(path) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) fail("--kl-divergence: cannot read '{}': {}", path, ec.message());
  f_.reset(std::fopen(path.c_str(), "rb"));
  if (!f_) fail("--kl-divergence: cannot open '{}': {}", path, std::strerror(errno));
  char magic[8];
  if (std::fread(magic, 1, 8, f_.get()) != 8 || std::memcmp(magic, kMagic, 8) != 0)
    fail("--kl-divergence: '{}' is not a moeflow logits file (write one with --save-logits)", path);
  const uint32_t version = get<uint32_t>(f_.get(), path);
  if (version != kVersion)
    fail("--kl-divergence: '{}' has format version {}, this moeflow reads {}", path, version,
         kVersion);
  h_.n_vocab = get<uint32_t>(f_.get(), path);
  h_.n_ctx = get<uint32_t>(f_.get(), path);
  h_.n_chunks = get<uint32_t>(f_.get(), path);
  h_.first = get<uint32_t>(f_.get(), path);
  h_.n_rows = get<uint64_t>(f_.get(), path);
  h_.vocab_hash = get<uint64_t>(f_.get(), path);
  h_.shape = get_string(f_.get(), path);
  h_.model_name = get_string(f_.get(), path);
  if (h_.n_vocab == 0 || h_.n_ctx < 3 || h_.first >= h_.n_ctx ||
      h_.n_rows != (uint64_t)h_.n_chunks * (h_.n_ctx - h_.first - 1))
    fail(
        "--kl-divergence: '{}' has an inconsistent header (n_vocab {}, n_ctx {}, {} chunks, {} "
        "rows)",
        path, h_.n_vocab, h_.n_ctx, h_.n_chunks, h_.n_rows);
  const uint64_t n_tok = (uint64_t)h_.n_chunks * h_.n_ctx;
  // Bounds first, so that the size arithmetic below cannot overflow on a corrupt header.
  if (n_tok > size / 4 || h_.n_rows > size / (4ull * h_.n_vocab))
    fail(
        "--kl-divergence: '{}' is {} bytes, too short for its header ({} rows of {} logits): "
        "truncated or not a complete --save-logits file",
        path, size, h_.n_rows, h_.n_vocab);
  const uint64_t header = 8 + 4 * 7 + 8 * 2 + h_.shape.size() + h_.model_name.size();
  const uint64_t want = header + n_tok * 4 + h_.n_rows * h_.n_vocab * 4;
  if (size != want)
    fail(
        "--kl-divergence: '{}' is {} bytes, its header describes {} ({} rows of {} logits): "
        "truncated or not written to the end",
        path, size, want, h_.n_rows, h_.n_vocab);
  h_.tokens.resize(n_tok);
  if (std::fread(h_.tokens.data(), 4, n_tok, f_.get()) != n_tok)
    fail("--kl-divergence: '{}' is truncated (tokens)", path);
  row_.resize(h_.n_vocab);
}

LogitsFileReader::~LogitsFileReader() = default;

void LogitsFileReader::check_matches(const LogitsFileHeader& now) const {
  const std::string p = "--kl-divergence: '" + path_ + "'";
  if (h_.n_vocab != now.n_vocab)
    fail("{} holds logits over {} tokens, this model's vocabulary has {}", p, h_.n_vocab,
         now.n_vocab);
  if (h_.vocab_hash != now.vocab_hash)
    fail("{} was written with another vocabulary (same size {}, different tokens)", p, now.n_vocab);
  if (h_.shape != now.shape)
    fail("{} comes from a model of another shape ({}), this one is {}", p, h_.shape, now.shape);
  if (h_.n_ctx != now.n_ctx || h_.n_chunks != now.n_chunks)
    fail(
        "{} scored {} chunks of {} tokens, this run {} chunks of {}: use the same -f, -c and "
        "--chunks",
        p, h_.n_chunks, h_.n_ctx, now.n_chunks, now.n_ctx);
  for (size_t i = 0; i < h_.tokens.size(); ++i)
    if (h_.tokens[i] != now.tokens[i])
      fail("{} was computed on another text: token {} (chunk {}, position {}) is {} there, {} here",
           p, i, i / h_.n_ctx, i % h_.n_ctx, h_.tokens[i], now.tokens[i]);
}

std::span<const float> LogitsFileReader::next_row() {
  if (read_ == h_.n_rows) fail("--kl-divergence: '{}' has only {} rows", path_, h_.n_rows);
  if (std::fread(row_.data(), sizeof(float), row_.size(), f_.get()) != row_.size())
    fail("--kl-divergence: '{}' is truncated at row {}", path_, read_);
  ++read_;
  return row_;
}

}  // namespace moeflow
