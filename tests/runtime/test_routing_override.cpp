// The routing override (model/routing_override.h): the router's choice replaced after it ran,
// everything downstream computed on the replacement. Forcing a run's own routing changes
// nothing (bit for bit); forcing another routing changes the logits and is what the MoE block
// executes; a routing the override cannot give is an error naming it.
#include <gtest/gtest.h>

#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/model.h"
#include "model/routing_override.h"
#include "runtime/engine.h"
#include "support/routing_log.h"
#include "support/test_helpers.h"
#include "support/tiny_model.h"

namespace moeflow::test {
namespace {

const std::string& model() {
  static const std::string path = [] {
    TinySpec s;
    s.n_layer = 3;
    const std::string p = temp_path("routing_override.gguf");
    write_tiny_model(s, p);
    return p;
  }();
  return path;
}

// Plays a RoutingLog back, or (fixed) puts every token on experts 0 and 1 at equal weight.
class Forced final : public RoutingOverride {
 public:
  const RoutingLog* from = nullptr;
  int64_t last_pos = -1;  // positions beyond it have no routing
  void apply(int layer, int64_t pos0, int n, int k, int32_t* e, float* w) override {
    for (int t = 0; t < n; ++t) {
      if (last_pos >= 0 && pos0 + t > last_pos) fail("no routing for position {}", pos0 + t);
      for (int r = 0; r < k; ++r) {
        e[t * k + r] = from ? from->routes.at({pos0 + t, layer})[r] : r;
        w[t * k + r] = from ? from->weights.at({pos0 + t, layer})[r] : 1.0f / k;
      }
    }
  }
};

std::vector<float> logits_of(Engine& eng, const std::vector<int32_t>& prompt) {
  std::vector<float> out;
  eng.prefill(prompt, true, &out);
  const std::span<const float> d = eng.decode(5);
  out.insert(out.end(), d.begin(), d.end());
  return out;
}

TEST(RoutingOverride, OwnRoutingIsBitIdenticalOtherRoutingIsExecuted) {
  const std::vector<int32_t> prompt{3, 14, 15, 9, 2, 6};
  EngineOptions opt;
  opt.n_threads = 2;
  opt.n_ctx = 32;
  Engine eng(model(), opt);
  RoutingLog rec;
  eng.context().set_observer(&rec);
  const std::vector<float> free_run = logits_of(eng, prompt);
  eng.context().set_observer(nullptr);

  Forced replay;
  replay.from = &rec;
  eng.reset();
  eng.context().moe().set_routing_override(&replay);
  EXPECT_EQ(logits_of(eng, prompt), free_run);

  Forced fixed;
  eng.reset();
  eng.context().moe().set_routing_override(&fixed);
  const std::vector<float> forced = logits_of(eng, prompt);
  EXPECT_NE(forced, free_run);
  const std::span<const int> last = eng.context().moe().last_experts();
  ASSERT_EQ(last.size(), 2u);
  EXPECT_EQ(last[0], 0);
  EXPECT_EQ(last[1], 1);

  Forced short_trace;
  short_trace.last_pos = 3;
  eng.reset();
  eng.context().moe().set_routing_override(&short_trace);
  try {
    logits_of(eng, prompt);
    FAIL() << "a routing the override cannot give must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no routing for position 4"), std::string::npos)
        << e.what();
  }
  eng.context().moe().set_routing_override(nullptr);
}

}  // namespace
}  // namespace moeflow::test
