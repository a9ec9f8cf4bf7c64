// `moeflow train-predictor`: trains ProMoE's per-layer MLP predictor (hidden state entering
// layer l -> experts of layer l + stride) from a trace with hidden states, reports top-k recall
// on the held-out 10%, and saves the weights for `moeflow sim --predictor promoe
// --predictor-model FILE` and the live engine's `--prefetch promoe --predictor-model FILE`.
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "policy/promoe_mlp.h"
#include "trace/importers.h"
#include "trace/predictor_samples.h"

namespace moeflow::cli {
namespace {

struct TrainArgs {
  std::string trace, out;
  int stride = 1, width = 64, epochs = 20;
  float lr = 0.02f;
  unsigned seed = 1;
  std::string split = "request";
  bool with_prefill = false;
};

int run_train(const TrainArgs& a) {
  if (a.width < 1 || a.width > 4096) fail("--width must be in 1..4096, got {}", a.width);
  if (a.epochs < 1) fail("--epochs must be >= 1, got {}", a.epochs);
  if (!(a.lr > 0)) fail("--lr must be > 0, got {}", a.lr);
  if (a.split != "request" && a.split != "sample")
    fail("--split must be request or sample, not '{}'", a.split);
  const trace::SplitBy split =
      a.split == "request" ? trace::SplitBy::request : trace::SplitBy::sample;
  const trace::Trace t = trace::load_any({a.trace});
  const std::vector<PromoeSample> samples =
      trace::promoe_samples(t, a.stride, !a.with_prefill, split, a.trace);
  PromoeModel m;
  m.init(t.n_layers, t.n_experts, t.hidden_dim, a.width, a.stride, t.top_k, a.seed);
  const double before = promoe_recall(m, samples, true);
  const PromoeTrainReport rep = train_promoe(m, samples, a.epochs, a.lr);
  m.save(a.out);
  nlohmann::json j = {
      {"trace", a.trace},
      {"output", a.out},
      {"stride", a.stride},
      {"width", a.width},
      {"epochs", a.epochs},
      {"split", a.split == "request" ? "every 10th request held out (request ids ending in 9)"
                                     : "every 10th (token, layer) sample held out"},
      {"train_samples", rep.train_samples},
      {"test_samples", rep.test_samples},
      {"train_recall", rep.train_recall},
      {"test_recall", rep.test_recall},
      {"test_recall_untrained", before},
      {"chance_recall", (double)t.top_k / t.n_experts}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

const bool registered_train_predictor = register_command(
    "train-predictor", "Train ProMoE's learned expert predictor from a trace", [](CLI::App& app) {
      auto a = std::make_shared<TrainArgs>();
      app.add_option("-t,--trace", a->trace, "trace with hidden states (moeflow trace --hidden)")
          ->required();
      app.add_option("-o,--output", a->out, "predictor weights to write")->required();
      app.add_option("--stride", a->stride, "predict the experts this many layers ahead");
      app.add_option("--width,--hidden", a->width, "hidden width of each layer's MLP");
      app.add_option("--epochs", a->epochs, "passes over the training samples");
      app.add_option("--lr", a->lr, "SGD learning rate");
      app.add_option("--seed", a->seed, "initialisation seed");
      app.add_option("--split", a->split,
                     "held-out 10%: request (every 10th request) | sample (every 10th sample)");
      app.add_flag("--with-prefill", a->with_prefill,
                   "also train on prefill tokens (default: decode only)");
      return CommandMain([a] { return run_train(*a); });
    });

}  // namespace
}  // namespace moeflow::cli
