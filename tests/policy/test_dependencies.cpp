// policy/ sits below the live cache (experts/) and the simulator (trace/), which both build on
// its cache core: it may include core/, model/ and itself, nothing else of the project.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>

namespace {

TEST(PolicyModule, IncludesOnlyCoreModelAndItself) {
  const std::filesystem::path dir = std::filesystem::path(MOEFLOW_SOURCE_DIR) / "src" / "policy";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  const std::set<std::string> allowed = {"core", "model", "policy"};
  const std::regex inc(R"re(^\s*#\s*include\s*"([a-z_]+)/)re");
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream f(entry.path());
    ++files;
    std::string line;
    for (int n = 1; std::getline(f, line); ++n) {
      std::smatch m;
      if (std::regex_search(line, m, inc)) {
        EXPECT_TRUE(allowed.count(m[1].str()))
            << entry.path().filename().string() << ":" << n << ": " << line;
      }
    }
  }
  EXPECT_GT(files, 10);
}

}  // namespace
