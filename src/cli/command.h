#pragma once
// Every `moeflow <command>` lives in its own cmd_<name>.cpp and registers itself here, so
// adding a command never touches main.cpp.
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace moeflow::cli {

// setup() adds the command's options to `sub` and returns the function that runs it
// (returning the process exit code). Options must bind to state owned by that closure.
using CommandMain = std::function<int()>;
using CommandSetup = std::function<CommandMain(CLI::App& sub)>;

struct CommandSpec {
  std::string name;
  std::string description;
  CommandSetup setup;
};

bool register_command(std::string name, std::string description, CommandSetup setup);
std::vector<CommandSpec>& command_registry();

}  // namespace moeflow::cli
