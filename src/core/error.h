#pragma once
// One exception type for every user-facing failure: the message names the file, tensor or
// setting at fault, and the CLI prints it as one line and exits non-zero.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace moeflow {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

#define MOEFLOW_CHECK(cond, ...)               \
  do {                                         \
    if (!(cond)) ::moeflow::fail(__VA_ARGS__); \
  } while (0)

}  // namespace moeflow
