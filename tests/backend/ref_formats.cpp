#include "ref_formats.h"

#include <cmath>
#include <cstddef>
#include <cstring>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/k_scales.h"

namespace moeflow::test {
namespace {

constexpr int kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                            1,    13,   25,  38,  53,  69,  89,  113};
// E2M1 values: sign, 2-bit exponent, 1-bit mantissa.
double e2m1(int nib) {
  const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (nib & 8 ? -1 : 1) * mag[nib & 7];
}

double h(uint16_t v) { return (double)fp16_to_fp32(v); }

template <typename B>
const B* blocks(const void* p) {
  return static_cast<const B*>(p);
}

void put(RefRow& r, int64_t i, double scale_part, double min_part) {
  r.val[i] = scale_part - min_part;
  r.mag[i] = std::fabs(scale_part) + std::fabs(min_part);
  r.add[i] = -min_part;
}

}  // namespace

RefRow ref_decode(GgmlType t, const void* row, int64_t n) {
  RefRow r;
  r.val.assign(n, 0);
  r.mag.assign(n, 0);
  r.add.assign(n, 0);
  switch (t) {
    case GgmlType::F32:
      for (int64_t i = 0; i < n; ++i) put(r, i, static_cast<const float*>(row)[i], 0);
      break;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) put(r, i, h(static_cast<const uint16_t*>(row)[i]), 0);
      break;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i)
        put(r, i, bf16_to_fp32(static_cast<const uint16_t*>(row)[i]), 0);
      break;
    case GgmlType::Q4_0:
      for (int64_t b = 0; b < n / 32; ++b) {
        const auto& x = blocks<BlockQ4_0>(row)[b];
        for (int j = 0; j < 32; ++j) {
          const int q = j < 16 ? (x.qs[j] & 15) : (x.qs[j - 16] >> 4);
          put(r, b * 32 + j, h(x.d) * (q - 8), 0);
        }
      }
      break;
    case GgmlType::Q4_1:
      for (int64_t b = 0; b < n / 32; ++b) {
        const auto& x = blocks<BlockQ4_1>(row)[b];
        for (int j = 0; j < 32; ++j) {
          const int q = j < 16 ? (x.qs[j] & 15) : (x.qs[j - 16] >> 4);
          put(r, b * 32 + j, h(x.d) * q, -h(x.m));
        }
      }
      break;
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: {
      const bool one = t == GgmlType::Q5_1;
      const size_t bs = one ? sizeof(BlockQ5_1) : sizeof(BlockQ5_0);
      for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* p = static_cast<const uint8_t*>(row) + b * bs;
        uint16_t d, m = 0;
        std::memcpy(&d, p, 2);
        if (one) std::memcpy(&m, p + 2, 2);
        const uint8_t* qh = p + (one ? 4 : 2);
        const uint8_t* qs = qh + 4;
        for (int j = 0; j < 32; ++j) {
          const int lo = j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
          const int hi = (qh[j / 8] >> (j % 8)) & 1;
          const int q = lo + 16 * hi;
          if (one)
            put(r, b * 32 + j, h(d) * q, -h(m));
          else
            put(r, b * 32 + j, h(d) * (q - 16), 0);
        }
      }
      break;
    }
    case GgmlType::Q8_0:
      for (int64_t b = 0; b < n / 32; ++b) {
        const auto& x = blocks<BlockQ8_0>(row)[b];
        for (int j = 0; j < 32; ++j) put(r, b * 32 + j, h(x.d) * x.qs[j], 0);
      }
      break;
    case GgmlType::IQ4_NL:
      for (int64_t b = 0; b < n / 32; ++b) {
        const auto& x = blocks<BlockIQ4_NL>(row)[b];
        for (int j = 0; j < 32; ++j) {
          const int q = j < 16 ? (x.qs[j] & 15) : (x.qs[j - 16] >> 4);
          put(r, b * 32 + j, h(x.d) * kIq4nl[q], 0);
        }
      }
      break;
    case GgmlType::MXFP4:
      for (int64_t b = 0; b < n / 32; ++b) {
        const auto& x = blocks<BlockMXFP4>(row)[b];
        const double scale = std::ldexp(1.0, (int)x.e - 127);
        for (int j = 0; j < 32; ++j) {
          const int q = j < 16 ? (x.qs[j] & 15) : (x.qs[j - 16] >> 4);
          put(r, b * 32 + j, scale * e2m1(q), 0);
        }
      }
      break;
    case GgmlType::Q2_K:
      for (int64_t b = 0; b < n / 256; ++b) {
        const auto& x = blocks<BlockQ2_K>(row)[b];
        for (int j = 0; j < 256; ++j) {
          // Element j: 128-half, then 2-bit plane, then byte within the half.
          const int half = j / 128, plane = (j % 128) / 32, l = j % 32;
          const int q = (x.qs[half * 32 + l] >> (2 * plane)) & 3;
          const int g = j / 16;
          put(r, b * 256 + j, h(x.d) * (x.scales[g] & 15) * q, h(x.dmin) * (x.scales[g] >> 4));
        }
      }
      break;
    case GgmlType::Q3_K:
      for (int64_t b = 0; b < n / 256; ++b) {
        const auto& x = blocks<BlockQ3_K>(row)[b];
        int sc[16];
        for (int g = 0; g < 16; ++g) {
          // 16 scales of 6 bits: low 4 bits in bytes 0..7 (two per byte), top 2 bits in 8..11.
          const int low = (x.scales[g % 8] >> (4 * (g / 8))) & 15;
          const int high = (x.scales[8 + g % 4] >> (2 * (g / 4))) & 3;
          sc[g] = (low | (high << 4)) - 32;
        }
        for (int j = 0; j < 256; ++j) {
          const int half = j / 128, plane = (j % 128) / 32, l = j % 32;
          const int lo = (x.qs[half * 32 + l] >> (2 * plane)) & 3;
          const int hbit = (x.hmask[l] >> (half * 4 + plane)) & 1;
          put(r, b * 256 + j, h(x.d) * sc[j / 16] * (lo - (hbit ? 0 : 4)), 0);
        }
      }
      break;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      for (int64_t b = 0; b < n / 256; ++b) {
        const bool five = t == GgmlType::Q5_K;
        const uint8_t* p =
            static_cast<const uint8_t*>(row) + b * (five ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K));
        uint16_t d, dmin;
        std::memcpy(&d, p, 2);
        std::memcpy(&dmin, p + 2, 2);
        const uint8_t* s = p + 4;
        const uint8_t* qh = five ? p + 16 : nullptr;
        const uint8_t* qs = five ? p + 48 : p + 16;
        for (int j = 0; j < 256; ++j) {
          const int sub = j / 32;  // 8 sub-blocks of 32 with a 6-bit scale and min each
          int sc, m;
          if (sub < 4) {
            sc = s[sub] & 63;
            m = s[sub + 4] & 63;
          } else {
            sc = (s[sub + 4] & 15) | ((s[sub - 4] >> 6) << 4);
            m = (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
          }
          const int chunk = j / 64, l = j % 32;
          const bool upper = (j % 64) >= 32;
          int q = upper ? (qs[chunk * 32 + l] >> 4) : (qs[chunk * 32 + l] & 15);
          if (five) q += 16 * ((qh[l] >> sub) & 1);
          put(r, b * 256 + j, h(d) * sc * q, h(dmin) * m);
        }
      }
      break;
    case GgmlType::Q6_K:
      for (int64_t b = 0; b < n / 256; ++b) {
        const auto& x = blocks<BlockQ6_K>(row)[b];
        for (int j = 0; j < 256; ++j) {
          const int half = j / 128, k = j % 128, quarter = k / 32, l = k % 32;
          const uint8_t lb = x.ql[half * 64 + (quarter & 1) * 32 + l];
          const int lo = quarter < 2 ? (lb & 15) : (lb >> 4);
          const int hi = (x.qh[half * 32 + l] >> (2 * quarter)) & 3;
          put(r, b * 256 + j, h(x.d) * x.scales[j / 16] * ((lo | (hi << 4)) - 32), 0);
        }
      }
      break;
    case GgmlType::IQ4_XS:
      for (int64_t b = 0; b < n / 256; ++b) {
        const auto& x = blocks<BlockIQ4_XS>(row)[b];
        for (int j = 0; j < 256; ++j) {
          const int ib = j / 32, k = j % 32;
          const int ls =
              ((x.scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((x.scales_h >> (2 * ib)) & 3) << 4);
          const uint8_t byte = x.qs[ib * 16 + k % 16];
          const int q = k < 16 ? (byte & 15) : (byte >> 4);
          put(r, b * 256 + j, h(x.d) * (ls - 32) * kIq4nl[q], 0);
        }
      }
      break;
    default: break;
  }
  return r;
}

std::vector<double> ref_decode_activation(GgmlType w, const void* act, int64_t n) {
  std::vector<double> out(n);
  switch (w) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<const float*>(act)[i];
      break;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS:
      for (int64_t b = 0; b < n / 256; ++b) {
        const auto& x = blocks<BlockQ8_K>(act)[b];
        for (int j = 0; j < 256; ++j) out[b * 256 + j] = (double)x.d * x.qs[j];
      }
      break;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
      for (int64_t b = 0; b < n / 32; ++b) {
        const auto& x = blocks<BlockQ8_1>(act)[b];
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = h(x.d) * x.qs[j];
      }
      break;
    default:
      for (int64_t b = 0; b < n / 32; ++b) {
        const auto& x = blocks<BlockQ8_0>(act)[b];
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = h(x.d) * x.qs[j];
      }
  }
  return out;
}

std::vector<double> ref_activation_block_sums(GgmlType w, const void* act, int64_t n) {
  std::vector<double> out;
  if (w != GgmlType::Q4_1 && w != GgmlType::Q5_1) return out;
  for (int64_t b = 0; b < n / 32; ++b) out.push_back(h(blocks<BlockQ8_1>(act)[b].s));
  return out;
}

std::vector<uint8_t> random_weights(GgmlType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  const size_t rb = row_bytes(t, cols);
  std::vector<uint8_t> w(rb * rows);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w) b = (uint8_t)byte(rng);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto half = [&](float lo, float hi) {
    return fp32_to_fp16(lo + (hi - lo) * (0.5f + 0.5f * u(rng)));
  };
  auto set16 = [&](uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); };
  const TypeTraits& tr = type_traits(t);
  const int64_t nblk = rows * (cols / tr.block_size);
  for (int64_t b = 0; b < nblk; ++b) {
    uint8_t* p = w.data() + b * tr.type_size;
    switch (t) {
      case GgmlType::F32: {
        const float v = u(rng) * 2.f;
        std::memcpy(p, &v, 4);
        break;
      }
      case GgmlType::F16: set16(p, fp32_to_fp16(u(rng) * 2.f)); break;
      case GgmlType::BF16: set16(p, fp32_to_bf16(u(rng) * 2.f)); break;
      case GgmlType::Q4_1:
      case GgmlType::Q5_1:
        set16(p, half(0.001f, 0.05f));
        set16(p + 2, fp32_to_fp16(u(rng) * 0.5f));
        break;
      case GgmlType::MXFP4: p[0] = (uint8_t)(120 + byte(rng) % 10); break;
      case GgmlType::Q2_K:
        set16(p + offsetof(BlockQ2_K, d), half(0.001f, 0.05f));
        set16(p + offsetof(BlockQ2_K, dmin), half(0.001f, 0.05f));
        break;
      case GgmlType::Q3_K: set16(p + offsetof(BlockQ3_K, d), half(0.001f, 0.05f)); break;
      case GgmlType::Q4_K:
      case GgmlType::Q5_K:
        set16(p, half(0.001f, 0.05f));
        set16(p + 2, half(0.001f, 0.05f));
        break;
      case GgmlType::Q6_K: set16(p + offsetof(BlockQ6_K, d), half(0.001f, 0.05f)); break;
      default: set16(p, half(0.001f, 0.05f)); break;  // d first: Q4_0 Q5_0 Q8_0 IQ4_NL IQ4_XS
    }
  }
  return w;
}

const std::vector<GgmlType>& kernel_types() {
  static const std::vector<GgmlType> types = {
      GgmlType::F32,    GgmlType::F16,   GgmlType::BF16, GgmlType::Q4_0,
      GgmlType::Q4_1,   GgmlType::Q5_0,  GgmlType::Q5_1, GgmlType::Q8_0,
      GgmlType::IQ4_NL, GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q3_K,
      GgmlType::Q4_K,   GgmlType::Q5_K,  GgmlType::Q6_K, GgmlType::IQ4_XS};
  return types;
}

float q4k_exact_reference(const BlockQ4_K* w, const BlockQ8_K* a, int64_t nb) {
  float acc = 0.f;
  for (int64_t i = 0; i < nb; ++i) {
    int64_t s = 0, m = 0;
    for (int sb = 0; sb < 8; ++sb) {
      uint8_t sc, mn;
      k4_get_scale_min(w[i].scales, sb, sc, mn);
      int64_t dot = 0;
      for (int e = 0; e < 32; ++e) {
        const uint8_t byte = w[i].qs[32 * (sb / 2) + e];
        dot += (int64_t)((sb % 2 ? byte >> 4 : byte) & 15) * a[i].qs[32 * sb + e];
      }
      s += sc * dot;
      m += mn * ((int64_t)a[i].bsums[2 * sb] + a[i].bsums[2 * sb + 1]);
    }
    const float d = fp16_to_fp32(w[i].d), dmin = fp16_to_fp32(w[i].dmin);
    acc = std::fma(d * a[i].d, (float)s, acc);
    acc = std::fma(-(dmin * a[i].d), (float)m, acc);
  }
  return acc;
}

}  // namespace moeflow::test
