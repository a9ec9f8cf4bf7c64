#pragma once
// Helpers shared by the micro-benchmarks: big cold buffers (larger than the last-level cache,
// so every pass really streams from DRAM) filled quickly with valid data.
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/fp16.h"
#include "core/ggml_type.h"

namespace moeflow::bench {

// Total bytes a benchmark cycles through; above the 260 MB L3 this VM reports.
constexpr size_t kColdBytes = size_t(640) << 20;

inline uint64_t next(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

// Random weights of type t. Quantized payloads are random bits (speed does not depend on the
// values); float types get finite normal numbers so no denormal slow paths are measured.
inline void fill_weights(GgmlType t, uint8_t* p, size_t bytes, uint64_t seed) {
  uint64_t s = seed | 1;
  if (t == GgmlType::F32) {
    float* f = reinterpret_cast<float*>(p);
    for (size_t i = 0; i < bytes / 4; ++i) f[i] = (float)((int64_t)(next(s) % 2001) - 1000) * 1e-3f;
  } else if (t == GgmlType::F16 || t == GgmlType::BF16) {
    uint16_t* h = reinterpret_cast<uint16_t*>(p);
    for (size_t i = 0; i < bytes / 2; ++i) {
      const float v = (float)((int64_t)(next(s) % 2001) - 1000) * 1e-3f;
      h[i] = t == GgmlType::F16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
    }
  } else {
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
      const uint64_t v = next(s) & 0x3bff3bff3bff3bffULL;  // keeps every fp16 field finite
      std::memcpy(p + i, &v, 8);
    }
    // E8M0 block exponents near 1.0, as real MXFP4 tensors have (extremes would measure
    // denormal slow paths instead of the kernel).
    if (t == GgmlType::MXFP4)
      for (size_t b = 0; b + 17 <= bytes; b += 17) p[b] = (uint8_t)(120 + next(s) % 12);
    // MXFP4_R8 (backend/cpu/mxfp4_rows8.h): the 8 rows' exponents end each 136-byte group block.
    if (t == GgmlType::MXFP4_R8)
      for (size_t b = 0; b + 136 <= bytes; b += 136)
        for (size_t r = 128; r < 136; ++r) p[b + r] = (uint8_t)(120 + next(s) % 12);
  }
}

}  // namespace moeflow::bench
