#include <cstdio>
#include <map>
#include <string>

#include "cli/build_info.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/watchdog.h"

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
  app.set_version_flag("--version", version_line());
  std::map<CLI::App*, CommandMain> mains;
  for (auto& spec : command_registry()) {
    CLI::App* sub = app.add_subcommand(spec.name, spec.description);
    mains[sub] = spec.setup(*sub);
  }
  std::string cmd = "moeflow";
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // One line naming the command, whatever CLI11's own exit code (104-109) would have been.
    for (const CLI::App* sub : app.get_subcommands()) cmd += " " + sub->get_name();
    std::fprintf(stderr, "%s: error: %s (see %s --help)\n", cmd.c_str(), e.what(), cmd.c_str());
    return kExitUsage;
  }
  for (const CLI::App* sub : app.get_subcommands()) cmd += " " + sub->get_name();
  moeflow::start_watchdog_from_env();
  auto report = [&](const char* what) {
    std::fflush(stdout);
    std::fprintf(stderr, "moeflow: error: %s\n", what);
  };
  try {
    for (auto& [sub, fn] : mains) {
      if (sub->parsed()) return fn();
    }
  } catch (const UsageError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s (see %s --help)\n", cmd.c_str(), e.what(), cmd.c_str());
    return kExitUsage;
  } catch (const moeflow::Error& e) {
    report(e.what());
    return kExitError;
  } catch (const std::bad_alloc&) {
    report("out of memory");
    return kExitError;
  } catch (const std::exception& e) {
    report(e.what());
    return kExitError;
  }
  return kExitError;
}
