// K-quant encoders: scale search in scale_search.cpp, bit packing here (the layouts are the
// mirror images of quant_k_dequant.cpp).
#include <cstring>

#include "quant/blocks.h"
#include "quant/k_scales.h"
#include "quant/quant_impl.h"
#include "quant/scale_search.h"

namespace moeflow::quant_detail {
namespace {

// 2-bit codes of a 256 block into 64 bytes (Q2_K qs, Q3_K low bits).
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  std::memset(qs, 0, QK_K / 4);
  for (int i = 0; i < QK_K; ++i)
    qs[32 * (i / 128) + i % 32] |= (uint8_t)((L[i] & 3) << (2 * ((i % 128) / 32)));
}

// 4-bit codes into 128 bytes (Q4_K, Q5_K low bits).
void pack_4bit(const uint8_t* L, uint8_t* qs) {
  for (int c = 0; c < QK_K / 64; ++c)
    for (int l = 0; l < 32; ++l)
      qs[32 * c + l] = (uint8_t)((L[64 * c + l] & 0x0f) | ((L[64 * c + 32 + l] & 0x0f) << 4));
}

}  // namespace

void quantize_q2_k(const float* src, void* dst, int64_t n) {
  BlockQ2_K* b = static_cast<BlockQ2_K*>(dst);
  AsymResult r;
  for (int64_t ib = 0; ib < n / QK_K; ++ib, ++b, src += QK_K) {
    block_amax(src, QK_K, GgmlType::Q2_K);
    quantize_superblock_asym(src, 16, 3, 15, r, GgmlType::Q2_K);
    for (int j = 0; j < 16; ++j) b->scales[j] = (uint8_t)(r.ls[j] | (r.lm[j] << 4));
    pack_2bit(r.L, b->qs);
    b->d = r.d;
    b->dmin = r.dmin;
  }
}

void quantize_q3_k(const float* src, void* dst, int64_t n) {
  BlockQ3_K* b = static_cast<BlockQ3_K*>(dst);
  SymResult r;
  uint8_t u[QK_K], sc[16];
  for (int64_t ib = 0; ib < n / QK_K; ++ib, ++b, src += QK_K) {
    block_amax(src, QK_K, GgmlType::Q3_K);
    quantize_superblock_sym(src, 16, 4, 3, -32, 31, r, GgmlType::Q3_K);
    for (int i = 0; i < QK_K; ++i) u[i] = (uint8_t)(r.L[i] + 4);
    pack_2bit(u, b->qs);
    std::memset(b->hmask, 0, sizeof(b->hmask));
    for (int i = 0; i < QK_K; ++i) b->hmask[i % 32] |= (uint8_t)((u[i] >> 2) << (i / 32));
    for (int j = 0; j < 16; ++j) sc[j] = (uint8_t)(r.ls[j] + 32);
    q3k_pack_scales(sc, b->scales);
    b->d = r.d;
  }
}

void quantize_q4_k(const float* src, void* dst, int64_t n) {
  BlockQ4_K* b = static_cast<BlockQ4_K*>(dst);
  AsymResult r;
  for (int64_t ib = 0; ib < n / QK_K; ++ib, ++b, src += QK_K) {
    block_amax(src, QK_K, GgmlType::Q4_K);
    quantize_superblock_asym(src, 32, 15, 63, r, GgmlType::Q4_K);
    k4_pack_scales_mins(r.ls, r.lm, b->scales);
    pack_4bit(r.L, b->qs);
    b->d = r.d;
    b->dmin = r.dmin;
  }
}

void quantize_q5_k(const float* src, void* dst, int64_t n) {
  BlockQ5_K* b = static_cast<BlockQ5_K*>(dst);
  AsymResult r;
  for (int64_t ib = 0; ib < n / QK_K; ++ib, ++b, src += QK_K) {
    block_amax(src, QK_K, GgmlType::Q5_K);
    quantize_superblock_asym(src, 32, 31, 63, r, GgmlType::Q5_K);
    k4_pack_scales_mins(r.ls, r.lm, b->scales);
    pack_4bit(r.L, b->qs);
    std::memset(b->qh, 0, sizeof(b->qh));
    for (int i = 0; i < QK_K; ++i) b->qh[i % 32] |= (uint8_t)((r.L[i] >> 4) << (i / 32));
    b->d = r.d;
    b->dmin = r.dmin;
  }
}

void quantize_q6_k(const float* src, void* dst, int64_t n) {
  BlockQ6_K* b = static_cast<BlockQ6_K*>(dst);
  SymResult r;
  for (int64_t ib = 0; ib < n / QK_K; ++ib, ++b, src += QK_K) {
    block_amax(src, QK_K, GgmlType::Q6_K);
    quantize_superblock_sym(src, 16, 32, 31, -128, 127, r, GgmlType::Q6_K);
    std::memset(b->ql, 0, sizeof(b->ql));
    std::memset(b->qh, 0, sizeof(b->qh));
    for (int i = 0; i < QK_K; ++i) {
      const int u = r.L[i] + 32;
      const int h = i / 128, k = (i % 128) / 32, l = i % 32;
      b->ql[64 * h + 32 * (k & 1) + l] |= (uint8_t)((u & 0x0f) << (4 * (k >> 1)));
      b->qh[32 * h + l] |= (uint8_t)((u >> 4) << (2 * k));
    }
    for (int j = 0; j < 16; ++j) b->scales[j] = r.ls[j];
    b->d = r.d;
  }
}

// Activation format: max-abs scaling (the dot-product kernels want speed, not a search), with
// the signed extreme mapped to -127 so every code fits in [-127, 127].
void quantize_q8_k(const float* src, void* dst, int64_t n) {
  BlockQ8_K* b = static_cast<BlockQ8_K*>(dst);
  for (int64_t ib = 0; ib < n / QK_K; ++ib, ++b, src += QK_K) {
    const float amax = block_amax(src, QK_K, GgmlType::Q8_K);
    if (amax == 0) {
      b->d = 0;
      std::memset(b->qs, 0, sizeof(b->qs));
      std::memset(b->bsums, 0, sizeof(b->bsums));
      continue;
    }
    float mx = 0;
    for (int i = 0; i < QK_K; ++i)
      if (std::fabs(src[i]) == amax) {
        mx = src[i];
        break;
      }
    const float iscale = -127.0f / mx;
    for (int i = 0; i < QK_K; ++i) b->qs[i] = (int8_t)clamp_round(iscale * src[i], -127, 127);
    for (int j = 0; j < QK_K / 16; ++j) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += b->qs[16 * j + i];
      b->bsums[j] = (int16_t)s;
    }
    b->d = 1.0f / iscale;
  }
}

}  // namespace moeflow::quant_detail
