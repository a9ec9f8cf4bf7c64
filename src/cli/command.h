#pragma once
// Every `moeflow <command>` lives in its own cmd_<name>.cpp and registers itself here, so
// adding a command never touches main.cpp.
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/error.h"

namespace moeflow::cli {

// Exit statuses: 0 success, 1 a runtime error (a file that cannot be read, out of memory, a
// model the engine cannot run), 2 a usage error (an unknown or missing option, a value that
// cannot be parsed or is out of range, options that conflict).
constexpr int kExitError = 1, kExitUsage = 2;

// A usage error found after parsing (main exits with kExitUsage).
class UsageError : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
[[noreturn]] inline void usage_fail(fmt::format_string<Args...> f, Args&&... args) {
  throw UsageError(fmt::format(f, std::forward<Args>(args)...));
}

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
