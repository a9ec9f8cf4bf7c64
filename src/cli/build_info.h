// What the moeflow binary was built from (generated at build time, cmake/moeflow_version.cmake).
#pragma once

#include <string>

namespace moeflow {

// `git describe --always --dirty` of the source tree at build time: the short commit, with
// "-dirty" when tracked files differed from it; "unknown" when built without git.
const char* moeflow_build_commit();

namespace cli {
// "moeflow 0.1.0 (commit f8fa329-dirty)": what `moeflow version` and `moeflow --version` print
// first, and what the benchmark scripts record as the measured binary.
std::string version_line();
}  // namespace cli

}  // namespace moeflow
