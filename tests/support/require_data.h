#pragma once
// Tests that need data from outside the repository (../shared/data: the real vocabularies,
// routing traces and corpus) say so with MOEFLOW_REQUIRE_PATH instead of a bare GTEST_SKIP(),
// so that a missing file is never a silent pass:
//   * outside CI the test is skipped with the path it needs (a checkout without ../shared);
//     scripts/test.sh lists every skip and fails on one it does not expect;
//   * under CI (CI=true, exported by .ci/run), where the shared data is always present, the
//     test fails naming the path.
// A skip for any other reason must name that reason and be allow-listed in scripts/test.sh
// (the only one today: OffloadMemory's page-cache check on a filesystem without O_DIRECT).
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace moeflow::test {

inline bool in_ci() {
  const char* v = std::getenv("CI");
  if (!v) return false;
  std::string s(v);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s == "1" || s == "true" || s == "yes";
}

}  // namespace moeflow::test

// Statement form: returns from the test (skipped or failed) when `path` does not exist.
#define MOEFLOW_REQUIRE_PATH(path)                                                            \
  do {                                                                                        \
    const std::string moeflow_required_path_ = (path);                                        \
    if (!std::filesystem::exists(moeflow_required_path_)) {                                   \
      if (::moeflow::test::in_ci())                                                           \
        GTEST_FAIL() << "required under CI (CI=true): shared data " << moeflow_required_path_ \
                     << " is missing";                                                        \
      else                                                                                    \
        GTEST_SKIP() << "shared data " << moeflow_required_path_                              \
                     << " is missing (no ../shared/data next to this checkout); "             \
                        "this fails under CI";                                                \
    }                                                                                         \
  } while (0)
