#include "grammar/utf8_ranges.h"

#include <algorithm>

namespace moeflow {

namespace {

constexpr uint32_t kMaxCp = 0x10FFFF;

CodepointRanges normalized(CodepointRanges r) {
  std::sort(r.begin(), r.end());
  CodepointRanges out;
  for (auto [lo, hi] : r) {
    if (lo > hi || lo > kMaxCp) continue;
    hi = std::min(hi, kMaxCp);
    if (!out.empty() && lo <= out.back().second + 1)
      out.back().second = std::max(out.back().second, hi);
    else
      out.emplace_back(lo, hi);
  }
  return out;
}

// Appends the byte sequences of [lo, hi], whose code points all take `n` bytes. A range is split
// until every byte position varies independently over a contiguous range: then one sequence of
// byte sets covers it. The split points are where a lower byte wraps (its 6 payload bits all
// zero or all one), so at most 2n - 1 sequences come out.
void encode_range(uint32_t lo, uint32_t hi, std::vector<Expr>& out) {
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;  // the payload bits of the last i bytes
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        encode_range(lo, lo | m, out);
        encode_range((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        encode_range(lo, (hi & ~m) - 1, out);
        encode_range(hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::string a = utf8_encode(lo), b = utf8_encode(hi);
  std::vector<Expr> seq;
  for (size_t k = 0; k < a.size(); ++k)
    seq.push_back(Expr::byte_set(ByteSet::range((uint8_t)a[k], (uint8_t)b[k])));
  out.push_back(Expr::seq(std::move(seq)));
}

}  // namespace

std::string utf8_encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += (char)cp;
  } else if (cp < 0x800) {
    s += (char)(0xC0 | (cp >> 6));
    s += (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += (char)(0xE0 | (cp >> 12));
    s += (char)(0x80 | ((cp >> 6) & 0x3F));
    s += (char)(0x80 | (cp & 0x3F));
  } else {
    s += (char)(0xF0 | (cp >> 18));
    s += (char)(0x80 | ((cp >> 12) & 0x3F));
    s += (char)(0x80 | ((cp >> 6) & 0x3F));
    s += (char)(0x80 | (cp & 0x3F));
  }
  return s;
}

CodepointRanges complement(CodepointRanges ranges) {
  CodepointRanges out;
  uint32_t next = 0;
  for (auto [lo, hi] : normalized(std::move(ranges))) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCp) out.emplace_back(next, kMaxCp);
  return out;
}

Expr utf8_class(const CodepointRanges& ranges) {
  // Split at the encoding-length boundaries and around the surrogates, then encode each piece.
  static const std::pair<uint32_t, uint32_t> kPieces[] = {
      {0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, kMaxCp}};
  std::vector<Expr> alts;
  ByteSet ascii;  // the one-byte characters together make a single byte set
  for (auto [lo, hi] : normalized(ranges)) {
    for (auto [plo, phi] : kPieces) {
      const uint32_t a = std::max(lo, plo), b = std::min(hi, phi);
      if (a > b) continue;
      if (phi == 0x7F)
        ascii.add_range((uint8_t)a, (uint8_t)b);
      else
        encode_range(a, b, alts);
    }
  }
  if (!ascii.empty()) alts.insert(alts.begin(), Expr::byte_set(ascii));
  if (alts.empty()) return Expr::byte_set(ByteSet{});  // matches nothing
  return Expr::alt(std::move(alts));
}

}  // namespace moeflow
