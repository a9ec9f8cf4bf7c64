// The CUDA kernels' per-block arithmetic (backend/cuda/block_decode.h), compiled here by the
// host compiler, so it is checked on every CI machine, GPU or not: every chunk of every block
// format decodes to exactly the values quant/quant.h's dequantize_row produces (and to the
// float64 decoders of ref_formats.cpp), the activation quantizer keeps every value within half
// a step, and the integer chunk dot equals the float64 dot of the decoded operands.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/block_decode.h"
#include "core/fp16.h"
#include "quant/quant.h"
#include "ref_formats.h"

namespace moeflow::test {
namespace {

using cuda::Chunk32;

// Decodes chunk `c` of a row of type t (host path of the device decoder).
Chunk32 decode_chunk(GgmlType t, const uint8_t* row, int64_t c) {
  Chunk32 out{};
  const bool ok = cuda::with_format(t, [&](auto f) {
    using F = decltype(f);
    F::decode(row + (c / F::kChunks) * F::kBytes, (int)(c % F::kChunks), out);
  });
  EXPECT_TRUE(ok) << type_name(t);
  return out;
}

std::vector<GgmlType> quant_types() {
  std::vector<GgmlType> out;
  for (GgmlType t : kernel_types())
    if (type_traits(t).block_size > 1) out.push_back(t);
  return out;
}

TEST(BlockDecode, FormatTableMatchesTheBlockLayouts) {
  for (GgmlType t : quant_types()) {
    const bool ok = cuda::with_format(t, [&](auto f) {
      using F = decltype(f);
      EXPECT_EQ((size_t)F::kBytes, type_traits(t).type_size) << type_name(t);
      EXPECT_EQ(F::kChunks * 32, type_traits(t).block_size) << type_name(t);
    });
    EXPECT_TRUE(ok) << type_name(t) << " has no CUDA decoder";
  }
  EXPECT_FALSE(cuda::with_format(GgmlType::F16, [](auto) {}));
}

TEST(BlockDecode, EveryChunkEqualsDequantizeRowBitForBit) {
  std::mt19937 rng(7);
  for (GgmlType t : quant_types()) {
    const int64_t cols = 1024, rows = 8;
    const std::vector<uint8_t> w = random_weights(t, rows, cols, rng);
    const size_t rb = row_bytes(t, cols);
    std::vector<float> want(cols);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = w.data() + r * rb;
      dequantize_row(t, row, want.data(), cols);
      const RefRow ref = ref_decode(t, row, cols);
      for (int64_t c = 0; c < cols / 32; ++c) {
        const Chunk32 ch = decode_chunk(t, row, c);
        for (int i = 0; i < 32; ++i) {
          const int64_t e = c * 32 + i;
          const float got = cuda::chunk_value(ch, i);
          ASSERT_EQ(got, want[e]) << type_name(t) << " row " << r << " element " << e;
          ASSERT_NEAR(got, ref.val[e], 1e-6 * std::max(1.0, ref.mag[e]))
              << type_name(t) << " row " << r << " element " << e << " (float64 decoder)";
        }
      }
    }
  }
}

TEST(BlockDecode, CodeBooksAndScalarConversions) {
  const int iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  const int mx[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  for (uint32_t i = 0; i < 16; ++i) {
    EXPECT_EQ(cuda::iq4nl_value(i), iq4[i]) << i;
    EXPECT_EQ(cuda::mxfp4_value(i), mx[i]) << i;
  }
  // Every fp16 / bf16 bit pattern converts exactly as core/fp16.h does (NaN payloads kept).
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = cuda::f16_to_f32((uint16_t)h), b = fp16_to_fp32((uint16_t)h);
    uint32_t ab, bb;
    std::memcpy(&ab, &a, 4);
    std::memcpy(&bb, &b, 4);
    ASSERT_EQ(ab, bb) << "fp16 " << h;
    const float c = cuda::bf16_to_f32((uint16_t)h), d = bf16_to_fp32((uint16_t)h);
    std::memcpy(&ab, &c, 4);
    std::memcpy(&bb, &d, 4);
    ASSERT_EQ(ab, bb) << "bf16 " << h;
  }
  for (int e = 0; e < 256; ++e)
    ASSERT_EQ(cuda::e8m0_half((uint8_t)e), std::ldexp(1.0f, e - 128)) << "e8m0 " << e;
}

TEST(BlockDecode, FloatWeightsReadAsStored) {
  std::mt19937 rng(3);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    const int64_t cols = 97;
    const std::vector<uint8_t> w = random_weights(t, 1, cols, rng);
    std::vector<float> want(cols);
    dequantize_row(t, w.data(), want.data(), cols);
    for (int64_t i = 0; i < cols; ++i)
      ASSERT_EQ(cuda::float_weight(t, w.data(), i), want[i]) << type_name(t);
  }
}

TEST(BlockDecode, ActivationQuantizerWithinHalfAStep) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.f, 3.f);
  for (int rep = 0; rep < 200; ++rep) {
    float x[32];
    for (float& v : x) v = g(rng);
    if (rep == 0) std::fill(x, x + 32, 0.f);  // all zero: d = 0, q = 0
    if (rep == 1) x[5] = -1e4f;               // one large value
    int8_t q[32];
    const float d = cuda::quantize_chunk(x, q);
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    ASSERT_FLOAT_EQ(d, amax / 127.0f);
    for (int i = 0; i < 32; ++i) {
      ASSERT_GE(q[i], -127);
      ASSERT_LE(q[i], 127);
      ASSERT_LE(std::fabs((double)d * q[i] - x[i]), 0.5 * d * (1 + 1e-6) + 1e-30)
          << "rep " << rep << " i " << i;
    }
  }
}

TEST(BlockDecode, ChunkDotEqualsFloat64DotOfTheDecodedOperands) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.f, 1.f);
  for (GgmlType t : quant_types()) {
    const int64_t cols = 512;
    const std::vector<uint8_t> w = random_weights(t, 1, cols, rng);
    for (int64_t c = 0; c < cols / 32; ++c) {
      const Chunk32 ch = decode_chunk(t, w.data(), c);
      float x[32];
      for (float& v : x) v = g(rng);
      int8_t q[32];
      const float da = cuda::quantize_chunk(x, q);
      int32_t packed[8];
      std::memcpy(packed, q, 32);
      double want = 0, mag = 0;
      for (int i = 0; i < 32; ++i) {
        const double wv = (double)ch.d[i / 16] * cuda::chunk_q(ch, i) - ch.m[i / 16];
        want += wv * ((double)da * q[i]);
        mag += (std::fabs((double)ch.d[i / 16] * cuda::chunk_q(ch, i)) + std::fabs(ch.m[i / 16])) *
               std::fabs((double)da * q[i]);
      }
      const float got = cuda::chunk_dot(ch, packed, da);
      ASSERT_NEAR(got, want, 4e-7 * mag + 1e-30) << type_name(t) << " chunk " << c;
    }
  }
}

TEST(BlockDecode, Dp4aSumsSignedBytes) {
  std::mt19937 rng(9);
  for (int rep = 0; rep < 1000; ++rep) {
    const int32_t a = (int32_t)rng(), b = (int32_t)rng();
    int want = 17;
    for (int i = 0; i < 4; ++i) want += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    ASSERT_EQ(cuda::dp4a(a, b, 17), want);
  }
}

}  // namespace
}  // namespace moeflow::test
