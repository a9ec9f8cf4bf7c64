#pragma once
// Runs the moeflow binary the way a user would, for the tests of CLI contracts.
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace moeflow::test {

struct Cmd {
  int rc;           // exit status (WEXITSTATUS)
  std::string out;  // stdout, and stderr too when merged
};

// `args` is appended to the binary's path as shell text (quote paths yourself).
inline Cmd run_moeflow(const std::string& args, bool merge_stderr = true) {
  const std::string cmd =
      std::string(MOEFLOW_BINARY) + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

// The last non-empty line of a command's output as JSON (`--json` / `--stats json` print one
// object last).
inline nlohmann::json last_json_line(const std::string& out) {
  const size_t end = out.find_last_not_of('\n');
  const size_t start = out.rfind('\n', end);
  return nlohmann::json::parse(out.substr(start == std::string::npos ? 0 : start + 1));
}

}  // namespace moeflow::test
