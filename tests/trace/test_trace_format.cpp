// The binary trace format round-trips every field and rejects damaged files; importers read the
// real shared traces with the right shapes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "core/error.h"
#include "support/require_data.h"
#include "trace/importers.h"
#include "trace/trace.h"
#include "trace_util.h"

// A namespace of its own: the unity builds (MOEFLOW_UNITY) compile this file in one unit with
// others of its folder that define helpers of the same names.
namespace moeflow::trace::trace_format_test {
namespace {

std::string tmp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid())))
      .string();
}

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void spit(const std::string& p, const std::string& d) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << d;
}

Trace rich_trace() {
  Trace t;
  t.model = "tiny";
  t.source = "unit";
  t.n_layers = 3;
  t.n_experts = 5;
  t.top_k = 2;
  t.hidden_dim = 4;
  t.routers.resize(3);
  t.routers[1] = std::vector<float>(5 * 4, 0.25f);  // only layer 1 has a router
  for (uint32_t s = 0; s < 4; ++s) {
    TokenStep st;
    st.request = s / 2;
    st.phase = s % 2 ? Phase::decode : Phase::prefill;
    st.pos = s;
    st.token_id = s == 3 ? -1 : (int32_t)(100 + s);
    st.routes.push_back({0, {(int)s % 5, 4}, {0.75f, 0.25f}, {0.5f, -1.f, 2.f, 0.125f}});
    st.routes.push_back({2, {1, 3}, {}, {}});  // layer 1 not recorded, no weights, no hidden
    t.steps.push_back(st);
  }
  return t;
}

TEST(TraceFormat, RoundTripsEveryField) {
  Trace t = rich_trace();
  auto p = tmp("rt.mft");
  write_trace(t, p);
  Trace r = read_trace(p);
  EXPECT_EQ(r.model, t.model);
  EXPECT_EQ(r.source, t.source);
  EXPECT_EQ(r.n_layers, 3);
  EXPECT_EQ(r.n_experts, 5);
  EXPECT_EQ(r.top_k, 2);
  EXPECT_EQ(r.hidden_dim, 4);
  EXPECT_EQ(r.routers, t.routers);
  ASSERT_EQ(r.steps.size(), t.steps.size());
  for (size_t s = 0; s < t.steps.size(); ++s) {
    EXPECT_EQ(r.steps[s].request, t.steps[s].request);
    EXPECT_EQ(r.steps[s].phase, t.steps[s].phase);
    EXPECT_EQ(r.steps[s].pos, t.steps[s].pos);
    EXPECT_EQ(r.steps[s].token_id, t.steps[s].token_id);
    ASSERT_EQ(r.steps[s].routes.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(r.steps[s].routes[i].layer, t.steps[s].routes[i].layer);
      EXPECT_EQ(r.steps[s].routes[i].experts, t.steps[s].routes[i].experts);
      EXPECT_EQ(r.steps[s].routes[i].weights, t.steps[s].routes[i].weights);
      // Hidden states are stored as fp16: these values are exact in fp16.
      EXPECT_EQ(r.steps[s].routes[i].hidden, t.steps[s].routes[i].hidden);
    }
  }
  EXPECT_EQ(r.recorded_layers(), (std::vector<int>{0, 2}));
  EXPECT_EQ(r.n_routes(), 8u);
  Trace d = filter_steps(r, false, true);
  EXPECT_EQ(d.steps.size(), 2u);
  for (auto& s : d.steps) EXPECT_EQ(s.phase, Phase::decode);
  // load_any recognises the binary format.
  EXPECT_EQ(load_any({p}).steps.size(), 4u);
  std::filesystem::remove(p);
}

TEST(TraceFormat, RejectsDamagedFilesAndInvalidTraces) {
  Trace t = rich_trace();
  auto p = tmp("bad.mft");
  write_trace(t, p);
  const std::string good = slurp(p);
  spit(p, good.substr(0, good.size() - 3));
  EXPECT_THROW(read_trace(p), Error);  // truncated
  spit(p, good + "xx");
  EXPECT_THROW(read_trace(p), Error);  // trailing bytes
  std::string bad = good;
  bad[0] = 'X';
  spit(p, bad);
  EXPECT_THROW(read_trace(p), Error);  // magic
  // Every truncation fails cleanly (no crash, no huge allocation).
  for (size_t n = 0; n < good.size(); n += 7) {
    spit(p, good.substr(0, n));
    EXPECT_THROW(read_trace(p), Error) << n;
  }
  std::filesystem::remove(p);
  Trace e = t;
  e.steps[0].routes[0].experts[0] = 5;  // out of range
  EXPECT_THROW(write_trace(e, p), Error);
  e = t;
  std::swap(e.steps[0].routes[0], e.steps[0].routes[1]);  // layers out of order
  EXPECT_THROW(e.validate("x"), Error);
  e = t;
  e.steps[1].routes[0].weights.pop_back();
  EXPECT_THROW(e.validate("x"), Error);
}

const std::string kData = MOEFLOW_SHARED_DATA "/traces/";
const std::string kMixtral = kData + "mixtral-8x7b-instruct_speculative-moe/";

TEST(Importers, MixtralHumanEvalDecode) {
  auto path = kMixtral + "routing_data_collected/humaneval_2_routing.jsonl";
  MOEFLOW_REQUIRE_PATH(path);
  Trace t = load_any({path});
  EXPECT_EQ(t.n_layers, 32);
  EXPECT_EQ(t.n_experts, 8);
  EXPECT_EQ(t.top_k, 2);
  EXPECT_EQ(t.steps.size(), 338u);  // 83 + 255 decode tokens
  EXPECT_EQ(t.n_routes(), 10779u);  // one per JSONL row
  size_t req0 = 0, req1 = 0;
  for (auto& s : t.steps) {
    EXPECT_EQ(s.phase, Phase::decode);
    (s.request == 0 ? req0 : req1)++;
    for (auto& r : s.routes) {
      EXPECT_EQ(r.experts.size(), 2u);
      ASSERT_EQ(r.weights.size(), 2u);
      EXPECT_NEAR(r.weights[0] + r.weights[1], 1.0, 1e-3);  // renormalised over the top-2
      EXPECT_GE(r.weights[0], r.weights[1]);
    }
  }
  EXPECT_EQ(req0, 83u);
  EXPECT_EQ(req1, 255u);
  EXPECT_EQ(t.recorded_layers().size(), 32u);
}

TEST(Importers, MixtralPrefillPlusDecode) {
  auto path = kMixtral + "analysis/deep_analysis/routing_raw.jsonl";
  MOEFLOW_REQUIRE_PATH(path);
  Trace t = load_any({path});
  EXPECT_EQ(t.n_routes(), 6777u);
  size_t pre = 0, dec = 0;
  for (auto& s : t.steps) (s.phase == Phase::prefill ? pre : dec)++;
  EXPECT_GE(pre, 135u);  // layer 0 has 135 prompt positions
  EXPECT_GT(dec, 80u);
  // Prefill steps come first, positions count up from 0.
  EXPECT_EQ(t.steps[0].phase, Phase::prefill);
  EXPECT_EQ(t.steps[0].pos, 0u);
  EXPECT_EQ(t.steps[1].pos, 1u);
  EXPECT_EQ(t.steps.back().phase, Phase::decode);
}

TEST(Importers, QwenVllmLoggerLayers) {
  std::vector<std::string> files;
  for (int l : {0, 8, 12, 18, 23})
    files.push_back(kData + "qwen1.5-moe_vllm-logger_weiran0129/moe_layer" + std::to_string(l) +
                    ".jsonl");
  for (const auto& f : files) MOEFLOW_REQUIRE_PATH(f);
  Trace t = load_any(files);
  EXPECT_EQ(t.n_experts, 60);
  EXPECT_EQ(t.top_k, 4);
  EXPECT_EQ(t.n_layers, 24);
  EXPECT_EQ(t.recorded_layers(), (std::vector<int>{0, 8, 12, 18, 23}));
  // 12805 route rows per file, of which the two warm-up batches (8192 + 256 rows) are dropped.
  EXPECT_EQ(t.steps.size(), 4357u);
  EXPECT_EQ(t.n_routes(), 5u * 4357u);
  size_t dec = 0;
  uint32_t max_dec_req = 0;
  for (auto& s : t.steps)
    if (s.phase == Phase::decode) dec++, max_dec_req = std::max(max_dec_req, s.request);
  EXPECT_EQ(dec, 4357u - 65u - 1406u);
  EXPECT_EQ(max_dec_req, 24u);  // 25 GSM8K prompts decode side by side
  for (auto& s : t.steps)
    for (auto& r : s.routes) EXPECT_EQ(r.experts.size(), 4u);
}

TEST(Importers, ErrorsNameTheFile) {
  auto p = tmp("bad.jsonl");
  spit(p, "{\"layer\": 0, \"token_idx\": 0, \"experts\": [1, 2]}\n{not json\n");
  try {
    load_any({p});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  spit(p, "{\"layer\": 0, \"token_idx\": 0, \"experts\": [1, 2], \"gating_probs\": [1.0]}\n");
  EXPECT_THROW(load_any({p}), Error);
  std::filesystem::remove(p);
}

}  // namespace
}  // namespace moeflow::trace::trace_format_test
