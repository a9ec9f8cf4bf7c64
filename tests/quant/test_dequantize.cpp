// dequantize_row against the independent float64 decoder on random valid blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "quant/quant.h"
#include "reference_decoder.h"

namespace moeflow {
namespace {

// Where each format keeps its fp16 scales (byte offsets inside a block): random bytes there
// could be Inf/NaN, which no valid file holds, so they are replaced by random finite halves.
std::vector<int> half_fields(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
    case GgmlType::F16: return {0};
    case GgmlType::Q2_K: return {80, 82};
    case GgmlType::Q3_K: return {108};
    case GgmlType::Q6_K: return {208};
    default: return {};
  }
}

std::vector<uint8_t> random_blocks(GgmlType t, int nblocks, std::mt19937_64& rng) {
  const TypeTraits& tr = type_traits(t);
  std::vector<uint8_t> buf(tr.type_size * (size_t)nblocks);
  for (auto& b : buf) b = (uint8_t)rng();
  for (int ib = 0; ib < nblocks; ++ib) {
    uint8_t* blk = buf.data() + ib * tr.type_size;
    for (int off : half_fields(t)) {
      uint16_t h;
      do h = (uint16_t)rng();
      while (((h >> 10) & 31) == 31);
      blk[off] = (uint8_t)h;
      blk[off + 1] = (uint8_t)(h >> 8);
    }
    if (t == GgmlType::BF16 || t == GgmlType::F32) {
      // keep the exponent below all-ones (finite values only)
      const int hi = (int)tr.type_size - 1;
      if ((blk[hi] & 0x7f) == 0x7f) blk[hi] &= 0xbf;
    }
    if (t == GgmlType::Q8_K) {
      std::uniform_real_distribution<float> u(-100.0f, 100.0f);
      const float d = u(rng);
      std::memcpy(blk, &d, 4);
    }
    if (t == GgmlType::MXFP4) blk[0] = (uint8_t)(rng() % 240);  // 12 * 2^(e-127) stays finite
  }
  return buf;
}

class Dequantize : public ::testing::TestWithParam<GgmlType> {};

TEST_P(Dequantize, MatchesIndependentDecoderOnRandomBlocks) {
  const GgmlType t = GetParam();
  const TypeTraits& tr = type_traits(t);
  std::mt19937_64 rng(1234 + (uint64_t)t);
  const int nblocks = tr.block_size == 1 ? 4096 : 96;
  const std::vector<uint8_t> buf = random_blocks(t, nblocks, rng);
  const int64_t n = nblocks * tr.block_size;
  std::vector<float> got((size_t)n);
  dequantize_row(t, buf.data(), got.data(), n);

  std::vector<testref::RefValue> ref;
  int bad = 0;
  for (int ib = 0; ib < nblocks; ++ib) {
    testref::decode_block(t, buf.data() + ib * tr.type_size, ref);
    ASSERT_EQ((int64_t)ref.size(), tr.block_size) << tr.name;
    for (int i = 0; i < (int)ref.size(); ++i) {
      const float g = got[(size_t)(ib * tr.block_size + i)];
      // two or three float roundings of terms bounded by mag
      const double tol = 4e-7 * ref[i].mag + 1e-37;
      if (!(std::fabs((double)g - ref[i].v) <= tol) && bad++ < 5)
        ADD_FAILURE() << tr.name << " block " << ib << " elem " << i << ": got " << g << " want "
                      << ref[i].v;
    }
  }
  EXPECT_EQ(bad, 0) << tr.name;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, Dequantize,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16,
                                           GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                                           GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K,
                                           GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
                                           GgmlType::Q6_K, GgmlType::Q8_K, GgmlType::IQ4_NL,
                                           GgmlType::IQ4_XS, GgmlType::MXFP4),
                         [](const auto& info) { return std::string(type_name(info.param)); });

TEST(DequantizeErrors, UnsupportedTypeIsNamed) {
  uint8_t buf[1024] = {};
  float out[256];
  for (GgmlType t : {GgmlType::IQ2_XXS, GgmlType::Q8_1, GgmlType::TQ1_0, GgmlType::I32}) {
    try {
      dequantize_row(t, buf, out, 256);
      ADD_FAILURE() << "no error for " << type_name(t);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(type_name(t)), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(dequantize_row((GgmlType)77, buf, out, 32), Error);
}

TEST(DequantizeErrors, PartialBlockIsRejected) {
  uint8_t buf[256] = {};
  float out[64];
  EXPECT_THROW(dequantize_row(GgmlType::Q4_0, buf, out, 33), Error);
  EXPECT_THROW(dequantize_row(GgmlType::Q4_K, buf, out, 32), Error);
  EXPECT_THROW(dequantize_row(GgmlType::Q8_0, buf, out, -32), Error);
  EXPECT_NO_THROW(dequantize_row(GgmlType::Q4_K, buf, out, 0));
}

}  // namespace
}  // namespace moeflow
