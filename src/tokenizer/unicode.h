#pragma once
// UTF-8 decoding/encoding and Unicode general categories, as the pre-tokenizer regexes
// (\p{L}, \p{N}, \s, ...) need them. Invalid UTF-8 never throws here: each bad byte decodes
// as one code point U+FFFD so that tokenizing arbitrary bytes always terminates.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moeflow::unicode {

enum class GeneralCategory : uint8_t {
  Cn,
  Lu,
  Ll,
  Lt,
  Lm,
  Lo,
  Mn,
  Mc,
  Me,
  Nd,
  Nl,
  No,
  Pc,
  Pd,
  Ps,
  Pe,
  Pi,
  Pf,
  Po,
  Sm,
  Sc,
  Sk,
  So,
  Zs,
  Zl,
  Zp,
  Cc,
  Cf,
  Cs,
  Co
};

// Major class letter of a category: 'L', 'M', 'N', 'P', 'S', 'Z' or 'C'.
char major_class(GeneralCategory c);
GeneralCategory category(uint32_t cp);
bool is_letter(uint32_t cp);
bool is_number(uint32_t cp);
bool is_punct(uint32_t cp);
// Unicode White_Space property (what \s means in Oniguruma / Rust regex), not Python's isspace.
bool is_whitespace(uint32_t cp);

constexpr uint32_t kReplacement = 0xFFFD;

// Length of the UTF-8 sequence that starts with byte b (1 for invalid lead bytes).
size_t utf8_len(uint8_t b);
// Decodes the code point at s[pos]; advances pos by the bytes consumed (at least 1).
uint32_t decode_one(std::string_view s, size_t& pos);
std::vector<uint32_t> decode(std::string_view s);
void append_utf8(std::string& out, uint32_t cp);
std::string encode(const std::vector<uint32_t>& cps);
// Length of the longest prefix of s that does not end inside an incomplete (but so far valid)
// UTF-8 sequence; used by the streaming detokenizer to hold back partial characters.
size_t complete_prefix_len(std::string_view s);

// GPT-2 byte-level alphabet: every byte maps to one printable code point.
uint32_t byte_to_cp(uint8_t b);
// Returns -1 if cp is not in the byte-level alphabet.
int cp_to_byte(uint32_t cp);

namespace detail {
struct CategoryRun {
  uint32_t start;
  uint8_t cat;
};
extern const CategoryRun kCategoryRuns[];
extern const size_t kNumCategoryRuns;
}  // namespace detail

}  // namespace moeflow::unicode
