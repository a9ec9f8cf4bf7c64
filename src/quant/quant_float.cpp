// Plain float formats: F32 copies, F16 and BF16 with round-to-nearest-even (core/fp16.h).
#include <cstring>

#include "quant/quant_impl.h"

namespace moeflow::quant_detail {

void dequantize_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, (size_t)n * sizeof(float));
}
void quantize_f32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, (size_t)n * sizeof(float));
}

// Byte-wise loads/stores: GGUF data is only guaranteed 1-byte aligned after an expert slice.
void dequantize_f16(const void* src, float* dst, int64_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    dst[i] = fp16_to_fp32(h);
  }
}
void quantize_f16(const float* src, void* dst, int64_t n) {
  uint8_t* p = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_fp16(src[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    dst[i] = bf16_to_fp32(h);
  }
}
void quantize_bf16(const float* src, void* dst, int64_t n) {
  uint8_t* p = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_bf16(src[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

}  // namespace moeflow::quant_detail
