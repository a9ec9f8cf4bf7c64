#pragma once
// A set of bytes (256 bits): the terminal of the grammars, which work on bytes, not characters,
// so that a token holding part of a UTF-8 character (byte fallback, byte-level BPE) is matched
// like any other.
#include <array>
#include <cstdint>

namespace moeflow {

struct ByteSet {
  std::array<uint64_t, 4> bits{};

  static ByteSet of(uint8_t b) {
    ByteSet s;
    s.add(b);
    return s;
  }
  static ByteSet range(uint8_t lo, uint8_t hi) {
    ByteSet s;
    s.add_range(lo, hi);
    return s;
  }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) add((uint8_t)b);
  }
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return !(bits[0] | bits[1] | bits[2] | bits[3]); }
  bool operator==(const ByteSet&) const = default;
};

}  // namespace moeflow
