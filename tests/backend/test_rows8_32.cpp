// MXFP4_R8, the CPU's interleaved MXFP4 layout (backend/cpu/mxfp4_rows8.h): repacked weights give,
// at every SIMD level, the bits of that level's MXFP4 kernel on the GGUF rows, for matvec (the
// AVX2 and AVX-512 8-row kernels, whose float lanes and summation tree are MXFP4's), matmul of any
// token count, heads, threads, odd block counts and the E8M0 scales' subnormal end; the repacking
// is undone exactly; and misuse fails with a message.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/mxfp4_rows8.h"
#include "backend/cpu/q8_0_rows8.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernel_levels.h"
#include "quant/blocks.h"
#include "ref_formats.h"

namespace moeflow {
namespace {

// A base type, its interleaved layout and the layout's own repack / unpack.
struct Format {
  GgmlType base, r8;
  void (*repack)(int64_t, void*, size_t, int64_t);
  void (*unpack)(int64_t, const void*, void*);
};
const Format kFormats[] = {
    {GgmlType::MXFP4, GgmlType::MXFP4_R8, kernels::mxfp4_rows8::repack,
     kernels::mxfp4_rows8::unpack},
    {GgmlType::Q8_0, GgmlType::Q8_0_R8, kernels::q8_0_rows8::repack, kernels::q8_0_rows8::unpack},
};

using test::LevelGuard;
using test::levels;
using test::random_floats;

using test::same_bits;

struct GroupedWeights {
  std::vector<uint8_t> plain, packed;
};
// rows x cols weights of f.base (scales spread over their range when `wide`, to reach the
// subnormal and large ends), and a copy whose first `grouped` rows are repacked.
GroupedWeights make_grouped(const Format& f, int64_t rows, int64_t cols, int64_t grouped,
                            std::mt19937& rng, bool wide = false) {
  GroupedWeights w;
  w.plain = test::random_weights(f.base, rows, cols, rng);
  if (wide && f.base == GgmlType::MXFP4) {
    auto* b = reinterpret_cast<BlockMXFP4*>(w.plain.data());
    const uint8_t es[] = {0, 1, 2, 3, 60, 127, 128, 150};
    for (int64_t i = 0; i < rows * cols / 32; ++i) b[i].e = es[rng() % 8];
  }
  if (wide && f.base == GgmlType::Q8_0) {
    auto* b = reinterpret_cast<BlockQ8_0*>(w.plain.data());
    const float ds[] = {6e-8f, 3e-5f, 1e-3f, 0.5f, 7.f, 60000.f, -2e-6f, -300.f};
    for (int64_t i = 0; i < rows * cols / 32; ++i) b[i].d = fp32_to_fp16(ds[rng() % 8]);
  }
  w.packed = w.plain;
  f.repack(cols, w.packed.data(), row_bytes(f.base, cols), grouped / 8);
  return w;
}

TEST(Rows8x32, RepackedProductsAreTheBaseBitsAtEveryLevel) {
  ThreadPool pool2(2);
  for (const Format& f : kFormats) {
    for (const auto& level : levels()) {
      LevelGuard guard(level);
      // 3 blocks (odd, one pair and the last block alone), gpt-oss's 90, 5 x 32.
      for (int64_t cols : {96, 2880, 160}) {
        for (bool wide : {false, true}) {
          std::mt19937 rng(7 + (int)cols + wide);
          const int64_t rows = 29, grouped = 24;  // three groups and a tail of 5
          const GroupedWeights w = make_grouped(f, rows, cols, grouped, rng, wide);
          ASSERT_NE(w.plain, w.packed);
          const std::string where = std::string(type_name(f.r8)) + " " + level +
                                    " cols=" + std::to_string(cols) +
                                    " wide=" + std::to_string(wide);
          // 300 tokens of 2880 columns are three passes of matmul (~1 MiB of activations each),
          // which keep the restored groups from the first (matmul.cpp, kKeepPackedBytes).
          std::vector<int64_t> counts = {1, 3, 8, 13, 40};
          if (cols == 2880) counts.push_back(300);
          for (int64_t n_tok : counts) {
            for (ThreadPool* pool : {(ThreadPool*)nullptr, &pool2}) {
              const auto X = random_floats(n_tok * cols, rng);
              std::vector<float> Y(n_tok * rows), Yb(n_tok * rows);
              matmul(f.r8, w.packed.data(), rows, cols, X.data(), n_tok, Y.data(), pool);
              matmul(f.base, w.plain.data(), rows, cols, X.data(), n_tok, Yb.data(), pool);
              for (int64_t i = 0; i < n_tok * rows; ++i)
                ASSERT_TRUE(same_bits(Yb[i], Y[i]))
                    << where << " tokens=" << n_tok << " token " << i / rows << " row " << i % rows
                    << ": " << Y[i] << " vs " << Yb[i];
            }
          }
          // One token through matvec is the one-row kernel's result too (vec_dot, row by row).
          const auto x = random_floats(cols, rng);
          std::vector<float> y(rows);
          matvec(f.r8, w.packed.data(), rows, cols, x.data(), y.data(), &pool2);
          std::vector<uint8_t> act;
          quantize_activation(f.base, x.data(), cols, act);
          for (int64_t r = 0; r < rows; ++r) {
            const float ref =
                vec_dot(f.base, cols, w.plain.data() + r * row_bytes(f.base, cols), act.data());
            ASSERT_TRUE(same_bits(ref, y[r])) << where << " row " << r;
          }
        }
      }
    }
  }
}

TEST(Rows8x32, UnpackRestoresTheGgufRows) {
  for (const Format& f : kFormats) {
    std::mt19937 rng(2);
    const int64_t rows = 16, cols = 2880;
    const GroupedWeights w = make_grouped(f, rows, cols, rows, rng, true);
    const size_t group = 8 * row_bytes(f.base, cols);
    std::vector<uint8_t> back(w.plain.size());
    for (int g = 0; g < 2; ++g)
      f.unpack(cols, w.packed.data() + g * group, back.data() + g * group);
    EXPECT_EQ(w.plain, back) << type_name(f.r8);
  }
}

TEST(Rows8x32, HeadsOfWholeGroupsMatchMatvec) {
  ThreadPool pool2(2);
  for (const Format& f : kFormats) {
    std::mt19937 rng(3);
    const int64_t rows = 16, cols = 512, heads = 3;
    const GroupedWeights w = make_grouped(f, rows * heads, cols, rows * heads, rng);
    const size_t head_bytes = row_bytes(f.base, cols) * rows;
    const auto X = random_floats(heads * cols, rng);
    for (const auto& level : levels()) {
      LevelGuard guard(level);
      std::vector<float> Y(heads * rows), one(rows);
      matvec_heads(f.r8, w.packed.data(), head_bytes, heads, rows, cols, X.data(), cols, Y.data(),
                   rows, &pool2);
      for (int64_t h = 0; h < heads; ++h) {
        matvec(f.base, w.plain.data() + h * head_bytes, rows, cols, X.data() + h * cols, one.data(),
               nullptr);
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_TRUE(same_bits(one[r], Y[h * rows + r]))
              << type_name(f.r8) << " " << level << " head " << h << " row " << r;
      }
    }
  }
}

TEST(Rows8x32, PublicRepackChoosesTheLayoutAboveScalar) {
  for (const Format& f : kFormats) {
    std::mt19937 rng(11);
    const int64_t rows = 16, cols = 320, n_mat = 2;
    const auto plain = test::random_weights(f.base, rows * n_mat, cols, rng);
    for (const auto& level : levels()) {
      LevelGuard guard(level);
      if (level == "scalar") {
        // The scalar level would unpack every group: the weights stay as they are.
        EXPECT_EQ(f.base, cpu_repacked_type(f.base, rows)) << level;
        EXPECT_THROW(repack_for_cpu(f.base, std::vector<uint8_t>(plain).data(), cols, rows, n_mat),
                     Error);
        continue;
      }
      EXPECT_EQ(f.r8, cpu_repacked_type(f.base, rows));
      EXPECT_EQ(f.base, cpu_repacked_type(f.base, rows + 4));  // not whole groups
      auto data = plain;
      repack_for_cpu(f.base, data.data(), cols, rows, n_mat);
      auto direct = plain;
      f.repack(cols, direct.data(), row_bytes(f.base, cols), rows * n_mat / 8);
      EXPECT_EQ(direct, data);
      EXPECT_NE(plain, data);
    }
  }
}

TEST(Rows8x32, MisuseFailsWithAMessage) {
  for (const Format& f : kFormats) {
    std::mt19937 rng(5);
    const int64_t cols = 64;
    auto w = test::random_weights(f.base, 16, cols, rng);
    std::vector<uint8_t> act;
    const auto x = random_floats(cols, rng);
    quantize_activation(f.r8, x.data(), cols, act);
    try {
      vec_dot(f.r8, cols, w.data(), act.data());
      FAIL() << "vec_dot on an interleaved row";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("interleaved"), std::string::npos) << e.what();
    }
    std::vector<float> y(2 * 12);
    std::vector<float> xs(2 * cols, 0.5f);
    EXPECT_THROW(matvec_heads(f.r8, w.data(), 12 * row_bytes(f.base, cols), 2, 12, cols, xs.data(),
                              cols, y.data(), 12, nullptr),
                 Error);
    const std::string name = type_name(f.r8);
    EXPECT_FALSE(is_known_type((uint32_t)f.r8)) << name;
    EXPECT_FALSE(type_from_name(name).has_value()) << name;
    EXPECT_EQ(name, std::string(type_name(f.base)) + "_R8");
  }
}

}  // namespace
}  // namespace moeflow
