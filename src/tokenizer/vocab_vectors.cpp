#include "tokenizer/vocab_vectors.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace moeflow {

namespace {
std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open test vector file", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

std::vector<VocabVector> load_vocab_vectors(const std::string& inp_path,
                                            const std::string& out_path) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  const std::string inp = read_all(inp_path);
  std::vector<std::string> inputs;
  size_t b = 0;
  while (true) {
    const size_t e = inp.find(sep, b);
    if (e == std::string::npos) {
      if (b < inp.size()) inputs.push_back(inp.substr(b));
      break;
    }
    inputs.push_back(inp.substr(b, e - b));
    b = e + sep.size();
  }
  const std::string out = read_all(out_path);
  std::vector<std::vector<int32_t>> expected;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<int32_t> ids;
    std::istringstream ls(line);
    long long v;
    while (ls >> v) ids.push_back(static_cast<int32_t>(v));
    if (!ls.eof()) fail("{}: line {} is not a list of token ids", out_path, expected.size() + 1);
    expected.push_back(std::move(ids));
  }
  if (inputs.size() != expected.size())
    fail("{}: {} inputs but {} has {} lines", inp_path, inputs.size(), out_path, expected.size());
  std::vector<VocabVector> v;
  for (size_t i = 0; i < inputs.size(); ++i)
    v.push_back({std::move(inputs[i]), std::move(expected[i])});
  return v;
}

VocabVectorResult check_vocab_vectors(const Tokenizer& tok, const std::vector<VocabVector>& v) {
  VocabVectorResult r;
  r.total = v.size();
  for (size_t i = 0; i < v.size(); ++i) {
    if (tok.encode(v[i].input, false, false) == v[i].expected)
      ++r.passed;
    else
      r.failed.push_back(i);
  }
  return r;
}

std::string format_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    if (!s.empty()) s += ' ';
    s += std::to_string(id);
  }
  return s;
}

}  // namespace moeflow
