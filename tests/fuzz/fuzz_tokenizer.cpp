// fuzz-link: moeflow_gguf moeflow_tokenizer
// The tokenizers on arbitrary bytes, with the real vocabularies of ../shared/data (loaded once).
//
// Input: byte 0 picks the tokenizer (kVocabs below: SentencePiece, and byte-level BPE with each
// pre-tokenizer moeflow knows -- the vocabularies' own, and GPT-2's vocabulary relabelled with
// the pre-tokenizers no shipped vocabulary uses, plus an unknown name, which falls back to
// GPT-2's); byte 1 holds flags; the rest is the text, or with kIdsFlag little-endian uint16
// token ids to decode.
//
// Properties (a violation aborts, libFuzzer saves the input):
//   * encode never throws, every id is inside the vocabulary;
//   * decode of any id list and the stream decoder never throw for ids in the vocabulary and
//     throw moeflow::Error for ids outside it; the stream decoder's output is valid UTF-8 and,
//     flushed, equals decode() (up to SentencePiece's dropped leading space);
//   * byte-level BPE round-trips valid UTF-8 exactly: decode(encode(text)) == text, with and
//     without special-token parsing; so does SentencePiece when parse_special is off and the
//     text has neither U+2581 (which SentencePiece decodes as a space by design) nor a
//     user-defined token (after which a new space prefix starts, as in llama.cpp).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/error.h"
#include "fuzz_util.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

using namespace moeflow;

namespace {

struct VocabSpec {
  const char* file;     // ggml-vocab-<file>.gguf
  const char* relabel;  // nullptr: the file's own tokenizer.ggml.pre; else this one
};

// Keep the order: the committed seed corpus (tests/fuzz/corpus/tokenizer) selects by index.
constexpr VocabSpec kVocabs[] = {
    {"llama-spm", nullptr},       // 0 SentencePiece, byte fallback
    {"phi-3", nullptr},           // 1 SentencePiece with control and user-defined tokens
    {"gpt-2", nullptr},           // 2 BPE, pre gpt-2
    {"gpt-neox", nullptr},        // 3 BPE, no pre (default), control tokens
    {"dbrx", nullptr},            // 4 BPE, pre dbrx (Llama-3 regex, merges applied)
    {"deepseek-llm", nullptr},    // 5 BPE, pre deepseek-llm (six regexes)
    {"deepseek-coder", nullptr},  // 6 BPE, pre deepseek-coder
    {"gpt-2", "starcoder"},       // 7 digits split first
    {"gpt-2", "llama-bpe"},       // 8 Llama-3 regex with ignore_merges
    {"gpt-2", "qwen2"},           // 9 Qwen2 regex
    {"gpt-2", "deepseek-v3"},     // 10 DeepSeek-V3 regexes
    {"gpt-2", "no-such-pre"},     // 11 unknown name: GPT-2 fallback with a warning
    {"gpt-2", "gpt-4o"},          // 12 o200k regex (gpt-oss) with ignore_merges
    {"gpt-2", "glm4"},            // 13 GLM-4 regex with ignore_merges
};
constexpr size_t kNumVocabs = sizeof(kVocabs) / sizeof(kVocabs[0]);

constexpr uint8_t kAddBosFlag = 1, kParseSpecialFlag = 2, kIdsFlag = 4, kSpecialPiecesFlag = 8;

struct Loaded {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};
std::vector<Loaded>* g_vocabs = nullptr;

// The file's metadata with tokenizer.ggml.pre replaced, as a new (tensor-less) GGUF.
std::unique_ptr<GgufFile> relabelled(const GgufFile& src, const std::string& pre) {
  GgufWriter w;
  for (const GgufKV& kv : src.metadata()) w.set(kv.key, kv.value);
  w.set_string("tokenizer.ggml.pre", pre);
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("moeflow_fuzz_vocab_" + pre + "_" + std::to_string(::getpid()) + ".gguf"))
          .string();
  w.write(path);
  auto f = GgufFile::open(path);
  std::filesystem::remove(path);  // the mapping keeps the data
  return f;
}

bool valid_utf8(const std::string& s) {
  for (size_t pos = 0; pos < s.size();) {
    const size_t st = pos;
    const uint32_t cp = unicode::decode_one(s, pos);
    if (cp == unicode::kReplacement && s.compare(st, 3, "\xEF\xBF\xBD") != 0) return false;
  }
  return true;
}

void check_decoders(const Tokenizer& tok, const std::vector<int32_t>& ids, bool special) {
  std::string whole;
  bool in_range = true;
  for (int32_t id : ids) in_range = in_range && id >= 0 && id < tok.n_vocab();
  try {
    whole = tok.decode(ids, special);
    FUZZ_CHECK(in_range, "decode accepted an id outside the vocabulary");
  } catch (const Error&) {
    FUZZ_CHECK(!in_range, "decode threw for ids inside the vocabulary");
    return;
  }
  StreamDecoder sd(tok, special);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string part = sd.push(id);
    FUZZ_CHECK(valid_utf8(part), "stream decoder printed invalid UTF-8");
    streamed += part;
  }
  const std::string rest = sd.flush();
  FUZZ_CHECK(valid_utf8(rest), "stream decoder flushed invalid UTF-8");
  streamed += rest;
  // The stream keeps SentencePiece's prefix space, decode() drops it; the stream replaces
  // broken UTF-8 with U+FFFD, decode() passes the bytes through.
  if (valid_utf8(whole)) {
    const bool spm_space =
        tok.model() == "llama" && streamed.size() == whole.size() + 1 && streamed[0] == ' ';
    FUZZ_CHECK(
        streamed == whole || (spm_space && streamed.compare(1, std::string::npos, whole) == 0),
        "stream decoder and decode() disagree");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = fuzz::shared_data_dir() + "/tokenizers/llamacpp_vocab";
  g_vocabs = new std::vector<Loaded>();
  try {
    for (const VocabSpec& v : kVocabs) {
      Loaded l;
      l.file = GgufFile::open(dir + "/ggml-vocab-" + v.file + ".gguf");
      if (v.relabel) l.file = relabelled(*l.file, v.relabel);
      l.tok = Tokenizer::from_gguf(*l.file);
      g_vocabs->push_back(std::move(l));
    }
  } catch (const Error& e) {
    // No vocabularies, no fuzzing: a failure, never a quiet pass (MOEFLOW_SHARED_DATA to point
    // elsewhere).
    std::fprintf(stderr, "fuzz_tokenizer: cannot load the real vocabularies: %s\n", e.what());
    std::exit(2);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const Tokenizer& tok = *(*g_vocabs)[data[0] % kNumVocabs].tok;
  const uint8_t flags = data[1];
  const bool special = flags & kSpecialPiecesFlag;
  if (flags & kIdsFlag) {
    std::vector<int32_t> ids;
    for (size_t i = 2; i + 1 < size; i += 2) {
      const uint32_t v = data[i] | (uint32_t(data[i + 1]) << 8);
      // Mostly ids of this vocabulary, now and then one just outside either end.
      ids.push_back(v == 0xFFFF   ? -1
                    : v == 0xFFFE ? tok.n_vocab()
                                  : static_cast<int32_t>(v % tok.n_vocab()));
    }
    check_decoders(tok, ids, special);
    return 0;
  }
  const std::string text(reinterpret_cast<const char*>(data) + 2, size - 2);
  const bool add_bos = flags & kAddBosFlag, parse_special = flags & kParseSpecialFlag;
  const std::vector<int32_t> ids = tok.encode(text, add_bos, parse_special);
  for (int32_t id : ids)
    FUZZ_CHECK(id >= 0 && id < tok.n_vocab(), "encode gave an id outside the vocabulary");
  check_decoders(tok, ids, special);

  if (valid_utf8(text)) {
    const std::vector<int32_t> plain = tok.encode(text, false, parse_special);
    if (tok.model() == "gpt2") {
      FUZZ_CHECK(tok.decode(plain, true) == text, "BPE does not round-trip valid UTF-8");
    } else if (!parse_special && text.find("\xE2\x96\x81") == std::string::npos) {
      // A user-defined token (always matched) is followed by a fresh space prefix, as in
      // llama.cpp; the round trip holds for text without one.
      bool user_defined = false;
      for (int32_t id : plain)
        user_defined = user_defined || tok.token_type(id) == TokenType::UserDefined;
      if (!user_defined)
        FUZZ_CHECK(tok.decode(plain, true) == text,
                   "SentencePiece does not round-trip valid UTF-8");
    }
  }
  return 0;
}
