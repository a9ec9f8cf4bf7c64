#include <cstdio>
#include <map>

#include "cli/command.h"
#include "core/error.h"

namespace moeflow::cli {

std::vector<CommandSpec>& command_registry() {
  static std::vector<CommandSpec> registry;
  return registry;
}

bool register_command(std::string name, std::string description, CommandSetup setup) {
  command_registry().push_back({std::move(name), std::move(description), std::move(setup)});
  return true;
}

}  // namespace moeflow::cli

int main(int argc, char** argv) {
  using namespace moeflow::cli;
  CLI::App app{"moeflow: Mixture-of-Experts inference with expert offloading"};
  app.require_subcommand(1);
  std::map<CLI::App*, CommandMain> mains;
  for (auto& spec : command_registry()) {
    CLI::App* sub = app.add_subcommand(spec.name, spec.description);
    mains[sub] = spec.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [sub, fn] : mains) {
      if (sub->parsed()) return fn();
    }
  } catch (const moeflow::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "moeflow: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    std::fprintf(stderr, "moeflow: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "moeflow: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
