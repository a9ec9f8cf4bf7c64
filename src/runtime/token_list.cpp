#include "runtime/token_list.h"

#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace moeflow {

bool is_id_prompt(const std::string& s) { return s.rfind("ids:", 0) == 0; }

std::vector<int32_t> parse_token_list(const std::string& s, const std::string& what) {
  std::string body = is_id_prompt(s) ? s.substr(4) : s;
  std::vector<int32_t> out;
  size_t i = 0;
  while (i <= body.size()) {
    size_t j = body.find(',', i);
    if (j == std::string::npos) j = body.size();
    std::string item = body.substr(i, j - i);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item.empty()) {
      if (j == body.size() && !out.empty() && i == j) break;  // tolerate one trailing comma
      fail("{}: empty entry in token list '{}'", what, s);
    }
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (errno != 0 || end == item.c_str() || *end != '\0' || v < 0 || v > INT32_MAX)
      fail("{}: '{}' is not a valid token id", what, item);
    out.push_back((int32_t)v);
    i = j + 1;
  }
  if (out.empty()) fail("{}: the token list is empty", what);
  return out;
}

}  // namespace moeflow
