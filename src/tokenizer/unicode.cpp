#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace moeflow::unicode {

char major_class(GeneralCategory c) {
  static const char kMajor[] = "CLLLLLMMMNNNPPPPPPPSSSSZZZCCCC";
  return kMajor[static_cast<int>(c)];
}

GeneralCategory category(uint32_t cp) {
  if (cp > 0x10FFFF) return GeneralCategory::Cn;
  const auto* first = detail::kCategoryRuns;
  const auto* last = detail::kCategoryRuns + detail::kNumCategoryRuns;
  auto it = std::upper_bound(first, last, cp,
                             [](uint32_t v, const detail::CategoryRun& r) { return v < r.start; });
  return static_cast<GeneralCategory>((it - 1)->cat);
}

bool is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return major_class(category(cp)) == 'L';
}
bool is_number(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return major_class(category(cp)) == 'N';
}
bool is_punct(uint32_t cp) { return major_class(category(cp)) == 'P'; }

bool is_whitespace(uint32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return cp >= 0x2000 && cp <= 0x200A;
  }
}

size_t utf8_len(uint8_t b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 1;
}

uint32_t decode_one(std::string_view s, size_t& pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  const size_t n = utf8_len(b0);
  if (n == 1) {
    ++pos;
    return b0 < 0x80 ? b0 : kReplacement;
  }
  if (pos + n > s.size()) {
    ++pos;
    return kReplacement;
  }
  uint32_t cp = b0 & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) {
    const auto b = static_cast<uint8_t>(s[pos + i]);
    if ((b & 0xC0) != 0x80) {
      ++pos;
      return kReplacement;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong forms and surrogates are invalid; treat the lead byte alone as bad.
  static const uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++pos;
    return kReplacement;
  }
  pos += n;
  return cp;
}

std::vector<uint32_t> decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) out.push_back(decode_one(s, pos));
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string encode(const std::vector<uint32_t>& cps) {
  std::string out;
  for (uint32_t cp : cps) append_utf8(out, cp);
  return out;
}

size_t complete_prefix_len(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence is not finished yet.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<uint8_t>(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t need = utf8_len(b);
    if (need > back && need > 1) return n - back;
    return n;
  }
  return n;
}

namespace {
struct ByteMaps {
  std::array<uint32_t, 256> to_cp{};
  std::array<int, 0x200> to_byte{};
  ByteMaps() {
    to_byte.fill(-1);
    // Printable Latin-1 bytes map to themselves; the rest go to 0x100 + k in byte order.
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      to_byte[to_cp[b]] = b;
    }
  }
};
const ByteMaps& byte_maps() {
  static const ByteMaps m;
  return m;
}
}  // namespace

uint32_t byte_to_cp(uint8_t b) { return byte_maps().to_cp[b]; }
int cp_to_byte(uint32_t cp) { return cp < 0x200 ? byte_maps().to_byte[cp] : -1; }

}  // namespace moeflow::unicode
