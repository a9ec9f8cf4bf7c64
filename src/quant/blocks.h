#pragma once
// Byte layouts of the quantized block formats, as stored in GGUF files. Every struct is
// packed to the exact on-disk size (static_asserts below), so a block pointer can be read
// straight out of an mmap'ed or O_DIRECT-read buffer.
#include <cstdint>

namespace moeflow {

constexpr int QK4_0 = 32;
constexpr int QK4_1 = 32;
constexpr int QK5_0 = 32;
constexpr int QK5_1 = 32;
constexpr int QK8_0 = 32;
constexpr int QK8_1 = 32;
constexpr int QK4_NL = 32;
constexpr int QK_MXFP4 = 32;
constexpr int QK_K = 256;
constexpr int K_SCALE_SIZE = 12;

#pragma pack(push, 1)
struct BlockQ4_0 {
  uint16_t d;             // fp16 scale
  uint8_t qs[QK4_0 / 2];  // low nibbles: elements 0..15, high nibbles: 16..31
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[QK4_1 / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // 5th bit of each of the 32 elements
  uint8_t qs[QK5_0 / 2];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[QK5_1 / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[QK8_0];
};
struct BlockQ8_1 {
  uint16_t d;  // fp16 scale
  uint16_t s;  // fp16 d * sum(qs)
  int8_t qs[QK8_1];
};
struct BlockQ2_K {
  uint8_t scales[QK_K / 16];  // low 4 bits scale, high 4 bits min, per 16 elements
  uint8_t qs[QK_K / 4];
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[QK_K / 8];
  uint8_t qs[QK_K / 4];
  uint8_t scales[12];  // 16 6-bit scales
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[K_SCALE_SIZE];  // 8 6-bit scales and 8 6-bit mins
  uint8_t qs[QK_K / 2];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  uint16_t d;
};
struct BlockQ8_K {  // activation format for K-quant dot products
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];  // sum of each group of 16 qs
};
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[QK4_NL / 2];
};
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[QK_K / 64];
  uint8_t qs[QK_K / 2];
};
struct BlockMXFP4 {
  uint8_t e;                 // E8M0 shared exponent
  uint8_t qs[QK_MXFP4 / 2];  // E2M1 values, low nibbles first half
};
#pragma pack(pop)

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockMXFP4) == 17);

}  // namespace moeflow
