// Each architecture's forward pass on a tiny random model against the float64 reference.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "reference_forward.h"
#include "runtime/engine.h"
#include "support/test_helpers.h"
#include "support/tiny_model.h"

namespace moeflow::test {
namespace {

struct Case {
  const char* label;
  TinySpec spec;
  double tol;
};

TinySpec make(const std::string& arch) {
  TinySpec s;
  s.arch = arch;
  return s;
}

std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({"mixtral", make("llama"), 2e-4});
  c.push_back({"qwen2moe", make("qwen2moe"), 2e-4});
  {
    TinySpec s = make("qwen3moe");
    s.head_dim = 32;  // key_length differs from n_embd / n_head
    c.push_back({"qwen3moe_wide_heads", s, 2e-4});
  }
  c.push_back({"olmoe", make("olmoe"), 2e-4});
  {
    TinySpec s = make("llama");
    s.tie_output = true;
    s.n_rot = 8;  // partial rotary
    s.rope_base = 500000.0f;
    c.push_back({"mixtral_tied_partial_rope", s, 2e-4});
  }
  {
    TinySpec s = make("qwen2moe");
    s.weights_norm = 1;
    s.embd_type = GgmlType::F16;
    c.push_back({"qwen2moe_norm_f16_embd", s, 2e-4});
  }
  {
    TinySpec s = make("olmoe");
    s.weight_type = GgmlType::Q8_0;
    s.embd_type = GgmlType::Q8_0;
    // Activations are quantized to Q8_0 before the integer dot: a few 1e-3 relative.
    c.push_back({"olmoe_q8_0", s, 3e-2});
  }
  return c;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.label; }

class ForwardVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(ForwardVsReference, AllPositionsMatchFloat64) {
  const Case& c = GetParam();
  const std::string path = temp_path(std::string(c.label) + ".gguf");
  const TinyWeights W = write_tiny_model(c.spec, path);
  const std::vector<int32_t> toks = {3, 17, 42, 5, 88, 0, 63, 17, 29};
  const RefResult ref = reference_forward(c.spec, W, toks);
  EngineOptions opt;
  opt.n_threads = 2;
  opt.n_ctx = 32;
  Engine eng(path, opt);
  ASSERT_EQ(eng.n_vocab(), c.spec.n_vocab);
  std::vector<float> logits;
  eng.prefill(toks, true, &logits);
  const size_t V = c.spec.n_vocab;
  for (size_t t = 0; t < toks.size(); ++t) {
    const double diff = rel_max_diff(logits.data() + t * V, ref.logits[t], V);
    EXPECT_LT(diff, c.tol) << c.label << " position " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ForwardVsReference, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return std::string(info.param.label); });

TEST(Forward, RoutingMatchesReference) {
  TinySpec s = make("qwen3moe");
  const std::string path = temp_path("route.gguf");
  const TinyWeights W = write_tiny_model(s, path);
  const std::vector<int32_t> toks = {1, 2, 3, 4, 5, 6};
  const RefResult ref = reference_forward(s, W, toks);
  EngineOptions opt;
  opt.n_threads = 1;
  opt.n_ctx = 16;
  Engine eng(path, opt);
  // Observe routing of the last layer of each token fed one at a time.
  for (size_t t = 0; t < toks.size(); ++t) {
    eng.decode(toks[t]);
    auto ex = eng.context().moe().last_experts();
    ASSERT_EQ((int)ex.size(), s.top_k);
    EXPECT_EQ(std::vector<int>(ex.begin(), ex.end()), ref.experts[t][s.n_layer - 1]) << "pos " << t;
  }
}

}  // namespace
}  // namespace moeflow::test
