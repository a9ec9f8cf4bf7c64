// Vocabulary loading, special-token partitioning and decoding shared by both tokenizer models.
#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer_models.h"
#include "tokenizer/unicode.h"

namespace moeflow {

Tokenizer::~Tokenizer() = default;

int byte_token_value(std::string_view t) {
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& f) {
  if (!f.has("tokenizer.ggml.model"))
    fail("{}: no tokenizer in this file (metadata key tokenizer.ggml.model is missing)", f.path());
  const std::string model = f.get_string("tokenizer.ggml.model");
  std::unique_ptr<Tokenizer> t;
  if (model == "llama")
    t = make_spm_tokenizer(f);
  else if (model == "gpt2" || model == "gemma4")
    t = make_bpe_tokenizer(f);
  else
    fail("{}: tokenizer.ggml.model '{}' is not supported (supported: llama, gpt2, gemma4)",
         f.path(), model);
  return t;
}

void Tokenizer::load_common(const GgufFile& f) {
  path_ = f.path();
  model_ = f.get_string("tokenizer.ggml.model");
  pre_ = f.has("tokenizer.ggml.pre") ? f.get_string("tokenizer.ggml.pre") : "default";
  tokens_ = f.get_string_array("tokenizer.ggml.tokens");
  if (tokens_.empty()) fail("{}: tokenizer.ggml.tokens is empty", path_);
  const size_t n = tokens_.size();
  if (n > 0x7FFFFFFF) fail("{}: tokenizer.ggml.tokens has too many entries", path_);
  types_.assign(n, TokenType::Normal);
  if (f.has("tokenizer.ggml.token_type")) {
    auto tt = f.get_int_array("tokenizer.ggml.token_type");
    if (tt.size() != n)
      fail("{}: tokenizer.ggml.token_type has {} entries but tokenizer.ggml.tokens has {}", path_,
           tt.size(), n);
    for (size_t i = 0; i < n; ++i) {
      if (tt[i] < 0 || tt[i] > 6)
        fail("{}: tokenizer.ggml.token_type[{}] = {} is not a token type", path_, i, tt[i]);
      types_[i] = static_cast<TokenType>(tt[i]);
      // A byte token must say which byte: "<0x-1>" or "<0xZZ>" would index outside the
      // 256-entry byte table (and std::stoi threw on it).
      if (types_[i] == TokenType::Byte && byte_token_value(tokens_[i]) < 0)
        fail(
            "{}: tokenizer.ggml.tokens[{}] = '{}' has token type BYTE but is not of the form "
            "<0xHH>",
            path_, i, tokens_[i]);
    }
  }
  token_to_id_.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) token_to_id_.emplace(tokens_[i], static_cast<int32_t>(i));

  auto id_key = [&](const char* key) -> int32_t {
    const int64_t v = f.get_int(key, -1);
    if (v < -1 || v >= static_cast<int64_t>(n))
      fail("{}: {} = {} is outside the vocabulary (0..{})", path_, key, v, n - 1);
    return static_cast<int32_t>(v);
  };
  bos_ = id_key("tokenizer.ggml.bos_token_id");
  eos_ = id_key("tokenizer.ggml.eos_token_id");
  unk_ = id_key("tokenizer.ggml.unknown_token_id");
  pad_ = id_key("tokenizer.ggml.padding_token_id");
  const int32_t eot = id_key("tokenizer.ggml.eot_token_id");
  const int32_t eom = id_key("tokenizer.ggml.eom_token_id");
  add_bos_ = f.get_bool("tokenizer.ggml.add_bos_token", model_ == "llama");
  // Gemma 4 is trained with <bos> in front of every sequence; some conversions wrote
  // add_bos_token = false, which llama.cpp overrides for this model, and so do we.
  if (model_ == "gemma4") add_bos_ = true;
  add_eos_ = f.get_bool("tokenizer.ggml.add_eos_token", false);
  if (add_bos_ && bos_ < 0) add_bos_ = false;
  if (add_eos_ && eos_ < 0) add_eos_ = false;
  if (f.has("tokenizer.chat_template")) chat_template_ = f.get_string("tokenizer.chat_template");

  for (size_t i = 0; i < n; ++i) {
    if ((types_[i] == TokenType::Control || types_[i] == TokenType::UserDefined) &&
        !tokens_[i].empty())
      specials_.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(specials_.begin(), specials_.end(),
                   [&](int32_t a, int32_t b) { return tokens_[a].size() > tokens_[b].size(); });

  for (int32_t id : {eos_, eot, eom})
    if (id >= 0) eog_.push_back(id);
  static const char* kEndOfTurn[] = {"<|eot_id|>",    "<|im_end|>",
                                     "<|end|>",       "<|endoftext|>",
                                     "<end_of_turn>", "<|end_of_text|>",
                                     "<|return|>",    "<|EOT|>",
                                     "<|eom_id|>",    "<｜end▁of▁sentence｜>",
                                     "</s>",          "<turn|>"};
  for (const char* s : kEndOfTurn) {
    auto it = token_to_id_.find(s);
    if (it != token_to_id_.end() && types_[it->second] == TokenType::Control)
      eog_.push_back(it->second);
  }
  // Harmony (gpt-oss): <|end|> closes one message of a turn (the reasoning before the answer);
  // the turn ends at <|return|> or <|call|>.
  const auto control_id = [&](const char* s) {
    auto it = token_to_id_.find(s);
    return it != token_to_id_.end() && types_[it->second] == TokenType::Control ? it->second : -1;
  };
  if (control_id("<|return|>") >= 0 && control_id("<|call|>") >= 0) {
    eog_.push_back(control_id("<|call|>"));
    std::erase(eog_, control_id("<|end|>"));
  }
  // Gemma 4 ends a turn that calls a tool with <|tool_response> (a user-defined token): the
  // model waits there for the result.
  if (model_ == "gemma4") {
    auto it = token_to_id_.find("<|tool_response>");
    if (it != token_to_id_.end()) eog_.push_back(it->second);
  }
  std::sort(eog_.begin(), eog_.end());
  eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());
}

bool Tokenizer::is_eog(int32_t id) const {
  return std::binary_search(eog_.begin(), eog_.end(), id);
}

const std::string& Tokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= n_vocab())
    fail("{}: token id {} is outside the vocabulary (0..{})", path_, id, n_vocab() - 1);
  return tokens_[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  token_text(id);  // range check
  return types_[id];
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  auto it = token_to_id_.find(std::string(text));
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  // Cut the text at special-token occurrences, longest tokens first (llama.cpp's order), so
  // "<|im_start|>" wins over any shorter token inside it.
  struct Frag {
    int32_t id;  // -1: raw text [b, e)
    size_t b, e;
  };
  std::vector<Frag> frags;
  if (!text.empty()) frags.push_back({-1, 0, text.size()});
  std::vector<Frag> next;
  for (int32_t sid : specials_) {
    if (!parse_special && types_[sid] == TokenType::Control) continue;
    const std::string& st = tokens_[sid];
    if (text.find(st) == std::string_view::npos) continue;
    next.clear();
    for (const Frag& fr : frags) {
      if (fr.id >= 0) {
        next.push_back(fr);
        continue;
      }
      size_t b = fr.b;
      while (b < fr.e) {
        const size_t hit = text.substr(0, fr.e).find(st, b);
        if (hit == std::string_view::npos) break;
        if (hit > b) next.push_back({-1, b, hit});
        next.push_back({sid, hit, hit + st.size()});
        b = hit + st.size();
      }
      if (b < fr.e) next.push_back({-1, b, fr.e});
    }
    frags.swap(next);
  }

  std::vector<int32_t> out;
  if (add_bos && add_bos_) out.push_back(bos_);
  bool after_special = true;
  for (const Frag& fr : frags) {
    if (fr.id >= 0) {
      out.push_back(fr.id);
      after_special = true;
    } else {
      encode_fragment(text.substr(fr.b, fr.e - fr.b), after_special, out);
      after_special = false;
    }
  }
  if (add_bos && add_eos_) out.push_back(eos_);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
  const std::string& text = token_text(id);
  switch (types_[id]) {
    case TokenType::Control:
    case TokenType::Unknown: return special ? text : std::string();
    case TokenType::UserDefined: return text;
    case TokenType::Byte:
      return std::string(1, static_cast<char>(byte_token_value(text)));  // checked at load
    default: return normal_piece(id);
  }
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool special) const {
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    std::string p = token_to_piece(id, special);
    if (first && !p.empty()) {
      first = false;
      if (strips_leading_space() && p[0] == ' ') p.erase(0, 1);
    }
    out += p;
  }
  return out;
}

namespace {
// Re-encodes `s`, turning every invalid UTF-8 byte into U+FFFD.
std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    const uint32_t cp = unicode::decode_one(s, pos);
    if (cp == unicode::kReplacement && pos - start == 1)
      unicode::append_utf8(out, cp);
    else
      out.append(s.substr(start, pos - start));
  }
  return out;
}
}  // namespace

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_.token_to_piece(id, special_);
  const size_t k = unicode::complete_prefix_len(pending_);
  std::string out = sanitize_utf8(std::string_view(pending_).substr(0, k));
  pending_.erase(0, k);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = sanitize_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace moeflow
