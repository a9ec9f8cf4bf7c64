// The routing replay (trace/routing_replay.h): which recorded row each position of a run reads
// (generation, decode only, sequence), layers a row does not record, and the clear errors for a
// trace of another shape or a run longer than the recorded request.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "trace/routing_replay.h"

namespace moeflow::trace {
namespace {

constexpr int kL = 2, kE = 6, kK = 2;

// Request 7 (listed first), then request 3: P prompt rows and D decode rows; row r routes
// layer l to experts {(r + l) % E, (r + l + 1) % E} with weights {0.75, 0.25} — distinct per
// (row, layer), so a wrong mapping shows. Layer 1 of the decode row `hole` is not recorded.
Trace two_requests(int P, int D, int hole = -1) {
  Trace t;
  t.model = "hand-made";
  t.n_layers = kL;
  t.n_experts = kE;
  t.top_k = kK;
  auto add = [&](uint32_t req, Phase ph, int n, int row0) {
    for (int i = 0; i < n; ++i) {
      TokenStep s;
      s.request = req;
      s.phase = ph;
      s.pos = (uint32_t)i;
      const int r = row0 + i;
      s.token_id = 1000 + r;
      for (int l = 0; l < kL; ++l) {
        if (ph == Phase::decode && i == hole && l == 1) continue;
        s.routes.push_back({l, {(r + l) % kE, (r + l + 1) % kE}, {0.75f, 0.25f}, {}});
      }
      t.steps.push_back(std::move(s));
    }
  };
  add(7, Phase::prefill, 1, 100);  // another request: must never be read
  add(7, Phase::decode, 2, 200);
  add(3, Phase::prefill, P, 0);
  add(3, Phase::decode, D, P);
  return t;
}

const ReplayShape kShape{kL, kE, kK};

// Runs apply() for positions pos0.. of `layer` over the router's own choice marked as ids -1
// with weight 9, and returns the resulting ids (and weights in `w`).
std::vector<int32_t> route(RoutingReplay& r, int layer, int64_t pos0, int n,
                           std::vector<float>* w = nullptr) {
  std::vector<int32_t> ex((size_t)n * kK, -1);
  std::vector<float> wt((size_t)n * kK, 9.f);
  r.apply(layer, pos0, n, kK, ex.data(), wt.data());
  if (w) *w = wt;
  return ex;
}

TEST(RoutingReplay, GenerationReadsPromptRowsThenDecodeRows) {
  RoutingReplay r(two_requests(3, 4), "t.bin", kShape, /*request=*/1);
  EXPECT_EQ(r.prompt_rows(), 3);
  EXPECT_EQ(r.decode_rows(), 4);
  r.begin_generation(3, 5);  // 4 decode steps follow the prompt
  std::vector<float> w;
  // The prompt as one batch of 3, then decode steps one at a time.
  EXPECT_EQ(route(r, 0, 0, 3, &w), (std::vector<int32_t>{0, 1, 1, 2, 2, 3}));
  EXPECT_EQ(w, (std::vector<float>{0.75f, 0.25f, 0.75f, 0.25f, 0.75f, 0.25f}));
  EXPECT_EQ(route(r, 1, 3, 1), (std::vector<int32_t>{4, 5}));  // decode row 0 = row 3
  EXPECT_EQ(route(r, 1, 6, 1), (std::vector<int32_t>{1, 2}));  // row 6, layer 1: 7,8 mod 6
  EXPECT_EQ(r.counts().replayed, 5u);
  EXPECT_EQ(r.counts().own, 0u);
  // Observers see the recorded token ids of the rows.
  std::vector<int32_t> ids(3, -7);
  ASSERT_TRUE(r.observed_tokens(0, 3, ids.data()));
  EXPECT_EQ(ids, (std::vector<int32_t>{1000, 1001, 1002}));
  ASSERT_TRUE(r.observed_tokens(5, 1, ids.data()));
  EXPECT_EQ(ids[0], 1005);
}

TEST(RoutingReplay, UnrecordedLayerKeepsTheRoutersChoice) {
  RoutingReplay r(two_requests(2, 3, /*hole=*/1), "t.bin", kShape, 1);
  r.begin_generation(2, 4);
  std::vector<float> w;
  EXPECT_EQ(route(r, 1, 3, 1, &w), (std::vector<int32_t>{-1, -1}));  // decode row 1, layer 1
  EXPECT_EQ(w, (std::vector<float>{9.f, 9.f}));
  EXPECT_EQ(route(r, 0, 3, 1), (std::vector<int32_t>{3, 4}));  // layer 0 of that row is there
  EXPECT_EQ(r.counts().own, 1u);
  EXPECT_EQ(r.counts().replayed, 1u);
}

TEST(RoutingReplay, DecodeOnlyRequestLeavesThePromptToTheRouter) {
  // Request 0 (id 7) has a prompt row; a decode-only request is made by dropping it.
  Trace t = two_requests(3, 4);
  t.steps.erase(t.steps.begin());
  RoutingReplay r(t, "t.bin", kShape, 0);
  EXPECT_EQ(r.prompt_rows(), 0);
  r.begin_generation(5, 3);  // a prompt of 5 tokens routes itself; 2 decode steps from the trace
  EXPECT_EQ(route(r, 0, 0, 5), std::vector<int32_t>(10, -1));
  EXPECT_EQ(route(r, 0, 5, 1), (std::vector<int32_t>{200 % kE, 201 % kE}));
  EXPECT_EQ(route(r, 0, 6, 1), (std::vector<int32_t>{201 % kE, 202 % kE}));
  EXPECT_EQ(r.counts().own, 5u);
  EXPECT_THROW(route(r, 0, 7, 1), Error);  // past the request's rows
  // The prompt routes itself, so its observers see the run's own token ids.
  std::vector<int32_t> ids(5, -7);
  EXPECT_FALSE(r.observed_tokens(0, 5, ids.data()));
  ASSERT_TRUE(r.observed_tokens(5, 1, ids.data()));
  EXPECT_EQ(ids[0], 1000 + 200);
}

TEST(RoutingReplay, DecodeOnlyAndSequenceRuns) {
  RoutingReplay r(two_requests(3, 4), "t.bin", kShape, 1);
  r.begin_decode(4, "-n 4");  // bench tg: position 0 reads the first decode row
  EXPECT_EQ(route(r, 0, 0, 1), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(route(r, 0, 3, 1), (std::vector<int32_t>{0, 1}));  // row 6
  r.begin_sequence(7, "-p 7");  // bench pp / perplexity: every row in recorded order
  EXPECT_EQ(route(r, 0, 0, 7), (std::vector<int32_t>{0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 0, 0, 1}));
}

TEST(RoutingReplay, RunsLongerThanTheRequestAreRefusedUpFront) {
  RoutingReplay r(two_requests(3, 4), "t.bin", kShape, 1);
  try {
    r.begin_generation(4, 2);
    FAIL() << "a prompt of another length was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt of 3 tokens"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(r.begin_generation(3, 5));  // 4 decode steps: exactly the 4 rows
  try {
    r.begin_generation(3, 6);
    FAIL() << "5 decode steps over 4 rows were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4 decode rows"), std::string::npos) << e.what();
  }
  EXPECT_THROW(r.begin_decode(5, "-n 5"), Error);
  EXPECT_THROW(r.begin_sequence(8, "-p 8"), Error);
  EXPECT_NO_THROW(r.begin_sequence(7, "-p 7"));
}

TEST(RoutingReplay, AnotherShapeOrRequestIsAClearError) {
  const Trace t = two_requests(3, 4);
  auto message = [&](ReplayShape s, int req) -> std::string {
    try {
      RoutingReplay r(t, "trace.jsonl", s, req);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const std::string layers = message({32, kE, kK}, 0);
  EXPECT_NE(layers.find("trace.jsonl"), std::string::npos) << layers;
  EXPECT_NE(layers.find("2 layers, 6 experts, top-2"), std::string::npos) << layers;
  EXPECT_NE(layers.find("32 layers"), std::string::npos) << layers;
  EXPECT_NE(message({kL, 8, kK}, 0), "");
  EXPECT_NE(message({kL, kE, 1}, 0), "");
  const std::string req = message(kShape, 2);
  EXPECT_NE(req.find("2 requests"), std::string::npos) << req;
  EXPECT_EQ(message(kShape, 1), "");
}

}  // namespace
}  // namespace moeflow::trace
