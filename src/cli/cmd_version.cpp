#include <cstdio>
#include <string>

#include "backend/cpu/matmul.h"
#include "cli/build_info.h"
#include "cli/command.h"

namespace moeflow::cli {

std::string version_line() {
  return std::string("moeflow 0.1.0 (commit ") + moeflow_build_commit() + ")";
}

namespace {

const bool registered_version = register_command(
    "version", "Print the version, the commit built from and the SIMD level", [](CLI::App&) {
      return CommandMain([] {
        std::printf("%s\nsimd: %s\n", version_line().c_str(), simd_level());
        return 0;
      });
    });

}  // namespace
}  // namespace moeflow::cli
