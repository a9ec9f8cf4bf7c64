// `moeflow calibrate` (runtime/calibrate.h): every grid point it reports is checked against an
// independent run of `moeflow perplexity` with the same thresholds (perplexity and KL against
// the saved exact logits), and the pick against the target it was given.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "support/run_binary.h"

namespace moeflow {
namespace {

using test::run_moeflow;

class Calibrate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("moeflow_calibrate_" + std::to_string(::getpid())));
    std::filesystem::create_directories(*dir_);
    packed_ = new std::string((*dir_ / "demo-low.gguf").string());
    text_ = new std::string((*dir_ / "text.txt").string());
    const auto r = run_moeflow("pack -m " MOEFLOW_SOURCE_DIR "/models/demo-moe.gguf -o " +
                               *packed_ + " --low Q4_0");
    ASSERT_EQ(r.rc, 0) << r.out;
    std::ifstream in(MOEFLOW_SHARED_DATA "/corpus/wikipedia_texts.txt", std::ios::binary);
    ASSERT_TRUE(in) << "the shared corpus is missing";
    std::string text(6000, '\0');
    in.read(text.data(), (std::streamsize)text.size());
    std::ofstream(*text_, std::ios::binary) << text;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
    delete packed_;
    delete text_;
  }
  static nlohmann::json calibrate(const std::string& extra) {
    const auto r = run_moeflow("calibrate -m " + *packed_ + " -f " + *text_ +
                                   " -c 32 --chunks 4 -t 2 --grid-step 0.5 --json " + extra,
                               false);
    EXPECT_EQ(r.rc, 0) << r.out;
    return nlohmann::json::parse(r.out);
  }
  static std::filesystem::path* dir_;
  static std::string* packed_;
  static std::string* text_;
};
std::filesystem::path* Calibrate::dir_ = nullptr;
std::string* Calibrate::packed_ = nullptr;
std::string* Calibrate::text_ = nullptr;

TEST_F(Calibrate, GridPointsMatchPerplexityRunsAndThePickMeetsTheTarget) {
  const nlohmann::json j = calibrate("--max-ppl-increase 1");
  ASSERT_EQ(j["points"].size(), 6u);  // (T1, T2) in {0, .5, 1}, T1 <= T2
  const std::string exact = (*dir_ / "exact.logits").string();
  auto r = run_moeflow("perplexity -m " + *packed_ + " -f " + *text_ +
                           " -c 32 --chunks 4 -t 2 --json --save-logits " + exact,
                       false);
  ASSERT_EQ(r.rc, 0) << r.out;
  const double ppl_exact = nlohmann::json::parse(r.out)["perplexity"];
  EXPECT_NEAR(j["ppl_exact"].get<double>(), ppl_exact, 1e-9 * ppl_exact);
  int lossy = 0;
  for (const auto& p : j["points"]) {
    const double t1 = p["t1"], t2 = p["t2"];
    SCOPED_TRACE(std::to_string(t1) + " " + std::to_string(t2));
    EXPECT_LE(t1, t2);
    r = run_moeflow("perplexity -m " + *packed_ + " -f " + *text_ +
                        " -c 32 --chunks 4 -t 2 --json --mode hobbit-all --hobbit-t1 " +
                        std::to_string(t1) + " --hobbit-t2 " + std::to_string(t2) +
                        " --kl-divergence " + exact,
                    false);
    ASSERT_EQ(r.rc, 0) << r.out;
    const nlohmann::json q = nlohmann::json::parse(r.out);
    EXPECT_NEAR(p["perplexity"].get<double>(), q["perplexity"].get<double>(), 1e-9 * ppl_exact);
    EXPECT_NEAR(p["kl_divergence"].get<double>(), q["kl_divergence"].get<double>(), 1e-9);
    const uint64_t uses = p["uses"]["high"].get<uint64_t>() + p["uses"]["low"].get<uint64_t>() +
                          p["uses"]["skip"].get<uint64_t>();
    EXPECT_GT(uses, 0u);
    if (t1 == 1.0) {  // everything high precision: exact
      EXPECT_EQ(p["kl_divergence"].get<double>(), 0.0);
      EXPECT_EQ(p["miss_bytes_ratio"].get<double>(), 1.0);
    } else {
      EXPECT_LT(p["miss_bytes_ratio"].get<double>(), 1.0);
      lossy += p["kl_divergence"].get<double>() > 0;
    }
  }
  EXPECT_EQ(lossy, 5) << "every lossy grid point should change the logits";
  // The pick: within 1% and no point within 1% moves fewer bytes per miss.
  const auto& best = j["best"];
  EXPECT_LE(best["ppl_increase"].get<double>(), 0.01);
  for (const auto& p : j["points"]) {
    if (p["ppl_increase"].get<double>() <= 0.01) {
      EXPECT_GE(p["miss_bytes_ratio"].get<double>(),
                best["miss_bytes_ratio"].get<double>() - 1e-12);
    }
  }
}

TEST_F(Calibrate, TargetsMoveThePick) {
  // No accuracy loss allowed: only exact-equivalent points qualify.
  const nlohmann::json strict = calibrate("--max-ppl-increase 0 --max-kl 0");
  EXPECT_EQ(strict["best"]["kl_divergence"].get<double>(), 0.0);
  // Anything goes: the fewest bytes (top-1 only, every other expert skipped: T1 = T2 = 0).
  const nlohmann::json loose = calibrate("--max-ppl-increase 100000");
  EXPECT_EQ(loose["t1"].get<double>(), 0.0);
  EXPECT_EQ(loose["t2"].get<double>(), 0.0);
}

TEST_F(Calibrate, BadInputIsRefused) {
  auto r = run_moeflow("calibrate -m " MOEFLOW_SOURCE_DIR "/models/demo-moe.gguf -f " + *text_);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("moeflow pack"), std::string::npos) << r.out;
  r = run_moeflow("calibrate -m " + *packed_ + " -f " + *text_ + " --grid-step 0");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("--grid-step"), std::string::npos) << r.out;
  r = run_moeflow("calibrate -m " + *packed_ + " -f /nonexistent/text.txt");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("-f"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace moeflow
