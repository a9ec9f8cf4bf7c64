// SentencePiece ("llama") tokenizer: greedy merging of adjacent pieces by vocabulary score,
// with <0xXX> byte fallback for characters the vocabulary lacks.
#include <array>
#include <queue>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer_models.h"
#include "tokenizer/unicode.h"

namespace moeflow {

namespace {

const std::string kSpace = "\xE2\x96\x81";  // U+2581 "▁"

class SpmTokenizer : public Tokenizer {
 public:
  explicit SpmTokenizer(const GgufFile& f) {
    load_common(f);
    const size_t n = tokens_.size();
    if (f.has("tokenizer.ggml.scores")) {
      scores_ = f.get_float_array("tokenizer.ggml.scores");
      if (scores_.size() != n)
        fail("{}: tokenizer.ggml.scores has {} entries but tokenizer.ggml.tokens has {}", path_,
             scores_.size(), n);
    } else {
      scores_.assign(n, 0.0f);
    }
    add_space_prefix_ = f.get_bool("tokenizer.ggml.add_space_prefix", true);
    byte_ids_.fill(-1);
    for (size_t i = 0; i < n; ++i) {
      const std::string& t = tokens_[i];
      if (types_[i] == TokenType::Byte) {
        const int v = byte_token_value(t);  // 0..255: load_common refused any other BYTE token
        if (byte_ids_[v] < 0) byte_ids_[v] = static_cast<int32_t>(i);
      }
    }
  }

 protected:
  bool strips_leading_space() const override { return add_space_prefix_; }

  std::string normal_piece(int32_t id) const override {
    const std::string& t = tokens_[id];
    std::string out;
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, 3, kSpace) == 0) {
        out += ' ';
        i += 3;
      } else {
        out += t[i++];
      }
    }
    return out;
  }

  void encode_fragment(std::string_view text, bool after_special,
                       std::vector<int32_t>& out) const override {
    std::string s;
    if (add_space_prefix_ && after_special) s = kSpace;
    for (char c : text) {
      if (c == ' ')
        s += kSpace;
      else
        s += c;
    }
    if (s.empty()) return;

    struct Sym {
      int prev, next;
      size_t start, len;
    };
    std::vector<Sym> syms;
    for (size_t pos = 0; pos < s.size();) {
      const size_t start = pos;
      unicode::decode_one(s, pos);
      const int idx = static_cast<int>(syms.size());
      syms.push_back({idx - 1, idx + 1, start, pos - start});
    }
    syms.back().next = -1;

    struct Bigram {
      int left, right;
      float score;
      size_t len;
    };
    auto worse = [](const Bigram& a, const Bigram& b) {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> heap(worse);
    std::string key;
    auto try_add = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      key.assign(s, syms[l].start, syms[l].len + syms[r].len);
      auto it = token_to_id_.find(key);
      if (it == token_to_id_.end() || !mergeable(it->second)) return;
      heap.push({l, r, scores_[it->second], key.size()});
    };
    for (size_t i = 1; i < syms.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
    while (!heap.empty()) {
      const Bigram b = heap.top();
      heap.pop();
      Sym& l = syms[b.left];
      Sym& r = syms[b.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;  // stale
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) syms[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }

    for (int i = 0; i >= 0; i = syms[i].next) {
      key.assign(s, syms[i].start, syms[i].len);
      auto it = token_to_id_.find(key);
      if (it != token_to_id_.end() && types_[it->second] != TokenType::Byte &&
          types_[it->second] != TokenType::Control) {
        out.push_back(it->second);
        continue;
      }
      for (unsigned char c : key) {
        if (byte_ids_[c] >= 0)
          out.push_back(byte_ids_[c]);
        else if (unk_ >= 0)
          out.push_back(unk_);
      }
    }
  }

 private:
  bool mergeable(int32_t id) const {
    const TokenType t = types_[id];
    return t == TokenType::Normal || t == TokenType::UserDefined || t == TokenType::Undefined;
  }

  std::vector<float> scores_;
  std::array<int32_t, 256> byte_ids_{};
  bool add_space_prefix_ = true;
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(const GgufFile& f) {
  return std::make_unique<SpmTokenizer>(f);
}

}  // namespace moeflow
