#pragma once
// Counter-based random numbers for synthetic weights: the values of a row depend only on
// (seed, tensor name, row), never on thread count or on which other tensors exist. So the F32
// and Q4_K files generated with one seed hold the same model, and --layers 4 is a prefix of
// --layers 32.
#include <cstdint>
#include <string_view>

namespace moeflow::gen {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// FNV-1a: stable across platforms and library versions, unlike std::hash.
inline uint64_t stable_hash(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t row_stream_seed(uint64_t seed, uint64_t tensor_hash, int64_t row);

// out[0..n) ~ N(mean, std^2) from the stream `state` (Box-Muller).
void fill_normal(uint64_t state, float* out, int64_t n, float mean, float std);

}  // namespace moeflow::gen
