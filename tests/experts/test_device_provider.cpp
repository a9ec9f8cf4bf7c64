// DeviceExpertProvider without a GPU: over a stand-in "device" backend whose memory is host
// memory tagged PinnedHost (its ops are the CPU backend's), every expert view (high and low
// precision, stacked and packed files, fused and split gate/up) must point into the provider's
// own copies, hold the same bytes as the file, keep its shape, and the forward pass over it
// must give the resident provider's logits bit for bit.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "experts/device_provider.h"
#include "experts/resident_provider.h"
#include "gguf/gguf_file.h"
#include "low_copy_models.h"
#include "model/gen/model_generator.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "support/stand_in_device.h"

namespace moeflow::test {
namespace {

std::string gen_model(const std::string& arch, GgmlType t) {
  const std::string path = temp_gguf("devprov", arch + "_" + type_name(t));
  gen::GenOptions o;
  o.shape = gen::find_preset(gen::parse_arch(arch), "tiny");
  o.type = t;
  o.seed = 7;
  gen::generate_model(o, path);
  return path;
}

// Every expert view of `dev` is a copy of the same view of `host`, in the backend's buffers.
void expect_copies(ResidentExpertProvider& host, DeviceExpertProvider& dev, const StandInDevice& be,
                   bool low) {
  ASSERT_EQ(dev.has_low_precision(), host.has_low_precision());
  uint64_t bytes = 0;
  for (int p = 0; p < (low ? 2 : 1); ++p)
    for (size_t l = 0; l < host.index().layers.size(); ++l)
      for (int e = 0; e < host.index().layers[l].n_expert; ++e) {
        const ExpertView h = host.acquire((int)l, e, (Precision)p),
                         d = dev.acquire((int)l, e, (Precision)p);
        for (int k = 0; k < kNumExpertProj; ++k) {
          const TensorView &hv = h.proj[k], &dv = d.proj[k];
          ASSERT_EQ((bool)hv, (bool)dv);
          if (!hv) continue;
          EXPECT_EQ(dv.space, MemSpace::PinnedHost);
          EXPECT_NE(dv.data, hv.data);
          EXPECT_EQ(dv.type, hv.type);
          EXPECT_EQ(dv.rows(), hv.rows());
          EXPECT_EQ(dv.cols(), hv.cols());
          EXPECT_EQ(dv.row_stride(), hv.row_stride());
          // Inside one live buffer of the backend.
          auto it = be.alloc_.live.upper_bound(dv.data);
          ASSERT_NE(it, be.alloc_.live.begin());
          --it;
          EXPECT_LE(dv.data + hv.nbytes(), it->first + it->second);
          ASSERT_EQ(std::memcmp(dv.data, hv.data, hv.nbytes()), 0)
              << "layer " << l << " expert " << e << " projection " << k << " precision " << p;
          bytes += hv.nbytes();
        }
      }
  EXPECT_GE(dev.device_bytes(), bytes);
  // Only alignment padding between the matrices of a run is copied on top.
  EXPECT_LE(dev.device_bytes(), bytes + bytes / 20 + (64u << 10));
}

std::vector<float> logits_of(const Model& m, ExpertProvider& prov, Backend* be) {
  std::unique_ptr<ForwardContext> ctx =
      be ? std::make_unique<ForwardContext>(m, prov, 32, 8, *be)
         : std::make_unique<ForwardContext>(m, prov, 32, 8, nullptr);
  const std::vector<int32_t> toks = {3, 17, 42, 5, 88, 0, 63, 17};
  std::vector<float> out;
  ctx->forward(std::span<const int32_t>(toks.data(), 5), LogitsMode::All);
  out.assign(ctx->logits(), ctx->logits() + 5 * m.n_vocab());
  for (int i = 5; i < 8; ++i) {
    ctx->forward(std::span<const int32_t>(&toks[i], 1), LogitsMode::Last);
    out.insert(out.end(), ctx->logits(), ctx->logits() + m.n_vocab());
  }
  return out;
}

void check_model(const std::string& path) {
  auto file = std::shared_ptr<const GgufFile>(GgufFile::open(path));
  ResidentExpertProvider host(*file);
  StandInDevice be;
  DeviceExpertProvider dev(*file, be);
  EXPECT_GT(be.copies, 0);
  expect_copies(host, dev, be, host.has_low_precision());
  const Model m(*file);
  EXPECT_EQ(logits_of(m, dev, &be), logits_of(m, host, nullptr)) << path;
}

TEST(DeviceExpertProvider, StackedExpertsCopiedAndForwardBitIdentical) {
  for (const char* arch : {"mixtral", "qwen2moe", "qwen3moe", "olmoe"}) {
    const std::string path = gen_model(arch, GgmlType::Q8_0);
    check_model(path);
    std::filesystem::remove(path);
  }
}

TEST(DeviceExpertProvider, PackedFileWithLowPrecisionCopies) {
  LowCopyModels m;
  ASSERT_EQ(m.make("devprov", 5), "");
  check_model(m.packed);
  m.remove();
}

TEST(DeviceExpertProvider, RefusesAHostBackend) {
  const std::string path = gen_model("mixtral", GgmlType::F32);
  auto file = std::shared_ptr<const GgufFile>(GgufFile::open(path));
  CpuBackend cpu;
  EXPECT_THROW(DeviceExpertProvider(*file, cpu), Error);
  std::filesystem::remove(path);
}

TEST(DeviceExpertProvider, EngineRefusesOffloadingWithADeviceBackend) {
  const std::string path = gen_model("mixtral", GgmlType::F32);
  auto file = std::shared_ptr<const GgufFile>(GgufFile::open(path));
  EngineOptions opt;
  opt.backend = BackendKind::Cuda;
  try {
    Engine eng(file, opt, std::make_shared<ResidentExpertProvider>(*file));
    FAIL() << "an expert provider of the caller's with --backend cuda";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RAM expert cache"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace moeflow::test
