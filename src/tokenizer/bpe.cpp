// BPE tokenizers: merges applied lowest rank first (leftmost first among equal ranks) to the
// symbols of one word at a time. Two flavours, by tokenizer.ggml.model:
//   "gpt2":   byte-level -- regex pre-tokenization (tokenizer.ggml.pre), every byte mapped to
//             the GPT-2 printable alphabet, so every input byte is a symbol of the vocabulary;
//   "gemma4": SentencePiece-style (Gemma 4's tokenizer.json: a BPE model with byte_fallback and
//             a normalizer that writes spaces as U+2581 "▁"): no pre-tokenizer regex, only runs
//             of line breaks cut apart from the rest (a run that is itself a token is taken
//             whole, as llama.cpp's pre-type GEMMA4 does), the symbols are UTF-8 characters,
//             and a symbol left outside the vocabulary becomes its bytes' <0xHH> tokens.
#include <array>
#include <cstdio>
#include <queue>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_models.h"
#include "tokenizer/unicode.h"

namespace moeflow {

namespace {

class BpeTokenizer : public Tokenizer {
 public:
  explicit BpeTokenizer(const GgufFile& f) {
    load_common(f);
    spm_style_ = model_ == "gemma4";
    if (spm_style_) {
      // llama.cpp takes the model name as the pre-tokenizer (a tokenizer.ggml.pre in the file
      // is not consulted for this model).
      pre_ = "gemma4";
      byte_ids_.fill(-1);
      for (int32_t id = 0; id < n_vocab(); ++id)
        if (types_[id] == TokenType::Byte) byte_ids_[byte_token_value(tokens_[id])] = id;
    } else {
      pretok_ = std::make_unique<PreTokenizer>(pre_);
      if (!pretok_->known())
        warning_ = "unknown tokenizer.ggml.pre '" + pre_ + "'; using the GPT-2 pre-tokenizer";
    }
    const auto merges = f.get_string_array("tokenizer.ggml.merges");
    ranks_.reserve(merges.size() * 2);
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string& m = merges[i];
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos || sp + 1 >= m.size())
        fail("{}: tokenizer.ggml.merges[{}] = '{}' is not two tokens separated by a space", path_,
             i, m);
      ranks_.emplace(m, static_cast<int32_t>(i));
    }
  }

 protected:
  std::string normal_piece(int32_t id) const override {
    const std::string& t = tokens_[id];
    std::string out;
    if (spm_style_) {
      for (size_t pos = 0; pos < t.size();) {
        const size_t hit = t.find(kSpaceMark, pos);
        out.append(t, pos, hit == std::string::npos ? std::string::npos : hit - pos);
        if (hit == std::string::npos) break;
        out += ' ';
        pos = hit + kSpaceMark.size();
      }
      return out;
    }
    for (size_t pos = 0; pos < t.size();) {
      const size_t start = pos;
      const uint32_t cp = unicode::decode_one(t, pos);
      const int b = unicode::cp_to_byte(cp);
      if (b >= 0)
        out += static_cast<char>(b);
      else
        out.append(t, start, pos - start);
    }
    return out;
  }

  void encode_fragment(std::string_view text, bool, std::vector<int32_t>& out) const override {
    if (!spm_style_) {
      for (const std::string& word : pretok_->split(text)) encode_word(word, out);
      return;
    }
    std::string escaped;
    escaped.reserve(text.size() + text.size() / 2);
    for (char c : text) {
      if (c == ' ')
        escaped += kSpaceMark;
      else
        escaped += c;
    }
    // Runs of '\n' apart from the rest, as llama.cpp's GEMMA4 pre-type splits the text.
    for (size_t b = 0; b < escaped.size();) {
      const bool nl = escaped[b] == '\n';
      size_t e = b;
      while (e < escaped.size() && (escaped[e] == '\n') == nl) ++e;
      const std::string_view word(escaped.data() + b, e - b);
      auto it = nl ? token_to_id_.find(std::string(word)) : token_to_id_.end();
      if (it != token_to_id_.end())
        out.push_back(it->second);
      else
        encode_word(word, out);
      b = e;
    }
  }

 private:
  // U+2581, SentencePiece's visible space.
  static constexpr std::string_view kSpaceMark = "\xE2\x96\x81";

  void encode_word(std::string_view word, std::vector<int32_t>& out) const {
    std::string mapped;
    std::vector<size_t> starts;  // byte-level: one symbol per input byte; spm-style: per character
    if (spm_style_) {
      mapped.assign(word);
      // An invalid byte is a symbol of its own (and ends as its <0xHH> token).
      for (size_t pos = 0; pos < word.size();) {
        starts.push_back(pos);
        unicode::decode_one(word, pos);
      }
    } else {
      for (unsigned char c : word) {
        starts.push_back(mapped.size());
        unicode::append_utf8(mapped, unicode::byte_to_cp(c));
      }
    }
    if (mapped.empty()) return;
    if (pretok_ && pretok_->ignore_merges()) {
      auto it = token_to_id_.find(mapped);
      if (it != token_to_id_.end()) {
        out.push_back(it->second);
        return;
      }
    }

    struct Sym {
      int prev, next;
      size_t start, len;
    };
    std::vector<Sym> syms(starts.size());
    for (size_t i = 0; i < starts.size(); ++i) {
      const size_t end = i + 1 < starts.size() ? starts[i + 1] : mapped.size();
      syms[i] = {static_cast<int>(i) - 1, static_cast<int>(i) + 1, starts[i], end - starts[i]};
    }
    syms.back().next = -1;

    struct Bigram {
      int left, right;
      int32_t rank;
      size_t len;
    };
    auto worse = [](const Bigram& a, const Bigram& b) {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    };
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> heap(worse);
    std::string key;
    auto try_add = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      key.assign(mapped, syms[l].start, syms[l].len);
      key += ' ';
      key.append(mapped, syms[r].start, syms[r].len);
      auto it = ranks_.find(key);
      if (it == ranks_.end()) return;
      heap.push({l, r, it->second, syms[l].len + syms[r].len});
    };
    for (size_t i = 1; i < syms.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
    while (!heap.empty()) {
      const Bigram b = heap.top();
      heap.pop();
      Sym& l = syms[b.left];
      Sym& r = syms[b.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != b.len || l.next != b.right) continue;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) syms[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }

    for (int i = 0; i >= 0; i = syms[i].next) {
      key.assign(mapped, syms[i].start, syms[i].len);
      auto it = token_to_id_.find(key);
      if (it != token_to_id_.end()) {
        out.push_back(it->second);
        continue;
      }
      if (spm_style_) {  // byte fallback
        for (unsigned char c : key) {
          if (byte_ids_[c] >= 0)
            out.push_back(byte_ids_[c]);
          else if (unk_ >= 0)
            out.push_back(unk_);
        }
        continue;
      }
      // Not in the vocabulary (a malformed vocab): fall back to one token per byte symbol.
      for (size_t pos = 0; pos < key.size();) {
        const size_t st = pos;
        unicode::decode_one(key, pos);
        auto jt = token_to_id_.find(key.substr(st, pos - st));
        if (jt != token_to_id_.end())
          out.push_back(jt->second);
        else if (unk_ >= 0)
          out.push_back(unk_);
      }
    }
  }

  bool spm_style_ = false;
  std::unique_ptr<PreTokenizer> pretok_;  // byte-level only
  std::array<int32_t, 256> byte_ids_{};   // spm-style: the <0xHH> token of each byte, or -1
  std::unordered_map<std::string, int32_t> ranks_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(const GgufFile& f) {
  return std::make_unique<BpeTokenizer>(f);
}

}  // namespace moeflow
