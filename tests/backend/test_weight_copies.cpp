// The CPU backend's weight copies (offloading's resident non-expert weights): a weight is copied
// once into memory of its own with the same bytes; a lookup table (the token embedding) is left
// where it lies and gives the same rows.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/matmul.h"
#include "core/ggml_type.h"
#include "core/tensor.h"
#include "quant/quant.h"

namespace moeflow {
namespace {

struct QuantTable {
  std::vector<uint8_t> bytes;
  TensorView view;
};

QuantTable q4k_table(int64_t cols, int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  QuantTable t;
  const size_t rb = row_bytes(GgmlType::Q4_K, cols);
  t.bytes.resize(rb * (size_t)rows);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& x : row) x = g(rng);
    quantize_row(GgmlType::Q4_K, row.data(), t.bytes.data() + rb * (size_t)r, cols);
  }
  t.view = matrix_view(t.bytes.data(), GgmlType::Q4_K, cols, rows);
  return t;
}

TEST(WeightCopies, WeightsAreCopiedOnceTablesStayWhereTheyLie) {
  CpuBackend be(nullptr);
  std::vector<std::pair<const void*, uint64_t>> dropped;
  be.set_copy_weights(true, [&](const void* p, uint64_t n) { dropped.emplace_back(p, n); });
  const QuantTable w = q4k_table(512, 8, 1), emb = q4k_table(512, 64, 2);

  const TensorView cw = be.adopt_weight(w.view);
  EXPECT_NE(cw.data, w.view.data);
  EXPECT_EQ(std::memcmp(cw.data, w.view.data, w.bytes.size()), 0);
  EXPECT_EQ(be.adopt_weight(w.view).data, cw.data);  // one copy per source range
  EXPECT_EQ(be.copied_weight_bytes(), w.bytes.size());
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].first, w.view.data);

  const TensorView te = be.adopt_lookup_table(emb.view);
  EXPECT_EQ(te.data, emb.view.data);
  EXPECT_EQ(be.copied_weight_bytes(), w.bytes.size());
  EXPECT_EQ(dropped.size(), 1u);  // the table's pages are the file's: nothing to drop

  // Rows read through the table equal the rows of a copy of it.
  const TensorView ce = be.adopt_weight(emb.view);
  const std::vector<int32_t> ids = {0, 63, 17, 17, 5};
  std::vector<float> a(512 * ids.size()), b(512 * ids.size());
  be.get_rows(te, ids, matrix_view(a.data(), GgmlType::F32, 512, (int64_t)ids.size()));
  be.get_rows(ce, ids, matrix_view(b.data(), GgmlType::F32, 512, (int64_t)ids.size()));
  EXPECT_EQ(a, b);
  std::vector<float> ref(512);
  dequantize_row(GgmlType::Q4_K, emb.bytes.data() + row_bytes(GgmlType::Q4_K, 512) * 63, ref.data(),
                 512);
  EXPECT_EQ(std::vector<float>(a.begin() + 512, a.begin() + 1024), ref);
}

TEST(WeightCopies, WithoutCopiesEveryWeightStaysWhereItLies) {
  CpuBackend be(nullptr);
  const QuantTable w = q4k_table(256, 4, 3);
  EXPECT_EQ(be.adopt_weight(w.view).data, w.view.data);
  EXPECT_EQ(be.adopt_lookup_table(w.view).data, w.view.data);
  EXPECT_EQ(be.copied_weight_bytes(), 0u);
}

// y = W x through the backend, for `tokens` random rows x.
std::vector<float> products(CpuBackend& be, const TensorView& w, int64_t tokens) {
  std::mt19937 rng(9);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x((size_t)(w.cols() * tokens)), y((size_t)(w.rows() * tokens));
  for (float& v : x) v = g(rng);
  be.matmul(w, matrix_view(x.data(), GgmlType::F32, w.cols(), tokens),
            matrix_view(y.data(), GgmlType::F32, w.rows(), tokens));
  return y;
}

// Weights the model only multiplies are copied into the CPU kernels' own layout where the SIMD
// level has one (Q4_K -> Q4_K_R8 at AVX2 and above): the same products, bit for bit, one token
// or several. Weights the predicate refuses, and sub-blocks of a wider matrix, keep the file's.
TEST(WeightCopies, MatmulOnlyWeightsAreCopiedIntoTheCpuLayout) {
  CpuBackend be(nullptr);
  const QuantTable w = q4k_table(512, 16, 4), other = q4k_table(512, 16, 5);
  be.set_copy_weights(true, {}, [&](const TensorView& v) { return v.data == w.view.data; });
  const GgmlType expect = cpu_repacked_type(GgmlType::Q4_K, 16);
  const TensorView cw = be.adopt_weight(w.view);
  EXPECT_EQ(cw.type, expect);
  EXPECT_EQ(be.repacked_weight_bytes(), expect == GgmlType::Q4_K ? 0u : w.bytes.size());
  if (expect != GgmlType::Q4_K) {
    EXPECT_NE(std::memcmp(cw.data, w.view.data, w.bytes.size()), 0);
  }
  CpuBackend plain(nullptr);
  for (int64_t tokens : {1, 3})
    EXPECT_EQ(products(be, cw, tokens), products(plain, w.view, tokens));
  EXPECT_EQ(be.adopt_weight(w.view).type, expect);  // the one copy, with its layout

  const TensorView co = be.adopt_weight(other.view);
  EXPECT_EQ(co.type, GgmlType::Q4_K);
  EXPECT_EQ(std::memcmp(co.data, other.view.data, other.bytes.size()), 0);

  // Columns 0..255 of every row of w: not dense, copied as it lies (its rows keep their stride).
  CpuBackend any(nullptr);
  any.set_copy_weights(true, {}, [](const TensorView&) { return true; });
  const TensorView half =
      strided_matrix_view(w.view.data, GgmlType::Q4_K, 256, 16, w.view.row_stride());
  EXPECT_EQ(any.adopt_weight(half).type, GgmlType::Q4_K);
  EXPECT_EQ(any.repacked_weight_bytes(), 0u);
}

}  // namespace
}  // namespace moeflow
