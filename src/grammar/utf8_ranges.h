#pragma once
// Character classes over Unicode code points turned into byte expressions: the UTF-8 encodings
// of the code points in a set, as alternatives of byte-set sequences (at most a few per range).
// Surrogates (U+D800..U+DFFF) are never included, so every match is valid UTF-8.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace moeflow {

using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive [lo, hi]

// The code points in [0, 0x10FFFF] outside `ranges` (which may overlap and be unsorted).
CodepointRanges complement(CodepointRanges ranges);

// One character of `ranges`, as bytes.
Expr utf8_class(const CodepointRanges& ranges);

// The UTF-8 encoding of one code point (<= 0x10FFFF).
std::string utf8_encode(uint32_t cp);

}  // namespace moeflow
