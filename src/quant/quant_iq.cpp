// Non-uniform 4-bit grids: IQ4_NL (32-blocks, fp16 scale), IQ4_XS (256-blocks, 6-bit sub-block
// scales) and MXFP4 (OCP microscaling E2M1 values under an E8M0 power-of-two scale).
#include <cstring>

#include "quant/blocks.h"
#include "quant/quant_impl.h"
#include "quant/scale_search.h"

namespace moeflow::quant_detail {
namespace {

// The IQ4 code book: 16 integer levels, denser near zero, as defined by the format.
constexpr int8_t kIQ4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};
// E2M1 values times two (so they are integers); codes 8..15 are the negatives of 0..7.
constexpr Grid16 kIQ4Grid = make_grid16(kIQ4Levels);
constexpr int8_t kMXFP4Levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Nibble layout shared by IQ4_NL, IQ4_XS sub-blocks and MXFP4: byte j holds element j in its
// low nibble and element j + 16 in its high nibble.
void pack_nibbles32(const uint8_t* idx, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = (uint8_t)((idx[j] & 0x0f) | ((idx[j + 16] & 0x0f) << 4));
}

// Final codes for a fixed stored scale; returns the squared error.
double assign_iq4(const float* x, int n, float d, uint8_t* idx) {
  const float id = d != 0 ? 1.0f / d : 0.0f;
  double err = 0;
  for (int i = 0; i < n; ++i) {
    const int k = nearest_level(x[i] * id, kIQ4Grid);
    idx[i] = (uint8_t)k;
    const double e = (double)d * kIQ4Levels[k] - x[i];
    err += e * e;
  }
  return err;
}

// 2^(e - 128): the E8M0 scale with the factor 1/2 that compensates for the doubled levels.
float mxfp4_scale(uint8_t e) { return std::ldexp(1.0f, (int)e - 128); }

}  // namespace

void dequantize_iq4_nl(const void* src, float* dst, int64_t n) {
  const BlockIQ4_NL* b = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t ib = 0; ib < n / QK4_NL; ++ib, ++b, dst += QK4_NL) {
    const float d = fp16_to_fp32(b->d);
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * (float)kIQ4Levels[b->qs[j] & 0x0f];
      dst[j + 16] = d * (float)kIQ4Levels[b->qs[j] >> 4];
    }
  }
}

void quantize_iq4_nl(const float* src, void* dst, int64_t n) {
  BlockIQ4_NL* b = static_cast<BlockIQ4_NL*>(dst);
  uint8_t idx[QK4_NL];
  for (int64_t ib = 0; ib < n / QK4_NL; ++ib, ++b, src += QK4_NL) {
    block_amax(src, QK4_NL, GgmlType::IQ4_NL);
    const float s = fit_grid_scale(src, QK4_NL, kIQ4Grid, idx);
    b->d = store_scale(s, GgmlType::IQ4_NL);
    assign_iq4(src, QK4_NL, fp16_to_fp32(b->d), idx);
    pack_nibbles32(idx, b->qs);
  }
}

// Sub-block j of 32: 6-bit scale (low 4 bits in scales_l[j/2] nibble j%2, top 2 bits in
// scales_h bits 2j..2j+1), stored offset by 32.
void dequantize_iq4_xs(const void* src, float* dst, int64_t n) {
  const BlockIQ4_XS* b = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t ib = 0; ib < n / QK_K; ++ib, ++b, dst += QK_K) {
    const float d = fp16_to_fp32(b->d);
    for (int j = 0; j < QK_K / 32; ++j) {
      const int ls =
          ((b->scales_l[j / 2] >> (4 * (j % 2))) & 0x0f) | (((b->scales_h >> (2 * j)) & 3) << 4);
      const float dl = d * (float)(ls - 32);
      const uint8_t* qs = b->qs + 16 * j;
      float* y = dst + 32 * j;
      for (int l = 0; l < 16; ++l) {
        y[l] = dl * (float)kIQ4Levels[qs[l] & 0x0f];
        y[l + 16] = dl * (float)kIQ4Levels[qs[l] >> 4];
      }
    }
  }
}

void quantize_iq4_xs(const float* src, void* dst, int64_t n) {
  BlockIQ4_XS* b = static_cast<BlockIQ4_XS*>(dst);
  uint8_t idx[QK_K], idx2[QK_K];
  for (int64_t ib = 0; ib < n / QK_K; ++ib, ++b, src += QK_K) {
    block_amax(src, QK_K, GgmlType::IQ4_XS);
    float s[8], smax = 0;
    for (int j = 0; j < 8; ++j) {
      s[j] = fit_grid_scale(src + 32 * j, 32, kIQ4Grid, idx + 32 * j);
      if (std::fabs(s[j]) > std::fabs(smax)) smax = s[j];
    }
    uint16_t hd = store_super_scale(smax / -32.0f, GgmlType::IQ4_XS);
    float d = fp16_to_fp32(hd);
    int ls[8];
    for (int j = 0; j < 8; ++j) ls[j] = d != 0 ? clamp_round(s[j] / d, -32, 31) : 0;
    auto requant = [&](float dd, uint8_t* out) {
      double err = 0;
      for (int j = 0; j < 8; ++j)
        err += assign_iq4(src + 32 * j, 32, dd * (float)ls[j], out + 32 * j);
      return err;
    };
    double err = requant(d, idx);
    // One least-squares refit of the super-block scale with the codes fixed.
    double saa = 0, sax = 0;
    for (int i = 0; i < QK_K; ++i) {
      const double a = (double)ls[i / 32] * kIQ4Levels[idx[i]];
      saa += a * a;
      sax += a * src[i];
    }
    if (saa > 0) {
      const uint16_t h2 = fp32_to_fp16((float)(sax / saa));
      if ((h2 & 0x7c00) != 0x7c00) {
        const double e2 = requant(fp16_to_fp32(h2), idx2);
        if (e2 < err) {
          hd = h2;
          std::memcpy(idx, idx2, sizeof(idx));
        }
      }
    }
    b->d = hd;
    b->scales_h = 0;
    std::memset(b->scales_l, 0, sizeof(b->scales_l));
    for (int j = 0; j < 8; ++j) {
      const int u = ls[j] + 32;
      b->scales_l[j / 2] |= (uint8_t)((u & 0x0f) << (4 * (j % 2)));
      b->scales_h |= (uint16_t)((u >> 4) << (2 * j));
    }
    for (int j = 0; j < 8; ++j) pack_nibbles32(idx + 32 * j, b->qs + 16 * j);
  }
}

void dequantize_mxfp4(const void* src, float* dst, int64_t n) {
  const BlockMXFP4* b = static_cast<const BlockMXFP4*>(src);
  for (int64_t ib = 0; ib < n / QK_MXFP4; ++ib, ++b, dst += QK_MXFP4) {
    const float d = mxfp4_scale(b->e);
    for (int j = 0; j < 16; ++j) {
      dst[j] = (float)kMXFP4Levels[b->qs[j] & 0x0f] * d;
      dst[j + 16] = (float)kMXFP4Levels[b->qs[j] >> 4] * d;
    }
  }
}

// OCP MX recipe: shared exponent = floor(log2(amax)) - 2 (6 = 1.5 * 2^2 is the largest E2M1
// magnitude), then each element takes the nearest level (first in code order on ties).
void quantize_mxfp4(const float* src, void* dst, int64_t n) {
  BlockMXFP4* b = static_cast<BlockMXFP4*>(dst);
  uint8_t idx[QK_MXFP4];
  for (int64_t ib = 0; ib < n / QK_MXFP4; ++ib, ++b, src += QK_MXFP4) {
    const float amax = block_amax(src, QK_MXFP4, GgmlType::MXFP4);
    int e = 0;
    if (amax > 0) {
      int k;
      std::frexp(amax, &k);  // amax = f * 2^k, f in [0.5, 1): floor(log2 amax) = k - 1
      e = k - 1 - 2 + 127;
      e = e < 0 ? 0 : (e > 254 ? 254 : e);
    }
    b->e = (uint8_t)e;
    const float d = mxfp4_scale(b->e);
    for (int i = 0; i < QK_MXFP4; ++i) {
      int best = 0;
      float best_err = std::fabs(d * (float)kMXFP4Levels[0] - src[i]);
      for (int k = 1; k < 16; ++k) {
        const float err = std::fabs(d * (float)kMXFP4Levels[k] - src[i]);
        if (err < best_err) {
          best_err = err;
          best = k;
        }
      }
      idx[i] = (uint8_t)best;
    }
    pack_nibbles32(idx, b->qs);
  }
}

}  // namespace moeflow::quant_detail
