// The VRAM expert cache on each device of device_kinds.h: an engine whose experts live in a
// cache of a few slots, filled from each slow tier (pinned RAM, RAM through staging, the file
// through O_DIRECT staging), against the same engine with every expert in VRAM: the same
// kernels read the same bytes, so prompt and decode logits must agree to float rounding (bit
// for bit on the stand-in) and greedy tokens must be identical. Without a CUDA device the CUDA
// cases are skipped ("no CUDA device: ...").
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "device_kinds.h"
#include "experts/expert_store.h"
#include "experts/resident_provider.h"
#include "gguf/gguf_file.h"
#include "model/gen/model_generator.h"
#include "policy/eviction_policy.h"
#include "runtime/backend_choice.h"
#include "runtime/engine.h"
#include "runtime/offload_session.h"

// A namespace of its own: the unity builds (MOEFLOW_UNITY) compile this file in one unit with
// others of its folder that define helpers of the same names.
namespace moeflow::test::gpu_vram_cache {
namespace {

constexpr int kPrompt = 12, kSteps = 8;

struct Outcome {
  std::vector<float> logits;  // prompt rows, then one row per decode step
  std::vector<int32_t> tokens;
};

Outcome run(BackendKind device, const std::shared_ptr<const GgufFile>& file,
            std::shared_ptr<ExpertProvider> prov) {
  EngineOptions opt;
  opt.backend = device;
  opt.n_ctx = 64;
  opt.batch = 16;
  Engine eng(file, opt, std::move(prov));
  std::vector<int32_t> prompt(kPrompt);
  for (int i = 0; i < kPrompt; ++i) prompt[i] = (int32_t)((i * 7919 + 13) % eng.n_vocab());
  Outcome r;
  eng.prefill(prompt, true, &r.logits);
  const int64_t V = eng.n_vocab();
  std::span<const float> row(r.logits.data() + (kPrompt - 1) * V, V);
  for (int s = 0; s < kSteps; ++s) {
    const int32_t t = (int32_t)(std::max_element(row.begin(), row.end()) - row.begin());
    r.tokens.push_back(t);
    row = eng.decode(t);
    r.logits.insert(r.logits.end(), row.begin(), row.end());
  }
  return r;
}

std::string gen(const std::string& arch) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("moeflow_vram_" + arch + "_" + std::to_string(getpid()) + ".gguf"))
                               .string();
  gen::GenOptions o;
  o.shape = gen::find_preset(gen::parse_arch(arch), "small");
  o.type = GgmlType::Q8_0;  // quick to generate (the sanitizer builds run this too); the
  o.seed = 5;               // cache moves bytes whatever their format
  gen::generate_model(o, path);
  return path;
}

struct SlowTier {
  const char* what;
  DeviceSource source;
  bool pin;
  const char* name;
};

class GpuVramCache : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override { MOEFLOW_NEED_DEVICE(GetParam()); }
};

TEST_P(GpuVramCache, LogitsAndTokensMatchEveryExpertInVram) {
  const BackendKind dev = GetParam();
  for (const char* arch : {"mixtral", "qwen3moe"}) {
    SCOPED_TRACE(arch);
    const std::string path = gen(arch);
    auto file = std::shared_ptr<const GgufFile>(GgufFile::open(path));
    const Outcome want = run(dev, file, nullptr);
    const uint64_t slot = ExpertStore::open(*file)->slot_bytes();
    const int top_k = model_top_k(*file);
    for (const SlowTier& t :
         {SlowTier{"pinned RAM", DeviceSource::Ram, true, "pinned ram->device"},
          SlowTier{"RAM via staging", DeviceSource::Ram, false, "ram->staging->device"},
          SlowTier{"file via staging", DeviceSource::File, true, "file->staging->device"}}) {
      SCOPED_TRACE(t.what);
      OffloadOptions o;
      o.expert_cache = slot * (top_k + 2);  // a layer's top-k and two more
      const DeviceTarget target{make_device_link(dev), t.source, t.pin};
      OffloadSession s = make_offload(o, *file, &target);
      ASSERT_TRUE(s.provider);
      EXPECT_EQ(s.provider->memory_space(), MemSpace::Device);
      const Outcome got = run(dev, file, s.provider);
      EXPECT_EQ(got.tokens, want.tokens);
      ASSERT_EQ(got.logits.size(), want.logits.size());
      double worst = 0, scale = 1;
      for (size_t i = 0; i < want.logits.size(); ++i) {
        worst = std::max(worst, (double)std::fabs(got.logits[i] - want.logits[i]));
        scale = std::max(scale, (double)std::fabs(want.logits[i]));
      }
      EXPECT_LE(worst / scale, dev == BackendKind::StandIn ? 0.0 : 1e-6)
          << "largest logit difference " << worst;
      const OffloadStats st = s.provider->stats();
      EXPECT_EQ(st.io_backend, t.name);
      uint64_t bytes = 0;
      for (const auto& l : st.layers) bytes += l.bytes_read;
      EXPECT_GT(bytes, 0u);
    }
    std::filesystem::remove(path);
  }
}

// The hybrid with the CPU always sooner: every miss computed by the CPU from the mapped file
// (its activations quantized as the CPU does, so within the GPU-vs-CPU tolerance of
// test_gpu_logits, not bit for bit), the rest on the GPU; then the measured cost model.
TEST_P(GpuVramCache, HybridCpuExpertsAgreeWithinTheCpuTolerance) {
  const BackendKind dev = GetParam();
  const std::string path = gen("mixtral");
  auto file = std::shared_ptr<const GgufFile>(GgufFile::open(path));
  const Outcome want = run(dev, file, nullptr);
  const uint64_t slot = ExpertStore::open(*file)->slot_bytes();
  for (const bool forced : {true, false}) {
    SCOPED_TRACE(forced ? "CPU forced" : "measured cost model");
    OffloadOptions o;
    o.expert_cache = slot * (model_top_k(*file) + 2);
    DeviceTarget target{make_device_link(dev), DeviceSource::Ram, true};
    target.hybrid = true;
    OffloadSession s = make_offload(o, *file, &target);
    ASSERT_TRUE(s.hybrid.valid());
    std::shared_ptr<CachedExpertProvider> prov = s.provider;
    if (forced) {
      OffloadConfig cfg;
      cfg.budget_bytes = slot * (model_top_k(*file) + 2);
      cfg.top_k = model_top_k(*file);
      cfg.allocator = &target.link->device_allocator();
      cfg.transfer = s.device_transfer;
      auto res = std::make_shared<ResidentExpertProvider>(*file);
      cfg.host_views = std::shared_ptr<const ExpertViewTable>(res, &res->table());
      cfg.hybrid = HybridCosts{1e-12, 0.0, 1e9};
      auto store = ExpertStore::open(*file);
      PolicyOptions po;
      po.n_layers = store->n_layers();
      po.n_experts = store->max_experts();
      po.top_k = cfg.top_k;
      po.capacity_total = (int)(cfg.budget_bytes / slot);
      prov = std::make_shared<CachedExpertProvider>(std::move(store),
                                                    make_eviction_policy("lfu", po), cfg);
    }
    const Outcome got = run(dev, file, prov);
    uint64_t cpu = 0;
    for (const auto& l : prov->stats().layers) cpu += l.cpu_computed;
    if (forced) {
      EXPECT_GT(cpu, 0u);
    }
    ASSERT_EQ(got.logits.size(), want.logits.size());
    double worst = 0, scale = 1;
    for (size_t i = 0; i < want.logits.size(); ++i) {
      worst = std::max(worst, (double)std::fabs(got.logits[i] - want.logits[i]));
      scale = std::max(scale, (double)std::fabs(want.logits[i]));
    }
    // The stand-in's arithmetic is the CPU's: whichever side computes an expert, the same bits.
    EXPECT_LE(worst / scale, dev == BackendKind::StandIn ? 0.0 : 5e-2)
        << "largest logit difference " << worst << ", " << cpu << " CPU experts";
  }
  std::filesystem::remove(path);
}

TEST_P(GpuVramCache, ABudgetBelowOneLayersTopKIsRefused) {
  const std::string path = gen("mixtral");
  auto file = std::shared_ptr<const GgufFile>(GgufFile::open(path));
  OffloadOptions o;
  o.expert_cache = ExpertStore::open(*file)->slot_bytes();
  const DeviceTarget target{make_device_link(GetParam()), DeviceSource::Ram, true};
  EXPECT_THROW(make_offload(o, *file, &target), Error);
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(EachDevice, GpuVramCache, ::testing::ValuesIn(device_kinds()),
                         [](const auto& info) {
                           return std::string(backend_kind_name(info.param));
                         });

}  // namespace
}  // namespace moeflow::test::gpu_vram_cache
