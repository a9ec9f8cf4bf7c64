#pragma once
// Test models for the lossy modes: a tiny Mixtral-style model in F16 and its copy packed with
// low-precision expert copies (`moeflow pack --low Q4_0`), in the temp folder under names that
// carry the process id (ctest runs test binaries in parallel).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "gguf/gguf_file.h"

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

}  // namespace moeflow::test
