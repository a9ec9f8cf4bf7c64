// The engine and the CLI contracts built on it: `moeflow eval` (the oracle interface), greedy
// generation, and error handling of bad input.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/engine.h"
#include "runtime/token_list.h"
#include "sampling/sampler.h"
#include "support/run_binary.h"
#include "support/test_helpers.h"
#include "support/tiny_model.h"

namespace moeflow::test {
namespace {

Cmd run_cmd(const std::string& args) { return run_moeflow(args); }

std::vector<float> read_floats(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(f)), {});
  std::vector<float> v(raw.size() / 4);
  std::memcpy(v.data(), raw.data(), v.size() * 4);
  return v;
}

std::string tiny(const std::string& arch) {
  TinySpec s;
  s.arch = arch;
  const std::string path = temp_path("rt_" + arch + ".gguf");
  write_tiny_model(s, path);
  return path;
}

TEST(EvalCli, BatchedAndSequentialAgreeWithEngine) {
  const std::string m = tiny("qwen2moe");
  const std::string f1 = temp_path("l1.bin"), f2 = temp_path("l2.bin");
  const Cmd a =
      run_cmd("eval -m " + m + " --tokens 5,7,11,13,17 --greedy 4 -t 2 --logits-out " + f1);
  ASSERT_EQ(a.rc, 0) << a.out;
  const Cmd b =
      run_cmd("eval -m " + m + " --tokens 5,7,11,13,17 --greedy 4 --sequential --logits-out " + f2);
  ASSERT_EQ(b.rc, 0) << b.out;
  const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  EXPECT_EQ(ja["rows"], 9);
  EXPECT_EQ(ja["n_vocab"], 96);
  EXPECT_EQ(ja["generated"], jb["generated"]);
  const auto la = read_floats(f1), lb = read_floats(f2);
  ASSERT_EQ(la.size(), 9u * 96);
  ASSERT_EQ(lb.size(), la.size());
  for (size_t r = 0; r < 9; ++r)
    EXPECT_LT(rel_max_diff(la.data() + r * 96, lb.data() + r * 96, 96), 1e-5) << "row " << r;
  // Generated token i is the argmax of row n_tokens - 1 + i, and the engine agrees.
  const auto gen = ja["generated"].get<std::vector<int>>();
  ASSERT_EQ(gen.size(), 4u);
  for (size_t i = 0; i < gen.size(); ++i)
    EXPECT_EQ(gen[i], argmax(std::span<const float>(la.data() + (4 + i) * 96, 96)));
  EngineOptions opt;
  opt.n_threads = 1;
  opt.n_ctx = 16;
  Engine eng(m, opt);
  std::vector<float> l;
  eng.prefill(std::vector<int32_t>{5, 7, 11, 13, 17}, true, &l);
  EXPECT_LT(rel_max_diff(l.data() + 4 * 96, la.data() + 4 * 96, 96), 1e-5);
}

TEST(Engine, GreedyGenerateMatchesArgmaxChain) {
  const std::string m = tiny("olmoe");
  EngineOptions opt;
  opt.n_threads = 2;
  opt.n_ctx = 32;
  Engine eng(m, opt);
  SamplerParams sp;
  sp.temperature = 0;
  Sampler s(sp);
  const std::vector<int32_t> prompt = {9, 8, 7};
  int calls = 0;
  const auto gen = eng.generate(prompt, 6, s, [&](int32_t) { return ++calls < 100; });
  ASSERT_EQ(gen.size(), 6u);
  EXPECT_EQ(calls, 6);
  EXPECT_EQ(eng.stats().n_generated, 6);
  EXPECT_EQ(eng.stats().n_prompt, 3);
  // Independent chain: full re-prefill of the growing sequence each step.
  std::vector<int32_t> seq = prompt;
  for (int i = 0; i < 6; ++i) {
    Engine e2(m, opt);
    std::vector<float> l;
    e2.prefill(seq, false, &l);
    const int32_t t = argmax(l);
    EXPECT_EQ(t, gen[i]) << "step " << i;
    seq.push_back(t);
  }
}

TEST(Engine, SeededSamplingIsReproducible) {
  const std::string m = tiny("llama");
  const Cmd a = run_cmd(
      "run -m " + m + " -p ids:1,2,3 -n 12 --temp 1.0 --top-k 0 --top-p 1 --min-p 0 --seed 7 -t 1");
  const Cmd b = run_cmd(
      "run -m " + m + " -p ids:1,2,3 -n 12 --temp 1.0 --top-k 0 --top-p 1 --min-p 0 --seed 7 -t 2");
  ASSERT_EQ(a.rc, 0) << a.out;
  ASSERT_EQ(b.rc, 0) << b.out;
  auto first_line = [](const std::string& s) { return s.substr(0, s.find('\n')); };
  EXPECT_EQ(first_line(a.out), first_line(b.out));
}

TEST(Cli, BadInputGivesErrorsNotCrashes) {
  const std::string m = tiny("llama");
  Cmd c = run_cmd("eval -m " + m + " --tokens 1,x,3");
  EXPECT_EQ(c.rc, 1);
  EXPECT_NE(c.out.find("--tokens"), std::string::npos) << c.out;
  c = run_cmd("eval -m " + m + " --tokens 1,2,96");
  EXPECT_EQ(c.rc, 1);
  EXPECT_NE(c.out.find("out of range"), std::string::npos) << c.out;
  c = run_cmd("eval -m /nonexistent.gguf --tokens 1");
  EXPECT_EQ(c.rc, 1);
  c = run_cmd("run -m " + m + " -p ids:1,2 -n 10 -c 4");
  EXPECT_EQ(c.rc, 1);
  EXPECT_NE(c.out.find("context"), std::string::npos) << c.out;
  c = run_cmd("run -m " + m + " -p \"some text\" -n 2");
  EXPECT_EQ(c.rc, 1);  // the tiny model has no vocabulary
}

TEST(TokenList, Parses) {
  EXPECT_EQ(parse_token_list("ids:1,2,3", "-p"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parse_token_list(" 4, 5 ", "--tokens"), (std::vector<int32_t>{4, 5}));
  EXPECT_THROW(parse_token_list("", "--tokens"), Error);
  EXPECT_THROW(parse_token_list("1,,2", "--tokens"), Error);
  EXPECT_THROW(parse_token_list("-1", "--tokens"), Error);
}

}  // namespace
}  // namespace moeflow::test
