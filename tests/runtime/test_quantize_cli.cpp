// `moeflow quantize`: every weight matrix re-encoded to the asked type (or its documented
// fallback) and decoding to values within that type's error of the input, 1-D tensors and
// routers copied byte for byte, metadata carried over, and bad requests refused cleanly.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "quant/quant.h"
#include "support/run_binary.h"
#include "support/test_helpers.h"
#include "support/tiny_model.h"

namespace moeflow::test {
namespace {

int run_quiet(const std::string& args, std::string* out = nullptr) {
  Cmd c = run_moeflow(args);
  if (out) *out = c.out;
  return c.rc;
}

std::vector<double> decode(const GgufFile& f, const GgufTensorInfo& t) {
  std::vector<float> row((size_t)t.dims[0]);
  std::vector<double> all;
  const size_t rb = row_bytes(t.type, t.dims[0]);
  for (int64_t r = 0; r < t.rows(); ++r) {
    dequantize_row(t.type, f.data(t) + r * rb, row.data(), t.dims[0]);
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

TEST(QuantizeCli, ReencodesMatricesAndKeepsTheRest) {
  TinySpec s;
  s.arch = "qwen2moe";
  s.n_embd = 256;  // rows of 256 fit Q4_K super-blocks, so no fallback is needed
  s.n_ff_exp = 256;
  s.n_ff_shexp = 256;
  const std::string in = temp_path("qz_in.gguf"), out = temp_path("qz_out.gguf");
  write_tiny_model(s, in);
  std::string log;
  ASSERT_EQ(
      run_quiet("quantize -q -m " + in + " -o " + out + " --type Q8_0 --expert-type Q4_K", &log), 0)
      << log;

  auto a = GgufFile::open(in), b = GgufFile::open(out);
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  EXPECT_EQ(a->get_string("general.architecture"), b->get_string("general.architecture"));
  EXPECT_EQ(a->get_int("qwen2moe.expert_count"), b->get_int("qwen2moe.expert_count"));
  int n_expert_q4k = 0, n_q8 = 0;
  for (const GgufTensorInfo& ta : a->tensors()) {
    const GgufTensorInfo& tb = b->tensor(ta.name);
    ASSERT_EQ(ta.dims, tb.dims) << ta.name;
    const bool keep = ta.dims.size() < 2 || ta.name.find("ffn_gate_inp") != std::string::npos;
    if (keep) {
      ASSERT_EQ(tb.type, ta.type) << ta.name;
      EXPECT_EQ(0, std::memcmp(a->data(ta), b->data(tb), ta.nbytes)) << ta.name;
      continue;
    }
    const bool expert = ta.name.find("_exps.") != std::string::npos;
    const GgmlType want = expert ? GgmlType::Q4_K : GgmlType::Q8_0;
    if (ta.dims[0] % type_traits(want).block_size != 0) continue;  // fallback rows
    ASSERT_EQ(tb.type, want) << ta.name;
    (expert ? n_expert_q4k : n_q8)++;
    // Decoded values stay within the format's error of the input: relative RMS error.
    const std::vector<double> x = decode(*a, ta), y = decode(*b, tb);
    double num = 0, den = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      num += (x[i] - y[i]) * (x[i] - y[i]);
      den += x[i] * x[i];
    }
    const double rel = std::sqrt(num / den);
    EXPECT_LT(rel, expert ? 0.06 : 0.01) << ta.name;
    EXPECT_GT(rel, 0.0) << ta.name << ": nothing was re-encoded";
  }
  EXPECT_GT(n_expert_q4k, 0);
  EXPECT_GT(n_q8, 0);
  // The rewritten model runs.
  ASSERT_EQ(run_quiet("run -m " + out + " -p ids:1,2,3 -n 4 --temp 0 --stats none", &log), 0)
      << log;
}

TEST(QuantizeCli, BadRequestsFailWithAMessage) {
  TinySpec s;
  const std::string in = temp_path("qz_bad.gguf");
  write_tiny_model(s, in);
  std::string log;
  EXPECT_NE(run_quiet("quantize -m " + in + " -o " + temp_path("x.gguf") + " --type Q9_9", &log),
            0);
  EXPECT_NE(log.find("unknown type 'Q9_9'"), std::string::npos) << log;
  EXPECT_NE(run_quiet("quantize -m " + in + " -o " + in + " --type Q8_0", &log), 0);
  EXPECT_NE(log.find("overwrite the input"), std::string::npos) << log;
  EXPECT_NE(
      run_quiet("quantize -m /nonexistent.gguf -o " + temp_path("y.gguf") + " --type Q8_0", &log),
      0);
  EXPECT_NE(log.find("/nonexistent.gguf"), std::string::npos) << log;
}

}  // namespace
}  // namespace moeflow::test
