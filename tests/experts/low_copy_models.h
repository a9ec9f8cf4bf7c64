#pragma once
// Test models for the lossy modes: a tiny Mixtral-style model in F16 and its copy packed with
// low-precision expert copies (`moeflow pack --low Q4_0`), in the temp folder under names that
// carry the process id (ctest runs test binaries in parallel); and the greedy run both lossy-mode
// suites compare.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "model/moe/precision_mode.h"
#include "runtime/engine.h"
#include "runtime/offload_session.h"

namespace moeflow::test {

inline std::string temp_gguf(const std::string& tag, const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("moeflow_" + tag + "_" + name + "_" + std::to_string(::getpid()) + ".gguf"))
      .string();
}

// Runs a shell command quietly; its exit status.
inline int sh_quiet(const std::string& cmd) {
  return std::system((cmd + " > /dev/null 2>&1").c_str());
}

struct LowCopyModels {
  std::string plain, packed;

  // Empty string on success, else the command that failed.
  std::string make(const std::string& tag, int seed) {
    plain = temp_gguf(tag, "plain");
    packed = temp_gguf(tag, "packed");
    const std::string bin = MOEFLOW_BINARY;
    const std::string gen = bin + " gen-model --arch mixtral --preset tiny --type F16 --seed " +
                            std::to_string(seed) + " -q -o " + plain;
    if (sh_quiet(gen) != 0) return gen;
    const std::string pack = bin + " pack -m " + plain + " -o " + packed + " --low Q4_0";
    if (sh_quiet(pack) != 0) return pack;
    return "";
  }
  void remove() const {
    std::filesystem::remove(plain);
    std::filesystem::remove(packed);
  }
  std::shared_ptr<const GgufFile> open_packed() const {
    return std::shared_ptr<const GgufFile>(GgufFile::open(packed));
  }
};

// A GoogleTest suite that makes the two models once (seed picks the weights; one suite per
// seed) and removes them at the end.
template <int Seed>
class LowCopySuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    models_ = new LowCopyModels();
    const std::string failed = models_->make("lowcopy" + std::to_string(Seed), Seed);
    ASSERT_EQ(failed, "");
    plain_ = &models_->plain;
    packed_ = &models_->packed;
  }
  static void TearDownTestSuite() {
    models_->remove();
    delete models_;
    models_ = nullptr;
  }
  static std::shared_ptr<const GgufFile> packed() { return models_->open_packed(); }
  static inline LowCopyModels* models_ = nullptr;
  static inline std::string* plain_ = nullptr;
  static inline std::string* packed_ = nullptr;
};

struct GreedyRun {
  std::vector<float> logits;  // prefill's last row + every decode row
  OffloadStats stats;         // of the offload session's provider, when there is one
  std::vector<PrecisionUsage::Counts> uses;
};

// Greedy run: `prompt` prefilled in chunks of `batch`, then n_decode single-token steps.
// `off` (optional) is applied the way the CLI does; `provider` (optional) serves the experts in
// place of the session's provider; `observer` (optional) watches the forward pass.
inline GreedyRun run_greedy(std::shared_ptr<const GgufFile> file,
                            const std::vector<int32_t>& prompt, int n_decode, int batch,
                            const OffloadOptions* off,
                            std::shared_ptr<ExpertProvider> provider = nullptr,
                            ForwardObserver* observer = nullptr) {
  EngineOptions opt;
  opt.n_threads = 2;
  opt.n_ctx = 64;
  opt.batch = batch;
  OffloadSession session;
  if (off) session = make_offload(*off, *file);
  if (!provider) provider = session.provider;
  Engine eng(file, opt, provider);
  if (off) session.attach(eng.context(), eng.model());
  if (observer) eng.context().set_observer(observer);
  GreedyRun r;
  std::vector<float> last;
  eng.prefill(prompt, false, &last);
  r.logits = last;
  for (int i = 0; i < n_decode; ++i) {
    const int32_t tok =
        static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    auto row = eng.decode(tok);
    last.assign(row.begin(), row.end());
    r.logits.insert(r.logits.end(), row.begin(), row.end());
  }
  if (session.provider) r.stats = session.provider->stats();
  if (session.usage) r.uses = session.usage->snapshot();
  return r;
}

}  // namespace moeflow::test
