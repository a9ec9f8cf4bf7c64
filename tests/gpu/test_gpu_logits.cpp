// A device backend against the CPU backend on whole models: every architecture (Mixtral,
// Qwen2-MoE, Qwen3-MoE, OLMoE, GLM-4.5, gpt-oss, Phi-3.5-MoE, DeepSeek-V2, MiniMax-M2;
// `moeflow gen-model`'s "small" shapes, every row a multiple of 256 so every block format
// applies) in every block format (on the stand-in device: F32, Q8_0 and the others in
// rotation), and Qwen3-Next, Qwen3.5-MoE (gated DeltaNet hybrids) and Gemma 4 in four formats
// (cases()), exact expert mode, on each device of device_kinds.h.
//   - prompt logits (batched prefill) and decode logits (teacher-forced on the CPU's greedy
//     tokens): on the stand-in device bit for bit the CPU's (same arithmetic: any difference is
//     the device path's plumbing: weights, experts, copies, ordering); on CUDA within a stated
//     tolerance;
//   - each MoE layer's routing recorded in both runs: the stand-in routes exactly as the CPU; on
//     CUDA the routing flips are counted and the first printed (a flip changes every later
//     position by far more than rounding: it tells a routing difference from a numeric one);
//   - numerics alone: the device run again with the CPU's routing forced on it
//     (model/routing_override.h), within the tolerance (exact on the stand-in);
//   - CUDA: greedy tokens identical to the CPU's, except where the CPU's own top two logits are
//     closer than the tolerance allows to decide (counted and reported, at most 2 of 8); the GPU
//     deterministic (a second run, with CUDA graphs off, gives the same bits); the decode steps
//     really ran as graphs, reused from step to step.
// Without a CUDA device the CUDA cases are skipped ("no CUDA device: ..."); MOEFLOW_REQUIRE_GPU=1
// makes that a failure.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"  // CudaGraphCounts (plain C++; defined in CUDA builds)
#include "backend/standin/standin_device.h"
#include "device_kinds.h"
#include "model/gen/model_generator.h"
#include "model/model.h"
#include "model/observer.h"
#include "model/routing_override.h"
#include "runtime/engine.h"
#include "support/routing_log.h"

namespace moeflow::test {
namespace {

struct Case {
  BackendKind device;
  std::string arch;
  GgmlType type;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << backend_kind_name(c.device) << " " << c.arch << " " << type_name(c.type);
}

// Largest |gpu - cpu| over a logits row, relative to the row's largest |cpu| (at least 1).
// F32: both sides float32 throughout (the GEMM in float32 too). F16/BF16: the GPU's prefill
// GEMM rounds activations to the weight's type. Block formats: the CPU quantizes activations
// to Q8_0 / Q8_K blocks, the GPU to 8 bits per 32 (decode) or fp16 (prefill), so the two
// differ by about the activation quantization error, compounded over the layers.
double tolerance(BackendKind device, GgmlType t) {
  if (device == BackendKind::StandIn) return 0;
  switch (t) {
    case GgmlType::F32: return 1e-4;
    case GgmlType::F16: return 1e-2;
    case GgmlType::BF16: return 5e-2;
    default: return 5e-2;
  }
}

// One folder per test process, removed when it exits.
std::string temp_dir() {
  struct Dir {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("moeflow_gpu_test_" + std::to_string(getpid()));
    Dir() { std::filesystem::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Dir dir;
  return dir.path.string();
}

std::string make_model(const Case& c) {
  const std::string path = temp_dir() + "/" + c.arch + "_" + type_name(c.type) + ".gguf";
  if (!std::filesystem::exists(path)) {
    gen::GenOptions o;
    o.shape = gen::find_preset(gen::parse_arch(c.arch), "small");
    o.type = c.type;
    o.seed = 1234;
    o.threads = 4;
    gen::generate_model(o, path);
  }
  return path;
}

double rel_diff(const float* a, const float* b, size_t n) {
  double md = 0, scale = 1;
  for (size_t i = 0; i < n; ++i) {
    md = std::max(md, std::fabs((double)a[i] - (double)b[i]));
    scale = std::max(scale, std::fabs((double)b[i]));
  }
  return md / scale;
}

// Top logit's index and its margin over the second (relative to the row's scale).
std::pair<int32_t, double> top(const float* row, size_t n) {
  int32_t best = 0;
  double scale = 1;
  for (size_t i = 0; i < n; ++i) {
    if (row[i] > row[best]) best = (int32_t)i;
    scale = std::max(scale, std::fabs((double)row[i]));
  }
  double second = -INFINITY;
  for (size_t i = 0; i < n; ++i)
    if ((int32_t)i != best) second = std::max(second, (double)row[i]);
  return {best, (row[best] - second) / scale};
}

// Another run's routing forced on this one (model/routing_override.h): with the routing held
// equal, what differs between two backends is numerics alone.
class Replay final : public RoutingOverride {
 public:
  explicit Replay(const RoutingLog& log) : log_(log) {}
  void apply(int layer, int64_t pos0, int n, int k, int32_t* experts, float* weights) override {
    for (int t = 0; t < n; ++t) {
      const auto key = std::make_pair(pos0 + t, layer);
      const std::vector<int>& e = log_.routes.at(key);
      const std::vector<float>& w = log_.weights.at(key);
      ASSERT_EQ((int)e.size(), k);
      std::copy(e.begin(), e.end(), experts + t * k);
      std::copy(w.begin(), w.end(), weights + t * k);
    }
  }

 private:
  const RoutingLog& log_;
};

// The routing flips between two runs (the same expert set at a (position, layer) is no flip,
// whatever the rank order): how many, and the first in forward order, for the report. A flip
// changes every later position's logits by far more than kernel rounding does: on a GPU this
// tells a routing difference from a numeric one.
struct Flips {
  int count = 0;
  std::string first;
};
Flips routing_flips(const RoutingLog& a, const RoutingLog& b) {
  Flips f;
  for (const auto& [key, ea] : a.routes) {
    auto it = b.routes.find(key);
    if (it == b.routes.end()) continue;
    std::vector<int> x = ea, y = it->second;
    std::sort(x.begin(), x.end());
    std::sort(y.begin(), y.end());
    if (x == y) continue;
    if (f.count++ == 0) {
      f.first = "position " + std::to_string(key.first) + ", layer " + std::to_string(key.second) +
                ": cpu";
      for (int e : ea) f.first += " " + std::to_string(e);
      f.first += " vs device";
      for (int e : it->second) f.first += " " + std::to_string(e);
    }
  }
  return f;
}

struct RunResult {
  std::vector<float> prompt_logits;  // [n_prompt][V]
  std::vector<float> step_logits;    // [n_steps][V]
  std::vector<int32_t> tokens;       // tokens fed to the decode steps
  CudaGraphCounts graphs;
  RoutingLog routing;
  StandInCounts standin;  // the stand-in's counts over the run (differences of process totals)
};

constexpr int kPrompt = 12, kSteps = 8;

std::vector<int32_t> prompt_ids(int64_t vocab) {
  std::vector<int32_t> ids(kPrompt);
  uint64_t s = 99;
  for (auto& t : ids) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t = (int32_t)((s >> 33) % (uint64_t)vocab);
  }
  return ids;
}

// Prefill (all logits), then kSteps decode steps fed `force` (or the run's own greedy tokens);
// with `routing`, that run's routing replaces this one's.
RunResult run(const std::string& path, BackendKind backend, const std::vector<int32_t>* force,
              const RoutingLog* routing = nullptr) {
  const StandInCounts before = standin_counts();
  EngineOptions opt;
  opt.n_threads = 2;
  opt.n_ctx = kPrompt + kSteps + 4;
  opt.batch = kPrompt;
  opt.backend = backend;
  Engine eng(path, opt);
  const size_t V = (size_t)eng.n_vocab();
  RunResult r;
  eng.context().set_observer(&r.routing);
  std::unique_ptr<Replay> replay = routing ? std::make_unique<Replay>(*routing) : nullptr;
  eng.context().moe().set_routing_override(replay.get());
  eng.prefill(prompt_ids((int64_t)V), true, &r.prompt_logits);
  const float* last = r.prompt_logits.data() + (kPrompt - 1) * V;
  for (int i = 0; i < kSteps; ++i) {
    const int32_t tok = force ? (*force)[i] : top(last, V).first;
    r.tokens.push_back(tok);
    const std::span<const float> row = eng.decode(tok);
    r.step_logits.insert(r.step_logits.end(), row.begin(), row.end());
    last = r.step_logits.data() + (size_t)i * V;
  }
#if MOEFLOW_HAVE_CUDA
  r.graphs = cuda_graph_counts(eng.backend());
#endif
  eng.context().set_observer(nullptr);
  r.standin = standin_counts() - before;
  return r;
}

class GpuVsCpu : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { MOEFLOW_NEED_DEVICE(GetParam().device); }
};

TEST_P(GpuVsCpu, LogitsGreedyTokensDeterminismAndGraphs) {
  const Case& c = GetParam();
  const std::string path = make_model(c);
  const double tol = tolerance(c.device, c.type);
  const RunResult cpu = run(path, BackendKind::Cpu, nullptr);
  const RunResult gpu = run(path, c.device, &cpu.tokens);
  const size_t V = cpu.step_logits.size() / kSteps;

  double worst = 0;
  for (int t = 0; t < kPrompt; ++t) {
    const double d =
        rel_diff(gpu.prompt_logits.data() + t * V, cpu.prompt_logits.data() + t * V, V);
    worst = std::max(worst, d);
    EXPECT_LE(d, tol) << "prompt position " << t;
  }
  int near_ties = 0;
  for (int i = 0; i < kSteps; ++i) {
    const float* g = gpu.step_logits.data() + i * V;
    const float* p = cpu.step_logits.data() + i * V;
    const double d = rel_diff(g, p, V);
    worst = std::max(worst, d);
    EXPECT_LE(d, tol) << "decode step " << i;
    const auto [ct, margin] = top(p, V);
    const int32_t gt = top(g, V).first;
    if (gt != ct) {
      // Only a near tie on the CPU's own side excuses a different greedy token.
      EXPECT_LT(margin, 2 * tol) << "decode step " << i << ": GPU picks " << gt << ", CPU " << ct
                                 << " by a margin of " << margin;
      ++near_ties;
    }
  }
  EXPECT_LE(near_ties, 2) << "greedy tokens differ at " << near_ties << " of " << kSteps
                          << " steps";
  const Flips flips = routing_flips(cpu.routing, gpu.routing);
  std::printf(
      "%s %s %s: worst relative logit difference %.3g (tolerance %.3g), %d near-tie steps, "
      "%d routing flips%s%s\n",
      backend_kind_name(c.device), c.arch.c_str(), type_name(c.type), worst, tol, near_ties,
      flips.count, flips.count ? "; first at " : "", flips.first.c_str());
  // Numerics alone: the same run with the CPU's routing forced on the device (exact on the
  // stand-in; within the tolerance on CUDA, with every routing flip taken out).
  const RunResult held = run(path, c.device, &cpu.tokens, &cpu.routing);
  double worst_held = 0;
  for (size_t i = 0; i < held.prompt_logits.size(); i += V)
    worst_held = std::max(worst_held,
                          rel_diff(held.prompt_logits.data() + i, cpu.prompt_logits.data() + i, V));
  for (size_t i = 0; i < held.step_logits.size(); i += V)
    worst_held =
        std::max(worst_held, rel_diff(held.step_logits.data() + i, cpu.step_logits.data() + i, V));
  EXPECT_LE(worst_held, tol) << "with the CPU's routing held on the device";
  std::printf("  with the CPU's routing held: worst relative logit difference %.3g\n", worst_held);
  if (c.device == BackendKind::StandIn) {
    EXPECT_EQ(flips.count, 0) << "first at " << flips.first;
    // Work really went through the stream, and the host waited for it a bounded number of
    // times per token (each MoE layer's routing is one read back; printed for the record).
    EXPECT_GT(gpu.standin.ops, 0u);
    std::printf("stand-in: %.1f ops and %.1f host waits per token\n",
                double(gpu.standin.ops) / (kPrompt + kSteps),
                double(gpu.standin.syncs) / (kPrompt + kSteps));
    return;
  }

  // Decode steps captured as graphs and reused (updated) from one step to the next.
  EXPECT_GT(gpu.graphs.launches, 0u);
  EXPECT_GT(gpu.graphs.updates, 0u);

  // Deterministic, and the graphs change nothing: the same run without them, bit for bit.
  setenv("MOEFLOW_CUDA_GRAPHS", "0", 1);
  const RunResult plain = run(path, c.device, &cpu.tokens);
  unsetenv("MOEFLOW_CUDA_GRAPHS");
  EXPECT_EQ(plain.graphs.launches, 0u);
  EXPECT_TRUE(plain.prompt_logits == gpu.prompt_logits)
      << "prefill logits differ between two GPU runs";
  EXPECT_TRUE(plain.step_logits == gpu.step_logits)
      << "decode logits differ with and without CUDA graphs";
}

std::vector<Case> cases() {
  std::vector<Case> out;
  using T = GgmlType;
  // deepseek2: MLA heads of kv_lora_rank + rope dims (288 in "small", 576 in the released
  // models) take the attention kernels' wide variant.
  const char* archs[] = {"mixtral", "qwen2moe", "qwen3moe",  "olmoe",     "glm4moe",
                         "gpt-oss", "phimoe",   "deepseek2", "minimax-m2"};
  const T more[] = {T::F16,   T::BF16, T::Q4_0, T::Q4_1, T::Q5_0, T::Q5_1, T::IQ4_NL,
                    T::MXFP4, T::Q2_K, T::Q3_K, T::Q4_K, T::Q5_K, T::Q6_K, T::IQ4_XS};
  const size_t n_archs = std::size(archs);
  for (BackendKind d : device_kinds())
    for (size_t a = 0; a < n_archs; ++a) {
      // F32 (exact weights) and Q8_0 (the 8-bit activation path) on every architecture.
      out.push_back({d, archs[a], T::F32});
      out.push_back({d, archs[a], T::Q8_0});
      // The other fourteen formats: on CUDA every one on every architecture (each format has
      // its own kernels, and an architecture's shapes pick their variants). On the stand-in
      // device, whose arithmetic is the CPU's, a format adds only its block sizes to the
      // device path (weights, expert slots, copies), so each format runs on one architecture,
      // in rotation, and every architecture gets one or two of them: 32 cases, not 144
      // (~4 min of CI's summed test time saved; a plumbing defect of one architecture shows in
      // its F32 and Q8_0 cases, one of one block size in that format's case).
      for (size_t f = 0; f < std::size(more); ++f)
        if (d != BackendKind::StandIn || f % n_archs == a) out.push_back({d, archs[a], more[f]});
    }
  // The gated DeltaNet hybrids (the recurrent ops: conv1d_silu, gated_delta_net, sigmoid_mul)
  // and Gemma 4 (scale, softcap, GeGLU, two head sizes) in four formats each, not sixteen: what
  // they add to the device path is float ops on activations, which the block format does not
  // change; F32 (exact weights), Q8_0, and two K-quants keep the matmul paths of both activation
  // quantizations in play at a quarter of the CI time. (scripts/test.sh: the sanitizer builds
  // run their F32 and Q8_0, TSan F32 only, as for the other architectures.)
  for (BackendKind d : device_kinds())
    for (const char* arch : {"qwen3next", "qwen35moe", "gemma4"})
      for (T t : {T::F32, T::Q8_0, T::Q4_K, T::Q5_K}) out.push_back({d, arch, t});
  return out;
}

INSTANTIATE_TEST_SUITE_P(EveryArchAndFormat, GpuVsCpu, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           std::string name = std::string(backend_kind_name(info.param.device)) +
                                              "_" + info.param.arch + "_" +
                                              type_name(info.param.type);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace moeflow::test
