// Q4_K_R8, the CPU's interleaved Q4_K layout (backend/cpu/q4k_rows8.h): repacked weights give, at
// every SIMD level, the exact-sum bits of Q4_K (test::q4k_exact_reference) for matvec, matmul of
// any token count (in place, no packing), heads and thread counts; the rows past the last whole
// group keep the GGUF layout and the Q4_K kernel of the level; and misuse fails with a message.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/q4k_rows8.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernel_levels.h"
#include "quant/blocks.h"
#include "ref_formats.h"

namespace moeflow {
namespace {

constexpr GgmlType kQ4K = GgmlType::Q4_K, kR8 = GgmlType::Q4_K_R8;

using test::LevelGuard;
using test::levels;
using test::random_floats;

using test::same_bits;

// rows x cols Q4_K weights, and a copy whose first `grouped` rows are repacked (the rest, the
// tail, stays in GGUF layout).
struct Weights {
  std::vector<uint8_t> plain, packed;
};
Weights make(int64_t rows, int64_t cols, int64_t grouped, std::mt19937& rng) {
  Weights w;
  w.plain = test::random_weights(kQ4K, rows, cols, rng);
  w.packed = w.plain;
  kernels::q4k_rows8::repack(cols, w.packed.data(), row_bytes(kQ4K, cols), grouped / 8);
  return w;
}

TEST(Q4kRows8, RepackedProductsAreTheExactSumsAtEveryLevel) {
  ThreadPool pool2(2);
  for (const auto& level : levels()) {
    LevelGuard guard(level);
    for (int64_t cols : {256, 2048}) {
      std::mt19937 rng(7 + (int)cols);
      const int64_t rows = 29, grouped = 24;  // three groups and a tail of 5
      const Weights w = make(rows, cols, grouped, rng);
      ASSERT_NE(w.plain, w.packed);
      const size_t rb = row_bytes(kQ4K, cols);
      for (int64_t n_tok : {1, 3, 5, 8, 13, 40}) {
        for (ThreadPool* pool : {(ThreadPool*)nullptr, &pool2}) {
          const auto X = random_floats(n_tok * cols, rng);
          std::vector<float> Y(n_tok * rows), Yq(n_tok * rows);
          matmul(kR8, w.packed.data(), rows, cols, X.data(), n_tok, Y.data(), pool);
          matmul(kQ4K, w.plain.data(), rows, cols, X.data(), n_tok, Yq.data(), pool);
          for (int64_t tok = 0; tok < n_tok; ++tok) {
            std::vector<uint8_t> act;
            quantize_activation(kQ4K, X.data() + tok * cols, cols, act);
            for (int64_t r = 0; r < rows; ++r) {
              const float y = Y[tok * rows + r];
              // Groups: the exact sums at every level. Tail rows: the level's Q4_K kernel (the
              // scalar one keeps its own order; the vector ones are the exact sums too).
              const float ref =
                  r < grouped || level != "scalar"
                      ? test::q4k_exact_reference(
                            reinterpret_cast<const BlockQ4_K*>(w.plain.data() + r * rb),
                            reinterpret_cast<const BlockQ8_K*>(act.data()), cols / QK_K)
                      : Yq[tok * rows + r];
              ASSERT_TRUE(same_bits(ref, y))
                  << level << " cols=" << cols << " tokens=" << n_tok << " token " << tok << " row "
                  << r << ": " << y << " vs " << ref;
              if (level != "scalar") {
                ASSERT_TRUE(same_bits(Yq[tok * rows + r], y));
              }
            }
          }
        }
      }
    }
  }
}

TEST(Q4kRows8, HeadsOfWholeGroupsMatchMatvec) {
  std::mt19937 rng(3);
  const int64_t rows = 16, cols = 512, heads = 3;
  const Weights w = make(rows * heads, cols, rows * heads, rng);
  const size_t head_bytes = row_bytes(kQ4K, cols) * rows;
  const auto X = random_floats(heads * cols, rng);
  ThreadPool pool2(2);
  for (const auto& level : levels()) {
    LevelGuard guard(level);
    std::vector<float> Y(heads * rows), one(rows);
    matvec_heads(kR8, w.packed.data(), head_bytes, heads, rows, cols, X.data(), cols, Y.data(),
                 rows, &pool2);
    for (int64_t h = 0; h < heads; ++h) {
      matvec(kR8, w.packed.data() + h * head_bytes, rows, cols, X.data() + h * cols, one.data(),
             nullptr);
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_TRUE(same_bits(one[r], Y[h * rows + r])) << level << " head " << h << " row " << r;
    }
  }
}

TEST(Q4kRows8, PublicRepackChoosesTheLayoutAndRewritesInPlace) {
  std::mt19937 rng(11);
  const int64_t rows = 16, cols = 768, n_mat = 2;
  const auto plain = test::random_weights(kQ4K, rows * n_mat, cols, rng);
  for (const auto& level : levels()) {
    LevelGuard guard(level);
    if (level == "scalar") {
      // The scalar level keeps its own Q4_K kernel: nothing is repacked.
      EXPECT_EQ(kQ4K, cpu_repacked_type(kQ4K, rows));
      continue;
    }
    EXPECT_EQ(kR8, cpu_repacked_type(kQ4K, rows));
    EXPECT_EQ(kQ4K, cpu_repacked_type(kQ4K, rows + 4));  // not whole groups
    EXPECT_EQ(GgmlType::Q6_K, cpu_repacked_type(GgmlType::Q6_K, rows));
    auto data = plain;
    repack_for_cpu(kQ4K, data.data(), cols, rows, n_mat);
    auto direct = plain;
    kernels::q4k_rows8::repack(cols, direct.data(), row_bytes(kQ4K, cols), rows * n_mat / 8);
    EXPECT_EQ(direct, data);
    const auto X = random_floats(cols, rng);
    for (int64_t m = 0; m < n_mat; ++m) {
      std::vector<float> a(rows), b(rows);
      const size_t off = m * rows * row_bytes(kQ4K, cols);
      matvec(kR8, data.data() + off, rows, cols, X.data(), a.data(), nullptr);
      matvec(kQ4K, plain.data() + off, rows, cols, X.data(), b.data(), nullptr);
      for (int64_t r = 0; r < rows; ++r) ASSERT_TRUE(same_bits(a[r], b[r])) << level << " " << r;
    }
  }
}

TEST(Q4kRows8, MisuseFailsWithAMessage) {
  std::mt19937 rng(5);
  const int64_t cols = 256;
  auto w = test::random_weights(kQ4K, 16, cols, rng);
  std::vector<uint8_t> act;
  const auto x = random_floats(cols, rng);
  quantize_activation(kR8, x.data(), cols, act);
  try {
    vec_dot(kR8, cols, w.data(), act.data());
    FAIL() << "vec_dot on an interleaved row";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("interleaved"), std::string::npos) << e.what();
  }
  std::vector<float> y(2 * 12);
  std::vector<float> xs(2 * cols, 0.5f);
  EXPECT_THROW(matvec_heads(kR8, w.data(), 12 * row_bytes(kQ4K, cols), 2, 12, cols, xs.data(), cols,
                            y.data(), 12, nullptr),
               Error);
  EXPECT_THROW(repack_for_cpu(GgmlType::Q6_K, w.data(), cols, 16, 1), Error);
  EXPECT_THROW(repack_for_cpu(kQ4K, w.data(), cols, 12, 1), Error);
  // An in-memory layout is no file type: a GGUF naming it is rejected, and no option names it.
  EXPECT_FALSE(is_known_type((uint32_t)kR8));
  EXPECT_FALSE(type_from_name("Q4_K_R8").has_value());
  EXPECT_STREQ("Q4_K_R8", type_name(kR8));
}

}  // namespace
}  // namespace moeflow
