// Byte-level BPE ("gpt2") tokenizer: regex pre-tokenization, bytes mapped to the GPT-2
// printable alphabet, then merges applied lowest rank first.
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
    pretok_ = std::make_unique<PreTokenizer>(pre_);
    if (!pretok_->known())
      warning_ = "unknown tokenizer.ggml.pre '" + pre_ + "'; using the GPT-2 pre-tokenizer";
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
    for (const std::string& word : pretok_->split(text)) encode_word(word, out);
  }

 private:
  void encode_word(const std::string& word, std::vector<int32_t>& out) const {
    std::string mapped;
    std::vector<size_t> starts;  // one symbol per input byte
    for (unsigned char c : word) {
      starts.push_back(mapped.size());
      unicode::append_utf8(mapped, unicode::byte_to_cp(c));
    }
    if (mapped.empty()) return;
    if (pretok_->ignore_merges()) {
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

  std::unique_ptr<PreTokenizer> pretok_;
  std::unordered_map<std::string, int32_t> ranks_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(const GgufFile& f) {
  return std::make_unique<BpeTokenizer>(f);
}

}  // namespace moeflow
