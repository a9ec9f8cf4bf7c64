#pragma once
// The published chat templates of tests/chat_template/templates/ (README.md there says where each
// comes from), read by the tests of several modules.
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

namespace moeflow::test {

inline std::string published_template(const std::string& name) {
  const std::string path =
      std::string(MOEFLOW_SOURCE_DIR) + "/tests/chat_template/templates/" + name + ".jinja";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace moeflow::test
