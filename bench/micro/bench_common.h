#pragma once
// Helpers shared by the micro-benchmarks: big cold buffers (larger than the last-level cache,
// so every pass really streams from DRAM) filled quickly with valid data.
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/fp16.h"
#include "core/ggml_type.h"

namespace moeflow::bench {

// Total bytes a benchmark cycles through; above the 260 MB L3 this VM reports.
constexpr size_t kColdBytes = size_t(640) << 20;

// Anonymous memory, asked for in huge pages or kept in 4 KiB ones (MADV_NOHUGEPAGE, so a machine
// whose transparent huge pages are "always" still measures the small pages).
class Pages {
 public:
  Pages(size_t bytes, bool huge) : bytes_(bytes) {
    p_ = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p_ == MAP_FAILED) throw std::bad_alloc();
    (void)::madvise(p_, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    std::memset(p_, 1, bytes);
  }
  ~Pages() { ::munmap(p_, bytes_); }
  Pages(const Pages&) = delete;
  Pages& operator=(const Pages&) = delete;
  const uint64_t* words() const { return static_cast<const uint64_t*>(p_); }
  uint8_t* bytes() { return static_cast<uint8_t*>(p_); }

 private:
  void* p_;
  size_t bytes_;
};

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
