// The prompt (prefix) cache is exact: a request served after a prefix hit gives the same logits
// (bit for bit), greedy tokens and log-probabilities as a cold run of the same prompt, on every
// architecture, with prefill chunks that fall differently, and with experts offloaded.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "runtime/engine.h"
#include "runtime/offload_session.h"
#include "runtime/prefix_cache.h"
#include "server/text_generation.h"
#include "support/test_helpers.h"
#include "support/tiny_model.h"
#include "tokenizer/tokenizer.h"

namespace moeflow::test {
namespace {

std::string tiny(const std::string& arch) {
  TinySpec s;
  s.arch = arch;
  const std::string path = temp_path("prefix_" + arch + ".gguf");
  write_tiny_model(s, path);
  return path;
}

std::vector<int32_t> seq(int n, int salt) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(1 + (i * 37 + salt * 11) % 90);
  return v;
}

// Last-row logits of `prompt` after `cache` was primed with `before`.
std::vector<float> logits_after(Engine& eng, PrefixCache& cache, const std::vector<int32_t>& prompt,
                                size_t* reused) {
  *reused = cache.prepare(eng, prompt);
  std::vector<float> out;
  eng.prefill(std::span<const int32_t>(prompt).subspan(*reused), false, &out);
  cache.fed(std::span<const int32_t>(prompt).subspan(*reused));
  return out;
}

std::vector<float> cold_logits(const std::string& path, const EngineOptions& eo,
                               const std::vector<int32_t>& prompt) {
  Engine cold(path, eo);
  std::vector<float> out;
  cold.prefill(prompt, false, &out);
  return out;
}

TEST(PrefixCache, LogitsAfterAHitAreBitIdenticalToAColdRun) {
  for (const char* arch : {"llama", "qwen2moe", "qwen3moe", "olmoe"}) {
    const std::string path = tiny(arch);
    for (int batch : {256, 4}) {  // batch 4: the suffix's chunks start where a cold run's do not
      EngineOptions eo;
      eo.n_threads = batch == 4 ? 2 : 1;  // thread count does not matter either
      eo.n_ctx = 128;
      eo.batch = batch;
      Engine eng(path, eo);
      PrefixCache cache;
      std::vector<int32_t> first = seq(40, 1);
      std::vector<int32_t> second(first.begin(), first.begin() + 29);  // shares 29 tokens
      const std::vector<int32_t> tail = seq(13, 2);
      second.insert(second.end(), tail.begin(), tail.end());
      size_t reused = 0;
      logits_after(eng, cache, first, &reused);
      EXPECT_EQ(reused, 0u);
      const std::vector<float> warm = logits_after(eng, cache, second, &reused);
      EXPECT_EQ(reused, 29u) << arch;
      const std::vector<float> cold = cold_logits(path, eo, second);
      ASSERT_EQ(warm.size(), cold.size());
      EXPECT_EQ(std::memcmp(warm.data(), cold.data(), cold.size() * sizeof(float)), 0)
          << arch << " batch " << batch;
      // The same prompt again: everything but its last token is reused.
      const std::vector<float> again = logits_after(eng, cache, second, &reused);
      EXPECT_EQ(reused, second.size() - 1);
      EXPECT_EQ(std::memcmp(again.data(), cold.data(), cold.size() * sizeof(float)), 0) << arch;
      // A shorter prompt inside the cached one: the cache rewinds.
      const std::vector<int32_t> shorter(second.begin(), second.begin() + 10);
      const std::vector<float> s = logits_after(eng, cache, shorter, &reused);
      EXPECT_EQ(reused, 9u);
      const std::vector<float> s_cold = cold_logits(path, eo, shorter);
      EXPECT_EQ(std::memcmp(s.data(), s_cold.data(), s_cold.size() * sizeof(float)), 0) << arch;
    }
  }
}

TEST(PrefixCache, FallsBackToColdWhenDisabledOrWhenTheEngineWasMovedElsewhere) {
  const std::string path = tiny("llama");
  EngineOptions eo;
  eo.n_threads = 1;
  eo.n_ctx = 64;
  Engine eng(path, eo);
  const std::vector<int32_t> p = seq(20, 3);
  PrefixCache off(false);
  size_t reused = 99;
  logits_after(eng, off, p, &reused);
  EXPECT_EQ(reused, 0u);
  logits_after(eng, off, p, &reused);
  EXPECT_EQ(reused, 0u);
  EXPECT_FALSE(off.enabled());

  PrefixCache on;
  logits_after(eng, on, p, &reused);
  EXPECT_EQ(reused, 0u);
  EXPECT_EQ(on.size(), p.size());
  // Someone fed the engine behind the cache's back: its record no longer describes the KV cache.
  eng.decode(5);
  const std::vector<float> warm = logits_after(eng, on, p, &reused);
  EXPECT_EQ(reused, 0u);
  EXPECT_EQ(std::memcmp(warm.data(), cold_logits(path, eo, p).data(), warm.size() * sizeof(float)),
            0);
  on.clear();
  logits_after(eng, on, p, &reused);
  EXPECT_EQ(reused, 0u);
}

// A multi-turn chat through generate_text: each turn's prompt extends the previous one (and its
// reply); greedy text and logprobs equal cold runs, and the whole previous turn is reused.
class PrefixCacheGeneration : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = new std::string(temp_path("prefix_gen.gguf"));
    const std::string cmd = std::string(MOEFLOW_BINARY) +
                            " gen-model --arch mixtral --preset tiny --type Q4_K --seed 3 -q -o " +
                            *path_ + " > /dev/null 2>&1";
    ASSERT_EQ(0, std::system(cmd.c_str())) << cmd;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove(*path_);
    delete path_;
  }
  static std::string* path_;

  static void check_turns(Engine& warm, Engine& cold, const Tokenizer& tok) {
    TextGenParams p;
    p.max_tokens = 12;
    p.sampling.temperature = 0;
    p.ignore_eos = true;
    p.logprobs = true;
    p.top_logprobs = 3;
    PrefixCache cache;
    std::vector<int32_t> prompt = tok.encode("The first turn of a conversation", true, true);
    size_t previous = 0;
    for (int turn = 0; turn < 4; ++turn) {
      const TextGenResult w = generate_text(warm, tok, prompt, p, nullptr, nullptr, &cache);
      const TextGenResult c = generate_text(cold, tok, prompt, p);
      EXPECT_EQ(w.text, c.text) << "turn " << turn;
      EXPECT_EQ(c.n_cached, 0);
      // At least the previous turn's prompt (the reply re-tokenized may differ from the tokens
      // that were generated).
      EXPECT_GE(w.n_cached, (int)previous) << "turn " << turn;
      previous = prompt.size();
      ASSERT_EQ(w.logprobs.size(), c.logprobs.size());
      for (size_t i = 0; i < w.logprobs.size(); ++i) {
        EXPECT_EQ(w.logprobs[i].id, c.logprobs[i].id);
        EXPECT_EQ(w.logprobs[i].logprob, c.logprobs[i].logprob);  // bit-identical logits
        EXPECT_EQ(w.logprobs[i].top, c.logprobs[i].top);
      }
      // The next turn: this prompt, the reply, and a new user line.
      const std::vector<int32_t> reply = tok.encode(w.text, false, false);
      prompt.insert(prompt.end(), reply.begin(), reply.end());
      const std::vector<int32_t> more =
          tok.encode(" and then turn " + std::to_string(turn + 2), false, true);
      prompt.insert(prompt.end(), more.begin(), more.end());
    }
  }
};
std::string* PrefixCacheGeneration::path_ = nullptr;

TEST_F(PrefixCacheGeneration, ChatTurnsEqualColdRunsResident) {
  EngineOptions eo;
  eo.n_threads = 1;
  eo.n_ctx = 256;
  eo.batch = 7;
  auto file = std::shared_ptr<const GgufFile>(GgufFile::open(*path_));
  Engine warm(file, eo), cold(file, eo);
  check_turns(warm, cold, *Tokenizer::from_gguf(*file));
}

TEST_F(PrefixCacheGeneration, ChatTurnsEqualColdRunsWithExpertsOffloaded) {
  EngineOptions eo;
  eo.n_threads = 1;
  eo.n_ctx = 256;
  eo.batch = 7;
  auto file = std::shared_ptr<const GgufFile>(GgufFile::open(*path_));
  OffloadOptions o;
  o.cache_rate = 0.3;
  o.buffered_io = true;
  OffloadSession session = make_offload(o, *file);
  Engine warm(file, eo, session.provider);
  session.attach(warm.context(), warm.model());
  Engine cold(file, eo);  // all resident: offloading is exact too
  check_turns(warm, cold, *Tokenizer::from_gguf(*file));
  EXPECT_GT(session.provider->stats().total().misses, 0u);
}

}  // namespace
}  // namespace moeflow::test
