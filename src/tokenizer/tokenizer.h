#pragma once
// Tokenizers built from GGUF metadata (tokenizer.ggml.*), following llama.cpp's conventions:
//   tokenizer.ggml.model = "llama" -> SentencePiece (scores, <0xXX> byte fallback, "▁" spaces)
//   tokenizer.ggml.model = "gpt2"  -> byte-level BPE (merges + pre-tokenizer regexes by
//                                     tokenizer.ggml.pre)
//   tokenizer.ggml.model = "gemma4" -> BPE over characters with "▁" spaces and <0xXX> byte
//                                     fallback (Gemma 4)
//
// Typical engine use:
//   auto tok = Tokenizer::from_gguf(gguf);
//   std::vector<int32_t> ids = tok->encode(prompt, /*add_bos=*/true, /*parse_special=*/true);
//   StreamDecoder out(*tok);
//   for each generated id: if (tok->is_eog(id)) break; fputs(out.push(id).c_str(), stdout);
//   fputs(out.flush().c_str(), stdout);
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace moeflow {

class GgufFile;

// Values of tokenizer.ggml.token_type.
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* from the file. Throws moeflow::Error naming the file and key if the
  // vocabulary is missing or malformed, or the tokenizer model is not supported.
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& f);
  virtual ~Tokenizer();

  // add_bos: add the special tokens the model asks for around a sequence (BOS if
  // tokenizer.ggml.add_bos_token, EOS if add_eos_token) -- pass true for a fresh prompt.
  // parse_special: text like "<|im_start|>" becomes its control token instead of being
  // spelt out; user-defined tokens are always matched (as llama.cpp does).
  std::vector<int32_t> encode(std::string_view text, bool add_bos = true,
                              bool parse_special = false) const;

  // The bytes a token stands for. Control tokens give "" unless `special`. May be an
  // incomplete UTF-8 sequence (byte tokens); use StreamDecoder to print token by token.
  std::string token_to_piece(int32_t id, bool special = false) const;
  // Whole-sequence decode. SentencePiece vocabularies drop the space that add_space_prefix
  // put in front of the first word.
  std::string decode(const std::vector<int32_t>& ids, bool special = false) const;

  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos_id() const { return bos_; }  // -1 if none
  int32_t eos_id() const { return eos_; }  // -1 if none
  int32_t unk_id() const { return unk_; }
  int32_t pad_id() const { return pad_; }
  bool add_bos_token() const { return add_bos_; }
  bool add_eos_token() const { return add_eos_; }
  // End of generation: EOS, EOT/EOM ids and the usual end-of-turn control tokens
  // (<|im_end|>, <|eot_id|>, <|end|>, ...).
  bool is_eog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const { return eog_; }

  const std::string& token_text(int32_t id) const;  // raw vocabulary string; throws if out of range
  TokenType token_type(int32_t id) const;
  std::optional<int32_t> find_token(std::string_view text) const;

  const std::string& model() const { return model_; }  // "llama", "gpt2" or "gemma4"
  const std::string& pre() const { return pre_; }
  // tokenizer.chat_template, or "" if the file has none.
  const std::string& chat_template() const { return chat_template_; }
  // A warning for the user, e.g. an unknown pre-tokenizer name replaced by GPT-2's; "" if none.
  const std::string& warning() const { return warning_; }

 protected:
  Tokenizer() = default;
  // Encodes one stretch of plain text (no special tokens inside). `first` is true for the
  // first text fragment of the input or one that follows a special token.
  virtual void encode_fragment(std::string_view text, bool after_special,
                               std::vector<int32_t>& out) const = 0;
  virtual std::string normal_piece(int32_t id) const = 0;
  virtual bool strips_leading_space() const { return false; }

  void load_common(const GgufFile& f);

  std::string model_, pre_, chat_template_, warning_, path_;
  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::unordered_map<std::string, int32_t> token_to_id_;
  std::vector<int32_t> specials_;  // control + user-defined, longest text first
  std::vector<int32_t> eog_;
  int32_t bos_ = -1, eos_ = -1, unk_ = -1, pad_ = -1;
  bool add_bos_ = false, add_eos_ = false;
};

// Turns a stream of token ids into printable UTF-8: bytes of a character split across
// tokens are held back until the character is complete. Invalid sequences are passed
// through as U+FFFD so nothing is held forever.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool special = false)
      : tok_(tok), special_(special) {}
  // Printable text completed by this token (possibly "").
  std::string push(int32_t id);
  // Whatever is still held back (an unfinished character becomes U+FFFD).
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool special_;
  std::string pending_;
};

}  // namespace moeflow
