#include "model/gen/gen_random.h"

#include <cmath>

namespace moeflow::gen {

uint64_t row_stream_seed(uint64_t seed, uint64_t tensor_hash, int64_t row) {
  uint64_t s = seed ^ (tensor_hash * 0xd6e8feb86659fd93ull);
  s = splitmix64(s) ^ (uint64_t)row;
  return splitmix64(s);
}

void fill_normal(uint64_t state, float* out, int64_t n, float mean, float std) {
  constexpr float kTwoPi = 6.28318530717958647692f;
  constexpr float kInv24 = 1.0f / 16777216.0f;
  int64_t i = 0;
  while (i < n) {
    const uint64_t r = splitmix64(state);
    // Two 24-bit uniforms from one draw; u1 is kept away from 0 so log() stays finite.
    const float u1 = ((float)(r >> 40) + 0.5f) * kInv24;
    const float u2 = (float)((r >> 8) & 0xffffff) * kInv24;
    const float rad = std * std::sqrt(-2.0f * std::log(u1));
    const float th = kTwoPi * u2;
    out[i++] = mean + rad * std::cos(th);
    if (i < n) out[i++] = mean + rad * std::sin(th);
  }
}

}  // namespace moeflow::gen
