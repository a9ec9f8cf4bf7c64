// KV cache and batching: batched prefill, token-by-token feeding and chunked prefill must all
// produce the same logits; rewinding the cache and refeeding reproduces them.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "model/kv_cache.h"
#include "runtime/engine.h"
#include "support/test_helpers.h"
#include "support/tiny_model.h"

namespace moeflow::test {
namespace {

std::string model_for(const std::string& arch) {
  TinySpec s;
  s.arch = arch;
  const std::string path = temp_path("kv_" + arch + ".gguf");
  write_tiny_model(s, path);
  return path;
}

TEST(KvCache, LayoutIsPositionMajorPerLayer) {
  KvCache kv(3, 10, 8, 4);
  EXPECT_EQ(kv.k(1, 2) - kv.k(0, 0), (1 * 10 + 2) * 8);
  EXPECT_EQ(kv.v(2, 9) - kv.v(0, 0), (2 * 10 + 9) * 4);
  EXPECT_EQ(kv.bytes(), 3u * 10 * (8 + 4) * sizeof(float));
}

TEST(KvCache, LayersKeepTheirOwnWidthsAndLayersWithoutRowsNone) {
  KvCache kv({{8, 4}, {0, 0}, {16, 0}, {6, 6}}, 10);
  EXPECT_EQ(kv.bytes(), 10u * (12 + 0 + 16 + 12) * sizeof(float));
  EXPECT_EQ(KvCache::bytes_for({{8, 4}, {0, 0}, {16, 0}, {6, 6}}, 10), kv.bytes());
  EXPECT_EQ(kv.k(2, 3) - kv.k(0, 0), 10 * 8 + 3 * 16);
  EXPECT_EQ(kv.k(3, 0) - kv.k(0, 0), 10 * 8 + 10 * 16);
  EXPECT_EQ(kv.v(3, 1) - kv.v(0, 0), 10 * 4 + 6);
  EXPECT_FALSE(kv.has(1));
  EXPECT_THROW(kv.k_view(1), Error);
  EXPECT_FALSE(kv.v_view(2));  // latent-style: no V rows
  EXPECT_EQ(kv.k_view(3).cols(), 6);
  EXPECT_EQ(kv.k_view(3).row_stride(), 6 * sizeof(float));
  EXPECT_THROW(KvCache({{0, 4}}, 10), Error);
}

TEST(KvCache, BatchedPrefillMatchesSequential) {
  for (const char* arch : {"llama", "qwen2moe", "qwen3moe", "olmoe"}) {
    const std::string path = model_for(arch);
    const std::vector<int32_t> toks = {4, 8, 15, 16, 23, 42, 4, 8, 1, 95, 50};
    EngineOptions opt;
    opt.n_threads = 2;
    opt.n_ctx = 32;
    Engine a(path, opt), b(path, opt);
    opt.batch = 4;
    Engine c(path, opt);
    std::vector<float> la, lb, lc;
    a.prefill(toks, true, &la);
    b.prefill_sequential(toks, true, &lb);
    c.prefill(toks, true, &lc);
    ASSERT_EQ(la.size(), lb.size());
    const size_t V = a.n_vocab();
    for (size_t t = 0; t < toks.size(); ++t) {
      // Batched matmul and single-token matvec may round differently, nothing more.
      EXPECT_LT(rel_max_diff(la.data() + t * V, lb.data() + t * V, V), 1e-5)
          << arch << " pos " << t;
      EXPECT_LT(rel_max_diff(la.data() + t * V, lc.data() + t * V, V), 1e-5)
          << arch << " pos " << t;
    }
    EXPECT_EQ(a.pos(), (int64_t)toks.size());
    EXPECT_EQ(b.pos(), (int64_t)toks.size());
  }
}

TEST(KvCache, DecodeAfterPrefillAndRewind) {
  const std::string path = model_for("qwen3moe");
  const std::vector<int32_t> toks = {7, 3, 9, 12, 60, 2};
  EngineOptions opt;
  opt.n_threads = 1;
  opt.n_ctx = 16;
  Engine e(path, opt);
  std::vector<float> full;
  e.prefill(toks, true, &full);
  const size_t V = e.n_vocab();
  // Prefill a prefix, then decode the rest: each decode row equals the batched one.
  e.reset();
  e.prefill(std::span<const int32_t>(toks.data(), 3), false, nullptr);
  for (size_t t = 3; t < toks.size(); ++t) {
    auto row = e.decode(toks[t]);
    EXPECT_LT(rel_max_diff(row.data(), full.data() + t * V, V), 1e-5) << "pos " << t;
  }
  // Rewind to position 4 and feed a different token: stale cache rows must not leak in.
  e.context().truncate(4);
  auto alt = e.decode(33);
  std::vector<float> alt_copy(alt.begin(), alt.end());
  Engine f(path, opt);
  std::vector<int32_t> alt_toks(toks.begin(), toks.begin() + 4);
  alt_toks.push_back(33);
  std::vector<float> ref;
  f.prefill(alt_toks, false, &ref);
  EXPECT_LT(rel_max_diff(alt_copy.data(), ref.data(), V), 1e-5);
}

TEST(KvCache, ContextOverflowIsAnError) {
  const std::string path = model_for("llama");
  EngineOptions opt;
  opt.n_threads = 1;
  opt.n_ctx = 4;
  Engine e(path, opt);
  const std::vector<int32_t> toks = {1, 2, 3, 4};
  e.prefill(toks, false, nullptr);
  EXPECT_THROW(e.decode(5), Error);
  e.reset();
  const std::vector<int32_t> bad = {1, 2, 1000};
  EXPECT_THROW(e.prefill(bad, false, nullptr), Error);
}

}  // namespace
}  // namespace moeflow::test
