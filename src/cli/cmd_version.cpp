#include <cstdio>

#include "backend/cpu/matmul.h"
#include "cli/command.h"

namespace moeflow::cli {
namespace {

const bool registered_version =
    register_command("version", "Print version and SIMD level", [](CLI::App&) {
      return CommandMain([] {
        std::printf("moeflow 0.1.0\n");
        return 0;
      });
    });

}  // namespace
}  // namespace moeflow::cli
