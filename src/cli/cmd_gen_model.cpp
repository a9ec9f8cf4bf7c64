// `moeflow gen-model`: writes a random-weight GGUF of a real MoE architecture (see
// model/gen/model_generator.h), for tests, benchmarks and llama.cpp cross-checks.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common_options.h"
#include "cli/progress_bar.h"
#include "core/error.h"
#include "core/ggml_type.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "model/gen/model_generator.h"
#include "model/gen/model_presets.h"
#include "quant/quant.h"

namespace moeflow::cli {
namespace {

struct GenArgs {
  std::string arch, preset = "tiny", out, type = "F32", expert_type, embd_type, output_type;
  int64_t layers = 0, vocab = 0, experts = 0, expert_used = 0;
  uint64_t seed = 42;
  float router_scale = 4.0f;
  int threads = 0;
  bool quiet = false;
  bool dry_run = false;
  bool repeat_experts = false;
  std::string rope_scaling;  // "" = the preset's
};

GgmlType parse_type(const std::string& name, const char* option) {
  auto t = type_from_name(name);
  if (!t) usage_fail("{} '{}' is not a ggml type name (e.g. F32, F16, Q8_0, Q4_K)", option, name);
  return *t;
}

// Bytes per second the generator will make, from a few rows of the first tensor made here on
// one thread: the progress bar's speed until the first tensor is done (token_embd of a large
// model takes tens of seconds).
double sample_rate(const std::vector<gen::PlannedTensor>& plan, const gen::GenOptions& opt) {
  if (plan.empty()) return 0;
  const gen::PlannedTensor& t = plan.front();
  const uint64_t row_bytes = t.nbytes() / (uint64_t)std::max<int64_t>(1, t.n_rows());
  std::vector<float> row((size_t)t.row_len());
  std::vector<uint8_t> out(row_bytes + 64);
  const double t0 = now_seconds();
  int64_t rows = 0;
  while (rows < t.n_rows() && (rows < 2 || now_seconds() - t0 < 0.05)) {
    gen::generate_row(t, opt.seed, rows, row.data());
    if (type_traits(t.type).block_size > 1)
      quantize_row(t.type, row.data(), out.data(), t.row_len());
    ++rows;
  }
  const double dt = now_seconds() - t0;
  return dt > 0 ? (double)rows * (double)row_bytes / dt * opt.threads : 0;
}

int run_gen_model(const GenArgs& a) {
  using namespace moeflow::gen;
  GenOptions opt;
  opt.shape = find_preset(parse_arch(a.arch), a.preset);
  if (a.layers) opt.shape.n_layer = a.layers;
  if (a.vocab) opt.shape.n_vocab = a.vocab;
  if (a.experts) opt.shape.n_expert = a.experts;
  if (a.expert_used) opt.shape.n_expert_used = a.expert_used;
  if (a.rope_scaling == "none") {
    opt.shape.yarn_factor = 0;
  } else if (!a.rope_scaling.empty() && a.rope_scaling != "preset") {
    fail("gen-model: --rope-scaling '{}' must be preset or none", a.rope_scaling);
  }
  opt.type = parse_type(a.type, "--type");
  if (!a.expert_type.empty()) opt.expert_type = parse_type(a.expert_type, "--expert-type");
  if (!a.embd_type.empty()) opt.embd_type = parse_type(a.embd_type, "--embd-type");
  if (!a.output_type.empty()) opt.output_type = parse_type(a.output_type, "--output-type");
  opt.seed = a.seed;
  if (!(a.router_scale > 0.0f))
    usage_fail("--router-scale must be positive (got {})", a.router_scale);
  opt.router_scale = a.router_scale;
  opt.threads = a.threads > 0 ? a.threads : default_thread_count();
  opt.repeat_experts = a.repeat_experts;

  if (a.dry_run) {
    // The plan alone (names, shapes, types, sizes): lets tests check the released shapes
    // without writing tens of gigabytes.
    nlohmann::json tensors = nlohmann::json::array();
    int64_t params = 0;
    uint64_t bytes = 0;
    for (const PlannedTensor& t : plan_tensors(opt)) {
      tensors.push_back({{"name", t.name}, {"type", type_name(t.type)}, {"dims", t.dims}});
      params += t.row_len() * t.n_rows();
      bytes += t.nbytes();
    }
    nlohmann::json j = {{"arch", arch_gguf_name(opt.shape.arch)},
                        {"preset", opt.shape.preset},
                        {"n_params", params},
                        {"tensor_bytes", bytes},
                        {"tensors", tensors}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  const std::vector<PlannedTensor> plan = plan_tensors(opt);
  std::vector<uint64_t> steps;
  for (const PlannedTensor& t : plan) steps.push_back(t.nbytes());
  ProgressBar bar(!a.quiet, std::move(steps), a.quiet ? 0 : sample_rate(plan, opt));
  const GenSummary s =
      generate_model(opt, a.out, [&](uint64_t done, uint64_t total) { bar.update(done, total); });
  nlohmann::json j = {{"path", a.out},
                      {"arch", arch_gguf_name(opt.shape.arch)},
                      {"preset", opt.shape.preset},
                      {"n_layer", opt.shape.n_layer},
                      {"n_params", s.n_params},
                      {"n_tensors", s.n_tensors},
                      {"n_fallback", s.n_fallback},
                      {"file_bytes", s.file_bytes},
                      {"seconds", s.seconds}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

const bool registered_gen_model = register_command(
    "gen-model", "Write a random-weight GGUF of a real MoE architecture", [](CLI::App& sub) {
      auto a = std::make_shared<GenArgs>();
      sub.add_option(
             "--arch", a->arch,
             "mixtral | qwen2moe | qwen3moe | olmoe | deepseek2 | glm4moe | gpt-oss | phimoe | "
             "qwen3next | qwen35moe | minimax-m2 | gemma4")
          ->required();
      sub.add_option("--preset", a->preset,
                     "tiny | small | 8x7b (mixtral) | a2.7b (qwen2moe) | 30b-a3b (qwen3moe) | "
                     "1b-7b (olmoe) | 20b, 120b (gpt-oss) | 3.5-moe (phimoe) | 80b-a3b "
                     "(qwen3next) | 35b-a3b (qwen35moe) | m2 (minimax-m2) | 26b-a4b (gemma4)");
      sub.add_option("-o,--output", a->out, "output GGUF path")->required();
      sub.add_option("--layers", a->layers, "override the layer count");
      sub.add_option("--type", a->type, "weight type (F32, F16, BF16, Q8_0, Q4_0, Q4_K, ...)");
      sub.add_option("--expert-type", a->expert_type,
                     "type of the routed experts (default: --type)");
      sub.add_option("--embd-type", a->embd_type, "type of token_embd (default: --type)");
      sub.add_option("--output-type", a->output_type,
                     "type of the output matrix (default: --type)");
      sub.add_option("--seed", a->seed, "random seed");
      sub.add_option("--router-scale", a->router_scale,
                     "router logit std (larger = clearer top-k)");
      sub.add_option("--vocab", a->vocab, "override the vocabulary size (>= 260)");
      sub.add_option("--experts", a->experts, "override the expert count");
      sub.add_option("--expert-used", a->expert_used, "override the experts used per token");
      sub.add_option("--rope-scaling", a->rope_scaling,
                     "preset (default) | none: drop the preset's YaRN (gpt-oss)");
      add_threads_option(sub, a->threads, "generator threads (default: all cores)");
      sub.add_flag("-q,--quiet", a->quiet, "no progress bar");
      sub.add_flag("--dry-run", a->dry_run, "print the tensor plan as JSON, write nothing");
      sub.add_flag("--repeat-experts", a->repeat_experts,
                   "every MoE layer reuses the first MoE layer's expert weights: full-size "
                   "benchmark models fast (same bytes and arithmetic per token; outputs not "
                   "meaningful)");
      return CommandMain([a] { return run_gen_model(*a); });
    });

}  // namespace
}  // namespace moeflow::cli
