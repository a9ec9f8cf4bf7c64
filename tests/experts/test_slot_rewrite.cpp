// A cache whose slots are rewritten on arrival (experts/slot_rewrite.h; the CPU's rows-in-lanes
// layouts in the engine): every acquired matrix is the file's bytes rewritten exactly once, in
// the rewritten type, whether it was read whole, in paused speculative parts, or streamed
// matrix by matrix; matrices the rewrite leaves alone keep the file's bytes and type.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <vector>

#include "experts/cached_provider.h"
#include "support/offload_fixture.h"

namespace moeflow {
namespace {

// A stand-in for a layout change whose result shows how often it ran: every byte XOR 0xA5
// (applied twice it gives the file's bytes back), for the matrices with a multiple of 16 rows
// (some of the fake model's, not all).
constexpr uint8_t kMask = 0xA5;
bool rewritten(int64_t rows) { return rows % 16 == 0; }

SlotRewrite xor_rewrite(std::atomic<int>* calls) {
  SlotRewrite r;
  r.type_in_slot = [](GgmlType t, int64_t rows) { return rewritten(rows) ? GgmlType::I32 : t; };
  r.rewrite = [calls](GgmlType t, uint8_t* data, int64_t cols, int64_t rows) {
    ASSERT_EQ(t, GgmlType::F32);
    ASSERT_TRUE(rewritten(rows));
    for (int64_t i = 0; i < cols * rows * 4; ++i) data[i] ^= kMask;
    ++*calls;
  };
  return r;
}

void expect_rewritten_view(const test::FakeModel& m, const ExpertView& v, int l, int e) {
  for (int p = 0; p < kNumExpertProj; ++p) {
    const ExpertSlice& s = m.index.layers[l].slices[e][p];
    ASSERT_NE(v.proj[p].data, nullptr);
    EXPECT_EQ(v.proj[p].rows(), s.rows);
    EXPECT_EQ(v.proj[p].cols(), s.cols);
    const bool rw = rewritten(s.rows);
    EXPECT_EQ(v.proj[p].type, rw ? GgmlType::I32 : GgmlType::F32);
    std::vector<uint8_t> want(m.slice(l, e, p), m.slice(l, e, p) + s.nbytes);
    if (rw)
      for (uint8_t& b : want) b ^= kMask;
    ASSERT_EQ(0, std::memcmp(v.proj[p].data, want.data(), s.nbytes))
        << "layer " << l << " expert " << e << " proj " << p;
  }
}

TEST(SlotRewrite, EveryMatrixIsRewrittenOnceBeforeItIsHandedOut) {
  test::FakeModel m;
  // Layer 1: 32-row gate / up and a 1008-row down (all rewritten); layer 2: 24 and 1016 rows
  // (none); layer 3: 32 and 1000 rows (gate / up only).
  test::make_fake_model(m, "rewrite", 4, 6, 1000, 31);
  const uint64_t slot = test::slot_bytes(m);
  for (const bool streamed : {false, true}) {
    SCOPED_TRACE(streamed ? "streamed acquires" : "whole acquires");
    std::atomic<int> calls{0};
    OffloadConfig cfg;
    cfg.budget_bytes = 5 * slot;  // evictions and re-reads all along
    cfg.top_k = 2;
    cfg.io_threads = 2;
    cfg.low_part_bytes = kDirectAlign;  // speculative reads go in parts, and pause
    cfg.skip_late_prefetch = false;     // every prefetch asked for is issued
    cfg.prefetch_gate = false;
    cfg.rewrite = xor_rewrite(&calls);
    CachedExpertProvider prov(
        std::make_unique<ExpertStore>(std::vector<std::string>{m.path}, m.index),
        std::make_unique<test::TestLru>(), cfg);
    std::mt19937 rng(streamed ? 5 : 6);
    for (int step = 0; step < 30; ++step) {
      for (int l = 1; l < 4; ++l) {
        int a = rng() % 6, b = rng() % 6;
        if (b == a) b = (a + 1) % 6;
        const int chosen[2] = {a, b};
        prov.on_route(l, chosen);
        if (l + 1 < 4) {
          const int guess[2] = {int(rng() % 6), int(rng() % 6)};
          prov.prefetch(l + 1, guess, 0.5f);
        }
        for (int e : chosen) {
          if (streamed) {
            const ExpertView v = prov.acquire_streamed(l, e);
            for (int p = 0; p < kNumExpertProj; ++p) prov.await_matrix(l, e, p);
            expect_rewritten_view(m, v, l, e);
          } else {
            expect_rewritten_view(m, prov.acquire(l, e), l, e);
          }
          prov.release(l, e);
        }
      }
      prov.end_step();
    }
    prov.drain();
    const LayerOffloadStats t = prov.stats().total();
    EXPECT_GT(calls.load(), 0);
    // Layer 2's matrices are never rewritten; every rewrite is counted with its bytes.
    EXPECT_EQ(prov.stats().layers[2].bytes_rewritten, 0u);
    EXPECT_GT(prov.stats().layers[1].bytes_rewritten, 0u);
    EXPECT_GT(t.bytes_rewritten, 0u);
    EXPECT_LE(t.bytes_rewritten, t.bytes_read);
    EXPECT_GE(t.rewrite_s, 0.0);
    EXPECT_GT(t.prefetch_issued, 0u);  // speculative reads: matrices arriving in parts
  }
}

}  // namespace
}  // namespace moeflow
