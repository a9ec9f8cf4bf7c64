// The lossy expert modes (docs/lossy-modes.md): `moeflow pack --low` copies, HOBBIT's
// mixed-precision rule and the skip mode, checked end to end against references that do not
// use the mode code: a provider that reads the routing from the forward observer, applies its
// own reading of the rule and serves the tensors straight from the file (or zeros for a
// dropped expert) to an exact-mode run.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "low_copy_models.h"
#include "model/moe/precision_mode.h"
#include "quant/quant.h"
#include "runtime/engine.h"
#include "runtime/offload_session.h"

// A namespace of its own: the unity builds (MOEFLOW_UNITY) compile this file in one unit with
// others of its folder that define helpers of the same names.
namespace moeflow::lossy_modes_test {
namespace {

std::string tmp_path(const std::string& name) { return test::temp_gguf("lossy", name); }

int sh(const std::string& cmd) { return test::sh_quiet(cmd); }

const std::vector<int32_t> kPrompt = {1, 17, 42, 99, 3, 250, 7, 8, 300, 11, 12};
constexpr int kDecode = 12;

using RunResult = test::GreedyRun;

// Either `off` (the options under test) or `provider` + `observer` (a reference) is given.
RunResult run_engine(std::shared_ptr<const GgufFile> file, int batch, const OffloadOptions* off,
                     std::shared_ptr<ExpertProvider> provider = nullptr,
                     ForwardObserver* observer = nullptr) {
  return test::run_greedy(file, kPrompt, kDecode, batch, off, provider, observer);
}

bool bit_identical(const RunResult& a, const RunResult& b) {
  return a.logits.size() == b.logits.size() &&
         std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)) == 0;
}

double max_abs_diff(const RunResult& a, const RunResult& b) {
  double m = 0;
  for (size_t i = 0; i < a.logits.size(); ++i)
    m = std::max(m, std::fabs((double)a.logits[i] - b.logits[i]));
  return m;
}

// What the reference rule serves for one routed expert.
enum class Serve { High, Low, Zero };

// An exact-mode provider + observer that applies the test's own reading of a mode: it records
// the step's routing (one token per step: batch 1) and, asked for an expert in high precision,
// serves the high tensor, the low tensor, or an all-zero expert as `rule` says for its rank.
// Views are built from the tensors by name, independently of the expert index and providers.
class RuleReference final : public ExpertProvider, public ForwardObserver {
 public:
  using Rule = std::function<Serve(const std::vector<float>& weights, int rank)>;
  RuleReference(const GgufFile& f, Rule rule) : f_(f), rule_(std::move(rule)) {}

  using ExpertProvider::on_route;  // the provider's overload stays visible (clang
                                   // -Woverloaded-virtual)
  void on_route(const RouteRecord& r) override {
    ASSERT_EQ(r.n_tokens, 1) << "the reference needs one token per step";
    layer_ = r.layer;
    experts_.assign(r.experts.begin(), r.experts.end());
    weights_.assign(r.weights.begin(), r.weights.end());
  }
  ExpertView acquire(int layer, int expert, Precision p) override {
    EXPECT_EQ(p, Precision::High) << "the reference runs in exact mode";
    EXPECT_EQ(layer, layer_);
    const int rank =
        static_cast<int>(std::find(experts_.begin(), experts_.end(), expert) - experts_.begin());
    EXPECT_LT(rank, (int)experts_.size());
    const Serve s = rule_(weights_, rank);
    counts_[(int)s]++;
    return s == Serve::Zero ? zero_view(layer, expert)
                            : view(layer, expert, s == Serve::Low ? "low" : "weight");
  }
  uint64_t count(Serve s) const { return counts_[(int)s]; }

 private:
  ExpertView view(int layer, int expert, const char* suffix) const {
    static const char* proj[3] = {"gate", "up", "down"};
    ExpertView v;
    for (int p = 0; p < 3; ++p) {
      const GgufTensorInfo& t =
          f_.tensor(fmt::format("blk.{}.ffn_{}_exps.{}", layer, proj[p], suffix));
      const uint64_t slice = t.nbytes / static_cast<uint64_t>(t.dims[2]);
      v.proj[p] = matrix_view(f_.data(t) + slice * static_cast<uint64_t>(expert), t.type, t.dims[0],
                              t.dims[1]);
    }
    return v;
  }
  ExpertView zero_view(int layer, int expert) {
    ExpertView v = view(layer, expert, "weight");
    size_t n = 0;
    for (int p = 0; p < 3; ++p)
      n = std::max<size_t>(n, (size_t)(v.proj[p].rows() * v.proj[p].cols()));
    zeros_.assign(n, 0.0f);
    for (int p = 0; p < 3; ++p)
      v.proj[p] = matrix_view(zeros_.data(), GgmlType::F32, v.proj[p].cols(), v.proj[p].rows());
    return v;
  }
  const GgufFile& f_;
  Rule rule_;
  int layer_ = -1;
  std::vector<int> experts_;
  std::vector<float> weights_;
  std::vector<float> zeros_;
  uint64_t counts_[3] = {0, 0, 0};
};

class LossyModes : public test::LowCopySuite<11> {};

uint64_t total(const std::vector<PrecisionUsage::Counts>& u, uint64_t PrecisionUsage::Counts::*f) {
  uint64_t s = 0;
  for (const auto& c : u) s += c.*f;
  return s;
}

// Tokens routed per MoE layer over a run, times the layers: 4 MoE layers, top-2.
constexpr uint64_t kRoutings = (11 + kDecode) * 4;

TEST(PrecisionRule, HobbitAndSkipDecisions) {
  PrecisionModeConfig c;
  c.mode = ExpertMode::Hobbit;
  ExpertUse u[4];
  // Normalised weights .5 .3 .15 .05: weight ranked above = 0, .5, .8, .95.
  const float w[4] = {0.25f, 0.15f, 0.075f, 0.025f};  // not normalised: the rule normalises
  decide_uses(c, w, 4, u);
  EXPECT_EQ(u[0], ExpertUse::High);
  EXPECT_EQ(u[1], ExpertUse::High);
  EXPECT_EQ(u[2], ExpertUse::Low);
  EXPECT_EQ(u[3], ExpertUse::Skip);
  c.t1 = 0.0;
  c.t2 = 1.0;
  decide_uses(c, w, 4, u);
  EXPECT_EQ(u[0], ExpertUse::High);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(u[r], ExpertUse::Low) << r;
  c.mode = ExpertMode::Skip;
  c.skip_threshold = 0.1;
  decide_uses(c, w, 4, u);
  EXPECT_EQ(u[2], ExpertUse::High);
  EXPECT_EQ(u[3], ExpertUse::Skip);
  c.skip_threshold = 1.0;  // the top-1 expert stays whatever the threshold
  decide_uses(c, w, 4, u);
  EXPECT_EQ(u[0], ExpertUse::High);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(u[r], ExpertUse::Skip) << r;
}

TEST(PackLow, CopiesDequantizeWithinTheTypeErrorOfTheExperts) {
  const std::string in = tmp_path("rt_in");
  ASSERT_EQ(0, sh(std::string(MOEFLOW_BINARY) +
                  " gen-model --arch mixtral --preset small --type Q8_0 --seed 5 -q -o " + in));
  // Max relative RMS error of each type on Gaussian/uniform data (tests/quant), +15%.
  const struct {
    const char* name;
    GgmlType type;
    double bound;
  } cases[] = {
      {"Q3_K", GgmlType::Q3_K, 0.158 * 1.15},
      {"Q2_K", GgmlType::Q2_K, 0.294 * 1.15},
      {"Q4_0", GgmlType::Q4_0, 0.095 * 1.15},
  };
  std::vector<double> worst;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string out = tmp_path(std::string("rt_") + c.name);
    ASSERT_EQ(
        0, sh(std::string(MOEFLOW_BINARY) + " pack -m " + in + " -o " + out + " --low " + c.name));
    auto f = GgufFile::open(out);
    EXPECT_EQ(f->get_string("moeflow.low.type"), c.name);
    auto store = ExpertStore::open(*f, StoreOptions{false});
    ASSERT_TRUE(store->has_low());
    int n_low = 0;
    double worst_err = 0;
    for (const auto& t : f->tensors()) {
      if (t.name.size() < 7 || t.name.compare(t.name.size() - 7, 7, ".weight") != 0 ||
          t.name.find("_exps.") == std::string::npos)
        continue;
      const GgufTensorInfo& lo = f->tensor(t.name.substr(0, t.name.size() - 6) + "low");
      ++n_low;
      EXPECT_EQ(lo.dims, t.dims) << lo.name;
      EXPECT_EQ(lo.type, c.type) << lo.name << " (the small preset's rows fit every block)";
      EXPECT_EQ(lo.file_offset % 4096, 0u) << lo.name;
      const int64_t cols = t.dims[0], rows = t.rows();
      std::vector<float> hi_row(cols), lo_row(cols);
      std::vector<uint8_t> requant(row_bytes(lo.type, cols));
      double err = 0, ref = 0;
      // Every 5th row: all experts and both block boundaries are still covered, and the check
      // stays affordable under the sanitizers (Q2_K/Q3_K quantization is slow in Debug).
      for (int64_t r = 0; r < rows; r += 5) {
        dequantize_row(t.type, f->data(t) + r * row_bytes(t.type, cols), hi_row.data(), cols);
        const uint8_t* lo_bytes = f->data(lo) + r * row_bytes(lo.type, cols);
        dequantize_row(lo.type, lo_bytes, lo_row.data(), cols);
        for (int64_t i = 0; i < cols; ++i) {
          const double d = (double)lo_row[i] - (double)hi_row[i];
          err += d * d;
          ref += (double)hi_row[i] * hi_row[i];
        }
        // The copy is this row's own encoding (no row or expert mixed up).
        quantize_row(lo.type, hi_row.data(), requant.data(), cols);
        ASSERT_EQ(0, std::memcmp(requant.data(), lo_bytes, requant.size()))
            << lo.name << " row " << r;
      }
      const double rel = std::sqrt(err / ref);
      EXPECT_GT(rel, 0.0) << lo.name;
      EXPECT_LT(rel, c.bound) << lo.name;
      worst_err = std::max(worst_err, rel);
    }
    EXPECT_EQ(n_low, 4 * 3);
    worst.push_back(worst_err);
    // The store's low-precision byte ranges are the copies' expert slices.
    for (int l = 0; l < store->n_layers(); ++l)
      for (int e = 0; e < store->n_experts(l); e += 3)
        for (int p = 0; p < kNumExpertProj; ++p) {
          static const char* proj[3] = {"gate", "up", "down"};
          const GgufTensorInfo& lo = f->tensor(fmt::format("blk.{}.ffn_{}_exps.low", l, proj[p]));
          const ChunkLoc& c2 = store->chunk(l, e, p, Precision::Low);
          const uint64_t slice = lo.nbytes / 8;
          ASSERT_EQ(c2.nbytes, slice);
          std::vector<uint8_t> buf(c2.aligned_len + 4096);
          uint8_t* dst = reinterpret_cast<uint8_t*>(
              (reinterpret_cast<uintptr_t>(buf.data()) + 4095) / 4096 * 4096);
          store->read(l, e, p, dst, Precision::Low);
          EXPECT_EQ(0, std::memcmp(dst + c2.inner_offset, f->data(lo) + slice * e, slice));
        }
    std::filesystem::remove(out);
  }
  // Fewer bits, larger error.
  EXPECT_LT(worst[2], worst[0]);
  EXPECT_LT(worst[0], worst[1]);
  std::filesystem::remove(in);
}

TEST_F(LossyModes, PackedFileRunsExactlyAsTheOriginal) {
  std::shared_ptr<const GgufFile> plain(GgufFile::open(*plain_));
  const RunResult a = run_engine(plain, 5, nullptr);
  const RunResult b = run_engine(packed(), 5, nullptr);
  EXPECT_TRUE(bit_identical(a, b));
}

TEST_F(LossyModes, HobbitWithEverythingHighIsBitIdenticalToExact) {
  auto f = packed();
  OffloadOptions exact;
  const RunResult ref = run_engine(f, 5, &exact);
  for (const char* mode : {"hobbit", "hobbit-all"}) {
    for (double rate : {0.0, 0.3}) {
      SCOPED_TRACE(std::string(mode) + " " + std::to_string(rate));
      OffloadOptions o;
      o.mode = parse_expert_mode(mode);
      o.hobbit_t1 = 1.0;
      o.hobbit_t2 = 1.0;
      o.cache_rate = rate;
      const RunResult got = run_engine(f, 5, &o);
      EXPECT_TRUE(bit_identical(got, ref));
      EXPECT_EQ(total(got.uses, &PrecisionUsage::Counts::high), 2 * kRoutings);
      EXPECT_EQ(total(got.uses, &PrecisionUsage::Counts::low), 0u);
      if (rate > 0) {
        EXPECT_EQ(got.stats.total().bytes_read_low, 0u);
      }
    }
  }
}

TEST_F(LossyModes, HobbitLowForEveryNonTop1MatchesTheLowCopies) {
  auto f = packed();
  // T1 = 0, T2 = 1: the top-1 expert in high precision, every other from its low copy.
  auto ref_prov = std::make_shared<RuleReference>(
      *f, [](const std::vector<float>&, int rank) { return rank == 0 ? Serve::High : Serve::Low; });
  const RunResult ref = run_engine(f, 1, nullptr, ref_prov, ref_prov.get());
  EXPECT_EQ(ref_prov->count(Serve::Low), kRoutings);
  OffloadOptions exact;
  const RunResult exact_run = run_engine(f, 1, &exact);
  EXPECT_FALSE(bit_identical(ref, exact_run)) << "the low copies should change the logits";
  for (double rate : {0.0, 0.3}) {
    SCOPED_TRACE(rate);
    OffloadOptions o;
    o.mode = ExpertMode::HobbitAll;
    o.hobbit_t1 = 0.0;
    o.hobbit_t2 = 1.0;
    o.cache_rate = rate;
    const RunResult got = run_engine(f, 1, &o);
    EXPECT_TRUE(bit_identical(got, ref)) << "max |diff| " << max_abs_diff(got, ref);
    EXPECT_EQ(total(got.uses, &PrecisionUsage::Counts::high), kRoutings);
    EXPECT_EQ(total(got.uses, &PrecisionUsage::Counts::low), kRoutings);
    EXPECT_EQ(total(got.uses, &PrecisionUsage::Counts::skip), 0u);
    if (rate > 0) {
      EXPECT_GT(got.stats.total().bytes_read_low, 0u);
      EXPECT_GT(got.stats.total().acquires_low, 0u);
      EXPECT_LT(got.stats.total().bytes_read_low, got.stats.total().bytes_read);
    }
    // Prefill in chunks of 5: one expert may run in both precisions in one step. Chunked and
    // token-by-token attention round differently, so this is compared within a tolerance far
    // below what the low copies change.
    const RunResult chunked = run_engine(f, 5, &o);
    EXPECT_LT(max_abs_diff(chunked, ref), 0.05 * max_abs_diff(exact_run, ref));
  }
}

TEST_F(LossyModes, HobbitDefaultThresholdsFollowTheRule) {
  auto f = packed();
  const double t1 = 0.6, t2 = 0.9;
  auto rule = [&](const std::vector<float>& w, int rank) {
    double sum = 0, above = 0;
    for (float x : w) sum += x;
    for (int j = 0; j < rank; ++j) above += w[j] / sum;
    return above <= t1 ? Serve::High : above <= t2 ? Serve::Low : Serve::Zero;
  };
  auto ref_prov = std::make_shared<RuleReference>(*f, rule);
  const RunResult ref = run_engine(f, 1, nullptr, ref_prov, ref_prov.get());
  OffloadOptions o;
  o.mode = ExpertMode::HobbitAll;
  ASSERT_GT(ref_prov->count(Serve::Low), 0u) << "the model never reaches the low band";
  const RunResult got = run_engine(f, 1, &o);
  EXPECT_TRUE(bit_identical(got, ref)) << "max |diff| " << max_abs_diff(got, ref);
  EXPECT_EQ(total(got.uses, &PrecisionUsage::Counts::high), ref_prov->count(Serve::High));
  EXPECT_EQ(total(got.uses, &PrecisionUsage::Counts::low), ref_prov->count(Serve::Low));
  EXPECT_EQ(total(got.uses, &PrecisionUsage::Counts::skip), ref_prov->count(Serve::Zero));
  // HOBBIT proper changes only cache misses: with every expert resident it is exact.
  o.mode = ExpertMode::Hobbit;
  OffloadOptions exact;
  EXPECT_TRUE(bit_identical(run_engine(f, 1, &o), run_engine(f, 1, &exact)));
}

TEST_F(LossyModes, SkipThresholdZeroIsExactAndHighThresholdDropsExperts) {
  auto f = packed();
  OffloadOptions exact;
  const RunResult ref = run_engine(f, 5, &exact);
  OffloadOptions o;
  o.mode = ExpertMode::Skip;
  o.skip_threshold = 0.0;
  EXPECT_TRUE(bit_identical(run_engine(f, 5, &o), ref));

  const double thr = 0.3;
  auto rule = [&](const std::vector<float>& w, int rank) {
    double sum = 0;
    for (float x : w) sum += x;
    return rank > 0 && w[rank] / sum < thr ? Serve::Zero : Serve::High;
  };
  auto ref_prov = std::make_shared<RuleReference>(*f, rule);
  const RunResult dropped = run_engine(f, 1, nullptr, ref_prov, ref_prov.get());
  ASSERT_GT(ref_prov->count(Serve::Zero), 0u) << "threshold too low to drop anything";
  ASSERT_GT(ref_prov->count(Serve::High), kRoutings) << "threshold drops every second expert";
  OffloadOptions exact1;
  EXPECT_FALSE(bit_identical(dropped, run_engine(f, 1, &exact1)));
  o.skip_threshold = thr;
  for (double rate : {0.0, 0.3}) {
    SCOPED_TRACE(rate);
    o.cache_rate = rate;
    const RunResult got = run_engine(f, 1, &o);
    EXPECT_TRUE(bit_identical(got, dropped)) << "max |diff| " << max_abs_diff(got, dropped);
    EXPECT_EQ(total(got.uses, &PrecisionUsage::Counts::skip), ref_prov->count(Serve::Zero));
  }
}

TEST_F(LossyModes, PrecisionAwarePrefetchLoadsLowCopies) {
  auto f = packed();
  OffloadOptions o;
  o.mode = ExpertMode::HobbitAll;
  o.hobbit_t1 = 0.0;
  o.hobbit_t2 = 1.0;
  o.cache_rate = 0.5;
  o.low_cache_rate = 0.5;
  o.prefetch = "lookahead";
  o.prefetch_always = true;  // the low copies' prefetch is what is tested, not the timing rule
  const RunResult got = run_engine(f, 1, &o);
  const LayerOffloadStats t = got.stats.total();
  EXPECT_TRUE(got.stats.has_low);
  EXPECT_GT(got.stats.low_n_slots, 0);
  EXPECT_GT(t.prefetch_issued, 0u);
  // The low tier is read (by misses and prefetches) and serves hits.
  EXPECT_GT(t.bytes_read_low, 0u);
  EXPECT_GT(t.hits_low, 0u);
  nlohmann::json j = offload_stats_json(OffloadSession{});
  EXPECT_EQ(j["mode"], "exact");
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_F(LossyModes, BadOptionsGiveClearErrors) {
  std::shared_ptr<const GgufFile> plain(GgufFile::open(*plain_));
  auto f = packed();
  auto expect_error = [&](const GgufFile& file, const OffloadOptions& o, const std::string& what) {
    const std::string e = error_of([&] { make_offload(o, file); });
    EXPECT_NE(e.find(what), std::string::npos) << "got: '" << e << "', expected '" << what << "'";
  };
  OffloadOptions o;
  o.mode = ExpertMode::Hobbit;
  expect_error(*plain, o, "moeflow pack");  // no low copies
  o.cache_rate = 0.3;
  expect_error(*plain, o, "moeflow pack");
  EXPECT_NE(error_of([] { parse_expert_mode("fast"); }).find("unknown mode"), std::string::npos);
  o = {};
  o.mode = ExpertMode::Hobbit;
  o.hobbit_t1 = 0.9;
  o.hobbit_t2 = 0.5;
  expect_error(*f, o, "--hobbit-t1");
  o.hobbit_t1 = -0.1;
  expect_error(*f, o, "--hobbit-t1");
  o = {};
  o.hobbit_t1 = 0.5;  // a threshold of another mode
  expect_error(*f, o, "--mode hobbit");
  o = {};
  o.mode = ExpertMode::Skip;
  o.skip_threshold = 1.5;
  expect_error(*f, o, "--skip-threshold");
  o = {};
  o.precalc = true;  // nothing to fill without offloading
  expect_error(*f, o, "--precalc");
  o = {};
  o.mode = ExpertMode::Hobbit;
  o.cache_rate = 0.3;
  o.low_cache = uint64_t{1} << 40;  // more than the whole budget
  expect_error(*f, o, "--low-cache");
  o.low_cache.reset();
  o.low_cache_rate = 2;
  expect_error(*f, o, "--low-cache-rate");
  o.low_cache_rate = 0;
  o.low_share = 1.0;
  expect_error(*f, o, "--low-share");
  o.low_cache = uint64_t{1} << 20;
  expect_error(*f, o, "exclusive");
  o = {};
  o.mode = ExpertMode::Hobbit;
  o.low_cache = uint64_t{1} << 20;  // no offloading to size
  expect_error(*f, o, "--expert-cache");
  o = {};
  o.low_cache = uint64_t{1} << 20;  // exact mode has no low tier
  o.cache_rate = 0.3;
  expect_error(*f, o, "--mode hobbit");

  // The CLI: an unknown low type, a mode on the command line.
  const std::string bin = MOEFLOW_BINARY;
  const std::string out = tmp_path("bad");
  EXPECT_NE(0, sh(bin + " pack -m " + *plain_ + " -o " + out + " --low Q9_Z"));
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_NE(0, sh(bin + " run -m " + *plain_ + " -p ids:1,2 -n 2 --mode hobbit"));
  EXPECT_NE(0, sh(bin + " run -m " + *packed_ +
                  " -p ids:1,2 -n 2 --mode hobbit --hobbit-t1 0.8 --hobbit-t2 0.2"));
  EXPECT_EQ(0, sh(bin + " run -m " + *packed_ + " -p ids:1,2 -n 2 --mode hobbit --cache-rate 0.3"));
}

}  // namespace
}  // namespace moeflow::lossy_modes_test
