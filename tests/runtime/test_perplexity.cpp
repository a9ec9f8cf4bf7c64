// `moeflow perplexity` against independent computations: the perplexity equals exp(mean NLL)
// recomputed here in a long-double loop from logits of the engine's eval path (whole chunk
// prefilled from an empty cache, BOS first, second half scored, as llama.cpp does); the KL
// divergence of a run against its own saved logits is exactly 0, and against another model's
// it equals the KL recomputed here; mismatched saved files and bad arguments are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gguf/gguf_file.h"
#include "runtime/engine.h"
#include "runtime/perplexity.h"
#include "support/run_binary.h"
#include "support/test_helpers.h"
#include "support/tiny_model.h"
#include "tokenizer/tokenizer.h"

namespace moeflow::test {
namespace {

// A random-weight Mixtral with gen-model's SentencePiece vocabulary (so text can be read).
std::string gen_model(const std::string& name, int vocab = 320, uint64_t seed = 42) {
  const std::string p = temp_path(name);
  if (std::filesystem::exists(p)) return p;
  const Cmd c =
      run_moeflow("gen-model --arch mixtral --preset tiny --layers 2 --vocab " +
                  std::to_string(vocab) + " --seed " + std::to_string(seed) + " -t 1 -q -o " + p);
  EXPECT_EQ(c.rc, 0) << c.out;
  return p;
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string p = temp_path(name);
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

// ~400 words of English-like text: a few thousand tokens with the synthetic vocabulary.
std::string sample_text(uint32_t seed = 1, int n_words = 400) {
  static const char* words[] = {"the",   "of",   "and",  "to",     "in",    "is",
                                "was",   "for",  "on",   "that",   "with",  "as",
                                "by",    "at",   "from", "river",  "city",  "north",
                                "stone", "year", "1987", "bridge", "music", "(see)"};
  std::mt19937 rng(seed);
  std::string t;
  for (int i = 0; i < n_words; ++i) {
    t += words[rng() % (sizeof words / sizeof *words)];
    t += (i % 17 == 16) ? ".\n" : " ";
  }
  return t;
}

nlohmann::json ppl_json(const std::string& args) {
  const Cmd c = run_moeflow("perplexity --json " + args, /*merge_stderr=*/false);
  EXPECT_EQ(c.rc, 0) << args << "\n" << c.out;
  if (c.rc != 0) return nlohmann::json::object();
  return nlohmann::json::parse(c.out);
}

// Long-double log-softmax of one logits row.
std::vector<long double> log_probs(const float* row, int64_t V) {
  long double mx = row[0];
  for (int64_t i = 1; i < V; ++i) mx = std::max<long double>(mx, row[i]);
  long double s = 0;
  for (int64_t i = 0; i < V; ++i) s += std::exp((long double)row[i] - mx);
  std::vector<long double> lp(V);
  for (int64_t i = 0; i < V; ++i) lp[i] = (long double)row[i] - mx - std::log(s);
  return lp;
}

// The scored rows of every chunk through Engine::prefill (the `moeflow eval` path): one
// vector of n_vocab floats per scored position, and the token each one predicts.
struct Scored {
  std::vector<std::vector<float>> rows;
  std::vector<int32_t> targets;
};

Scored reference_rows(const std::string& model, const std::string& text, int64_t ctx,
                      int max_chunks = -1) {
  auto file = std::shared_ptr<const GgufFile>(GgufFile::open(model));
  auto tok = Tokenizer::from_gguf(*file);
  const std::vector<int32_t> toks = tok->encode(text, true, false);
  EngineOptions opt;
  opt.n_threads = 1;
  opt.n_ctx = ctx;
  Engine eng(file, opt);
  const int64_t V = eng.n_vocab();
  int64_t n_chunks = (int64_t)toks.size() / ctx;
  if (max_chunks > 0) n_chunks = std::min<int64_t>(n_chunks, max_chunks);
  Scored s;
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> chunk(toks.begin() + c * ctx, toks.begin() + (c + 1) * ctx);
    chunk[0] = tok->bos_id();
    eng.reset();
    std::vector<float> logits;
    eng.prefill(chunk, true, &logits);
    for (int64_t p = ctx / 2; p + 1 < ctx; ++p) {
      s.rows.emplace_back(logits.begin() + p * V, logits.begin() + (p + 1) * V);
      s.targets.push_back(chunk[p + 1]);
    }
  }
  return s;
}

double reference_ppl(const Scored& s) {
  long double nll = 0;
  for (size_t i = 0; i < s.rows.size(); ++i) {
    const auto lp = log_probs(s.rows[i].data(), (int64_t)s.rows[i].size());
    nll -= lp[s.targets[i]];
  }
  return (double)std::exp(nll / s.rows.size());
}

TEST(Perplexity, EqualsExpMeanNllOfTheEvalPathLogits) {
  const std::string m = gen_model("ppl_a.gguf");
  const std::string text = sample_text();
  const std::string tf = write_file("ppl_text.txt", text);
  auto tok = Tokenizer::from_gguf(*GgufFile::open(m));
  ASSERT_TRUE(tok->add_bos_token());
  const size_t n_tok = tok->encode(text, true, false).size();
  for (int64_t ctx : {32, 33, 7}) {
    const auto j = ppl_json("-m " + m + " -f " + tf + " -c " + std::to_string(ctx) + " -t 2");
    ASSERT_TRUE(j.contains("perplexity"));
    const Scored ref = reference_rows(m, text, ctx);
    const int64_t n_chunks = (int64_t)n_tok / ctx;
    EXPECT_EQ(j["n_tokens"].get<size_t>(), n_tok);
    EXPECT_EQ(j["n_chunks"].get<int64_t>(), n_chunks);
    EXPECT_EQ(j["ctx"].get<int64_t>(), ctx);
    EXPECT_EQ(j["n_tokens_scored"].get<int64_t>(), n_chunks * (ctx - ctx / 2 - 1));
    ASSERT_EQ(ref.rows.size(), j["n_tokens_scored"].get<size_t>());
    const double want = reference_ppl(ref);
    const double got = j["perplexity"].get<double>();
    EXPECT_NEAR(got / want, 1.0, 1e-9) << "ctx " << ctx << ": " << got << " vs " << want;
    EXPECT_EQ(j["chunk_ppl"].size(), (size_t)n_chunks);
    EXPECT_DOUBLE_EQ(j["chunk_ppl"].back().get<double>(), got);
    // A random model is near-uniform over the vocabulary: the number is in a sane range.
    EXPECT_GT(got, 1.0);
  }
  // --chunks limits the chunks; a small -b splits each chunk over several forward passes.
  const auto j = ppl_json("-m " + m + " -f " + tf + " -c 32 --chunks 5 -b 5 -t 1");
  EXPECT_EQ(j["n_chunks"], 5);
  EXPECT_EQ(j["n_tokens_scored"], 5 * 15);
  EXPECT_NEAR(j["perplexity"].get<double>() / reference_ppl(reference_rows(m, text, 32, 5)), 1.0,
              1e-5);
}

// A gated DeltaNet hybrid keeps a recurrent state that no rewind can undo: every chunk must start
// from a zero state, as a fresh engine does (the reference: one new engine per chunk).
TEST(Perplexity, HybridRecurrentModelStartsEveryChunkFromAFreshState) {
  const std::string m = temp_path("ppl_hybrid.gguf");
  const Cmd g = run_moeflow(
      "gen-model --arch qwen35moe --preset tiny --vocab 320 --seed 42 -t 1 "
      "-q -o " +
      m);
  ASSERT_EQ(g.rc, 0) << g.out;
  const std::string text = sample_text();
  const std::string tf = write_file("ppl_hybrid_text.txt", text);
  const int64_t ctx = 32;
  const auto j = ppl_json("-m " + m + " -f " + tf + " -c 32 --chunks 3 -b 5 -t 2");
  ASSERT_EQ(j["n_chunks"], 3);
  auto file = std::shared_ptr<const GgufFile>(GgufFile::open(m));
  auto tok = Tokenizer::from_gguf(*file);
  const std::vector<int32_t> toks = tok->encode(text, true, false);
  Scored ref;
  for (int64_t c = 0; c < 3; ++c) {
    std::vector<int32_t> chunk(toks.begin() + c * ctx, toks.begin() + (c + 1) * ctx);
    chunk[0] = tok->bos_id();
    EngineOptions opt;
    opt.n_threads = 1;
    opt.n_ctx = ctx;
    Engine fresh(file, opt);
    std::vector<float> logits;
    fresh.prefill(chunk, true, &logits);
    const int64_t V = fresh.n_vocab();
    for (int64_t p = ctx / 2; p + 1 < ctx; ++p) {
      ref.rows.emplace_back(logits.begin() + p * V, logits.begin() + (p + 1) * V);
      ref.targets.push_back(chunk[p + 1]);
    }
  }
  EXPECT_NEAR(j["perplexity"].get<double>() / reference_ppl(ref), 1.0, 1e-9);
}

TEST(Perplexity, TextReportEndsWithLlamaCppFinalEstimate) {
  const std::string m = gen_model("ppl_a.gguf");
  const std::string tf = write_file("ppl_text.txt", sample_text());
  const Cmd c = run_moeflow("perplexity -m " + m + " -f " + tf + " -c 32 --chunks 3", false);
  ASSERT_EQ(c.rc, 0) << c.out;
  EXPECT_EQ(c.out.rfind("[1]", 0), 0u) << c.out;
  EXPECT_NE(c.out.find(",[3]"), std::string::npos) << c.out;
  const double ppl = ppl_json("-m " + m + " -f " + tf + " -c 32 --chunks 3")["perplexity"];
  EXPECT_NE(c.out.find(fmt::format("Final estimate: PPL = {:.4f} +/- ", ppl)), std::string::npos)
      << c.out;
}

TEST(Perplexity, KlAgainstOwnSavedLogitsIsExactlyZero) {
  const std::string m = gen_model("ppl_a.gguf");
  const std::string tf = write_file("ppl_text.txt", sample_text());
  const std::string saved = temp_path("ppl_exact.logits");
  const auto base = ppl_json("-m " + m + " -f " + tf + " -c 32 -t 2 --save-logits " + saved);
  const int64_t V = 320;
  EXPECT_GT(std::filesystem::file_size(saved),
            base["n_tokens_scored"].get<uint64_t>() * V * sizeof(float));
  // Same run with another thread count, and with expert offloading (an exact mode): the
  // logits are bit-identical, so every KL term is exactly 0.
  for (const std::string extra : {"-t 1", "-t 2 --cache-rate 0.3 --buffered-io --io-threads 1"}) {
    const auto j =
        ppl_json("-m " + m + " -f " + tf + " -c 32 " + extra + " --kl-divergence " + saved);
    EXPECT_EQ(j["kl_divergence"].get<double>(), 0.0) << extra;
    EXPECT_EQ(j["kl_divergence_max"].get<double>(), 0.0) << extra;
    EXPECT_EQ(j["top1_agreement"].get<double>(), 1.0) << extra;
    EXPECT_EQ(j["ppl_delta"].get<double>(), 0.0) << extra;
    EXPECT_DOUBLE_EQ(j["ppl_exact"].get<double>(), base["perplexity"].get<double>()) << extra;
    EXPECT_DOUBLE_EQ(j["perplexity"].get<double>(), base["perplexity"].get<double>()) << extra;
    if (extra.find("cache-rate") != std::string::npos) {
      ASSERT_TRUE(j.contains("offload")) << j.dump();
      EXPECT_EQ(j["offload"]["enabled"], true);
    }
  }
}

TEST(Perplexity, KlAgainstAnotherModelMatchesIndependentKl) {
  const std::string m = gen_model("ppl_a.gguf");
  const std::string q = temp_path("ppl_a_q4.gguf");
  ASSERT_EQ(run_moeflow("quantize -q -m " + m + " -o " + q + " --type Q4_0").rc, 0);
  const std::string text = sample_text();
  const std::string tf = write_file("ppl_text.txt", text);
  const std::string saved = temp_path("ppl_exact_f32.logits");
  ppl_json("-m " + m + " -f " + tf + " -c 32 --chunks 12 --save-logits " + saved);
  const auto j = ppl_json("-m " + q + " -f " + tf + " -c 32 --chunks 12 --kl-divergence " + saved);
  const Scored exact = reference_rows(m, text, 32, 12), lossy = reference_rows(q, text, 32, 12);
  ASSERT_EQ(exact.rows.size(), lossy.rows.size());
  long double kl = 0;
  size_t same = 0;
  for (size_t i = 0; i < exact.rows.size(); ++i) {
    const int64_t V = (int64_t)exact.rows[i].size();
    const auto p = log_probs(exact.rows[i].data(), V), r = log_probs(lossy.rows[i].data(), V);
    for (size_t k = 0; k < p.size(); ++k) kl += std::exp(p[k]) * (p[k] - r[k]);
    same += std::max_element(exact.rows[i].begin(), exact.rows[i].end()) - exact.rows[i].begin() ==
            std::max_element(lossy.rows[i].begin(), lossy.rows[i].end()) - lossy.rows[i].begin();
  }
  const double want = (double)(kl / exact.rows.size());
  ASSERT_GT(want, 1e-6);  // Q4_0 is lossy: the test must be able to see a difference
  EXPECT_NEAR(j["kl_divergence"].get<double>() / want, 1.0, 1e-4);
  EXPECT_DOUBLE_EQ(j["top1_agreement"].get<double>(), (double)same / exact.rows.size());
  EXPECT_NEAR(j["ppl_exact"].get<double>() / reference_ppl(exact), 1.0, 1e-6);
  EXPECT_NEAR(j["perplexity"].get<double>() / reference_ppl(lossy), 1.0, 1e-6);
  EXPECT_NEAR(j["ppl_delta"].get<double>(), reference_ppl(lossy) - reference_ppl(exact), 1e-4);
}

// The error text of a command expected to fail cleanly (exit 1, not a crash).
std::string error_of(const std::string& args) {
  const Cmd c = run_moeflow(args);
  EXPECT_EQ(c.rc, 1) << args << "\n" << c.out;
  EXPECT_NE(c.out.find("moeflow: error:"), std::string::npos) << c.out;
  return c.out;
}

TEST(Perplexity, MismatchedSavedLogitsAreRefused) {
  const std::string m = gen_model("ppl_a.gguf");
  const std::string tf = write_file("ppl_text.txt", sample_text());
  const std::string saved = temp_path("ppl_mm.logits");
  ppl_json("-m " + m + " -f " + tf + " -c 32 --chunks 6 --save-logits " + saved);
  const std::string run = "perplexity -m " + m + " -f " + tf + " --kl-divergence " + saved;
  EXPECT_NE(error_of(run + " -c 16 --chunks 6").find("use the same -f, -c and --chunks"),
            std::string::npos);
  EXPECT_NE(error_of(run + " -c 32 --chunks 5").find("6 chunks of 32"), std::string::npos);
  const std::string other = write_file("ppl_other.txt", sample_text(2));
  EXPECT_NE(
      error_of("perplexity -m " + m + " -f " + other + " -c 32 --chunks 6 --kl-divergence " + saved)
          .find("another text"),
      std::string::npos);
  const std::string m2 = gen_model("ppl_v384.gguf", 384);
  EXPECT_NE(
      error_of("perplexity -m " + m2 + " -f " + tf + " -c 32 --chunks 6 --kl-divergence " + saved)
          .find("vocabulary has 384"),
      std::string::npos);
  // Truncated, and not a logits file at all.
  const std::string cut = temp_path("ppl_cut.logits");
  std::filesystem::copy_file(saved, cut, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(cut, std::filesystem::file_size(saved) - 4);
  EXPECT_NE(error_of(run.substr(0, run.find("--kl")) + "-c 32 --chunks 6 --kl-divergence " + cut)
                .find("truncated"),
            std::string::npos);
  EXPECT_NE(error_of(run.substr(0, run.find("--kl")) + "-c 32 --kl-divergence " + tf)
                .find("not a moeflow logits file"),
            std::string::npos);
  EXPECT_NE(error_of(run.substr(0, run.find("--kl")) + "-c 32 --kl-divergence " +
                     temp_path("none.logits"))
                .find("cannot read"),
            std::string::npos);
}

TEST(Perplexity, BadArgumentsAreClearErrors) {
  const std::string m = gen_model("ppl_a.gguf");
  const std::string tf = write_file("ppl_text.txt", sample_text());
  const std::string base = "perplexity -m " + m;
  EXPECT_NE(error_of(base + " -f " + temp_path("missing.txt")).find("-f"), std::string::npos);
  EXPECT_NE(error_of(base + " -f " + tf + " -c 2").find("at least 3"), std::string::npos);
  EXPECT_NE(error_of(base + " -f " + write_file("empty.txt", "")).find("contains no text"),
            std::string::npos);
  EXPECT_NE(error_of(base + " -f " + write_file("blank.txt", " \n\n ")).find("contains no text"),
            std::string::npos);
  EXPECT_NE(error_of(base + " -f " + write_file("short.txt", "the river")).find("at least"),
            std::string::npos);
  EXPECT_NE(error_of(base + " -f " + tf + " --chunks 0").find("--chunks"), std::string::npos);
  EXPECT_NE(error_of(base + " -f " + tf + " -c 32 --save-logits /nonexistent-dir/x.logits")
                .find("--save-logits"),
            std::string::npos);
  // A model without a vocabulary cannot read text.
  TinySpec s;
  const std::string novocab = temp_path("ppl_novocab.gguf");
  write_tiny_model(s, novocab);
  EXPECT_NE(error_of("perplexity -m " + novocab + " -f " + tf).find("tokenizer"),
            std::string::npos);
}

}  // namespace
}  // namespace moeflow::test
