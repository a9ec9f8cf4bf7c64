// Every Backend op on every backend present (the CPU at each SIMD level; a device backend when
// built and its device is there), against float64 references written here from the ops'
// definitions, on fresh random data and odd shapes. In the spirit of llama.cpp's
// test-backend-ops: a new backend passes this file before the model runs on it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/matmul.h"
#include "backend_cases.h"
#include "core/error.h"
#include "ref_formats.h"

namespace moeflow::test {
namespace {

class BackendOps : public ::testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
    guard_ = std::make_unique<CaseGuard>(GetParam());
    be_ = GetParam().make();
  }
  void TearDown() override {
    be_.reset();
    guard_.reset();
  }
  Backend& be() { return *be_; }
  double tol() const { return GetParam().float_tol; }
  std::mt19937 rng{20261124};

  std::vector<float> rnd(size_t n, float scale = 1.f) {
    std::normal_distribution<float> g(0.f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = g(rng);
    return v;
  }

 private:
  std::unique_ptr<CaseGuard> guard_;
  std::unique_ptr<Backend> be_;
};

// |got - want| <= rel * scale + abs, elementwise; NaN never passes.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel,
                  double scale, const std::string& what, double abs = 1e-30) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << what << " element " << i << " was not written (NaN)";
    ASSERT_NEAR(got[i], want[i], rel * std::max(scale, std::fabs(want[i])) + abs)
        << what << " element " << i;
  }
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// ---------------------------------------------------------------- matmul and get_rows

std::vector<int64_t> cols_for(GgmlType t) {
  const int64_t bs =
      std::max(type_traits(t).block_size, type_traits(activation_type_for(t)).block_size);
  if (bs == 1) return {7, 64, 97};
  if (bs == 32) return {32, 160};
  return {256, 768};
}

TEST_P(BackendOps, MatmulEveryTypeAgainstFloat64) {
  for (GgmlType t : kernel_types()) {
    for (int64_t cols : cols_for(t)) {
      for (int64_t rows : {1, 5, 33}) {
        // 19 tokens: the prefill path of backends that switch to a GEMM above a few tokens.
        for (int64_t n : {1, 2, 7, 19}) {
          const auto wbytes = random_weights(t, rows, cols, rng);
          const auto x = rnd((size_t)n * cols);
          DeviceTensor W = upload_bytes(be(), wbytes, t, cols, rows);
          const TensorView w = be().adopt_weight(W.view);
          DeviceTensor X = upload(be(), x, cols, n), Y = poisoned(be(), rows, n);
          be().matmul(w, X.view, Y.view);
          const auto y = download(be(), Y.view);
          // Reference on the float activation; the tolerance covers quantizing the
          // activation to 8 bits per block (half a step plus the fp16 scale) for quantized types.
          const int64_t ab = type_traits(activation_type_for(t)).block_size;
          const size_t rb = row_bytes(t, cols);
          const int above = GetParam().act16_above_tokens;
          const double act16 = above > 0 && n > above ? (t == GgmlType::F16    ? 0x1p-11
                                                         : t == GgmlType::BF16 ? 0x1p-8
                                                                               : 0.0)
                                                      : 0.0;
          for (int64_t r = 0; r < rows; ++r) {
            const RefRow wr = ref_decode(t, wbytes.data() + r * rb, cols);
            for (int64_t tok = 0; tok < n; ++tok) {
              const float* xt = x.data() + tok * cols;
              double dot = 0, mag = 0, qerr = 0;
              for (int64_t i = 0; i < cols; ++i) {
                dot += wr.val[i] * xt[i];
                mag += wr.mag[i] * std::fabs(xt[i]);
              }
              if (ab > 1)
                for (int64_t b = 0; b < cols / ab; ++b) {
                  double amax = 0, wsum = 0;
                  for (int64_t i = b * ab; i < (b + 1) * ab; ++i) {
                    amax = std::max(amax, (double)std::fabs(xt[i]));
                    wsum += wr.mag[i];
                  }
                  qerr += wsum * amax * (0.5 / 127 + 1.0 / 1024);
                }
              const float got = y[tok * rows + r];
              ASSERT_FALSE(std::isnan(got)) << type_name(t) << " unwritten output";
              ASSERT_NEAR(got, dot, qerr + (4 * tol() + act16) * mag + 1e-30)
                  << type_name(t) << " rows=" << rows << " cols=" << cols << " n=" << n << " row "
                  << r << " token " << tok;
            }
          }
        }
      }
    }
  }
}

TEST_P(BackendOps, GetRowsDequantizesEveryType) {
  for (GgmlType t : kernel_types()) {
    const int64_t cols = cols_for(t).back(), rows = 9;
    const auto wbytes = random_weights(t, rows, cols, rng);
    DeviceTensor W = upload_bytes(be(), wbytes, t, cols, rows);
    const TensorView w = be().adopt_weight(W.view);
    const std::vector<int32_t> ids = {3, 0, 8, 3};
    DeviceTensor Y = poisoned(be(), cols, (int64_t)ids.size());
    be().get_rows(w, ids, Y.view);
    const auto y = download(be(), Y.view);
    std::vector<double> want;
    for (int32_t id : ids) {
      const RefRow r = ref_decode(t, wbytes.data() + id * row_bytes(t, cols), cols);
      want.insert(want.end(), r.val.begin(), r.val.end());
    }
    expect_close(y, want, 1e-6, 0, type_name(t));
  }
}

// ---------------------------------------------------------------- norms

TEST_P(BackendOps, RmsNormRowsWithAndWithoutWeightInPlace) {
  for (int64_t n : {1, 7, 64, 4097}) {
    const int64_t rows = 3;
    const auto x = rnd((size_t)n * rows, 3.f), w = rnd(n);
    DeviceTensor X = upload(be(), x, n, rows), Wt = upload(be(), w, n, 1),
                 Y = poisoned(be(), n, rows);
    be().rms_norm(X.view, Wt.view.as<float>(), Y.view, 1e-5f);
    be().rms_norm(X.view, nullptr, X.view, 1e-5f);  // in place, no weight
    const auto y = download(be(), Y.view), xi = download(be(), X.view);
    std::vector<double> want(y.size()), want_nw(y.size());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += (double)x[r * n + i] * x[r * n + i];
      const double s = 1.0 / std::sqrt(ss / n + 1e-5);
      for (int64_t i = 0; i < n; ++i) {
        want[r * n + i] = x[r * n + i] * s * w[i];
        want_nw[r * n + i] = x[r * n + i] * s;
      }
    }
    expect_close(y, want, 4 * tol(), 1e-6, "rms_norm n=" + std::to_string(n));
    expect_close(xi, want_nw, 4 * tol(), 1e-6, "rms_norm in place n=" + std::to_string(n));
  }
}

TEST_P(BackendOps, LayerNormWithWeightAndBias) {
  for (int64_t n : {1, 9, 128, 3000}) {
    const int64_t rows = 2;
    const auto x = rnd((size_t)n * rows, 2.f), w = rnd(n), b = rnd(n);
    // An offset mean: LayerNorm must subtract it (a mistake RMSNorm would not show).
    std::vector<float> xs = x;
    for (auto& v : xs) v += 5.0f;
    DeviceTensor X = upload(be(), xs, n, rows), Wt = upload(be(), w, n, 1),
                 B = upload(be(), b, n, 1), Y = poisoned(be(), n, rows);
    be().layer_norm(X.view, Wt.view.as<float>(), B.view.as<float>(), Y.view, 1e-5f);
    const auto y = download(be(), Y.view);
    std::vector<double> want(y.size());
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < n; ++i) mean += xs[r * n + i];
      mean /= n;
      for (int64_t i = 0; i < n; ++i) var += (xs[r * n + i] - mean) * (xs[r * n + i] - mean);
      var /= n;
      for (int64_t i = 0; i < n; ++i)
        want[r * n + i] = (xs[r * n + i] - mean) / std::sqrt(var + 1e-5) * w[i] + b[i];
    }
    expect_close(y, want, 1e-4, 1e-4, "layer_norm n=" + std::to_string(n));
  }
}

// ---------------------------------------------------------------- RoPE

double ramp(double low, double high, int64_t i0) {
  const double y = (i0 / 2.0 - low) / std::max(0.001, high - low);
  return 1.0 - std::min(1.0, std::max(0.0, y));
}

// Reference RoPE from its definition (ggml's, YaRN included), in double.
void rope_ref(std::vector<double>& x, int64_t off, int64_t pos, const RopeParams& p,
              const std::vector<float>& ff) {
  const int64_t n_rot = p.n_rot, half = n_rot / 2;
  auto corr = [&](double beta) {
    return n_rot * std::log(p.n_ctx_orig / (beta * 2 * M_PI)) / (2 * std::log((double)p.freq_base));
  };
  double c0 = 0, c1 = 0;
  if (p.ext_factor != 0) {
    c0 = std::max(0.0, std::floor(corr(p.beta_fast)));
    c1 = std::min((double)n_rot - 1, std::ceil(corr(p.beta_slow)));
  }
  for (int64_t i = 0; i < half; ++i) {
    double te = pos * std::pow((double)p.freq_base, -2.0 * i / n_rot);
    if (!ff.empty()) te /= ff[i];
    const double ti = p.freq_scale * te;
    double th = ti, ms = p.attn_factor;
    if (p.ext_factor != 0) {
      const double mix = ramp(c0, c1, 2 * i) * p.ext_factor;
      th = ti * (1 - mix) + te * mix;
      ms *= 1 + 0.1 * std::log(1.0 / p.freq_scale);
    }
    const bool neox = p.mode == RopeMode::NeoX;
    const int64_t a = off + (neox ? i : 2 * i), b = off + (neox ? i + half : 2 * i + 1);
    const double x0 = x[a], x1 = x[b];
    x[a] = (x0 * std::cos(th) - x1 * std::sin(th)) * ms;
    x[b] = (x0 * std::sin(th) + x1 * std::cos(th)) * ms;
  }
}

TEST_P(BackendOps, RopeNormalNeoxPartialAndScaled) {
  struct Case {
    const char* name;
    RopeMode mode;
    int64_t head, n_rot;
    float scale, ext, attn;
    bool factors;
  };
  const Case cases[] = {
      {"normal", RopeMode::Normal, 64, 64, 1, 0, 1, false},
      {"neox", RopeMode::NeoX, 64, 64, 1, 0, 1, false},
      {"partial neox", RopeMode::NeoX, 80, 32, 1, 0, 1, false},
      {"linear scaling", RopeMode::Normal, 32, 32, 0.25f, 0, 1, false},
      {"yarn", RopeMode::NeoX, 64, 64, 0.125f, 1, 1.2f, false},
      {"freq factors", RopeMode::NeoX, 48, 48, 1, 0, 1, true},
  };
  for (const Case& c : cases) {
    const int n_head = 3;
    const int64_t n = 4, pos0 = 37;
    RopeParams p;
    p.mode = c.mode;
    p.n_rot = c.n_rot;
    p.freq_base = 10000.f;
    p.freq_scale = c.scale;
    p.ext_factor = c.ext;
    p.attn_factor = c.attn;
    p.n_ctx_orig = 4096;
    std::vector<float> ff;
    if (c.factors) {
      ff = rnd(c.n_rot / 2);
      for (auto& f : ff) f = 1.0f + std::fabs(f) * 4;
    }
    DeviceTensor F =
        upload(be(), ff.empty() ? std::vector<float>{0.f} : ff, std::max<int64_t>(1, ff.size()), 1);
    if (c.factors) p.freq_factors = F.view.as<float>();
    const auto x = rnd((size_t)n * n_head * c.head);
    DeviceTensor X = upload(be(), x, n_head * c.head, n);
    be().rope(X.view, n_head, c.head, pos0, p);
    const auto y = download(be(), X.view);
    std::vector<double> want(x.begin(), x.end());
    for (int64_t t = 0; t < n; ++t)
      for (int h = 0; h < n_head; ++h) rope_ref(want, (t * n_head + h) * c.head, pos0 + t, p, ff);
    expect_close(y, want, 1e-5, 1e-5, c.name, 2e-5 * std::max(1.0, max_abs(want)));
  }
}

// What the models ask of RoPE beyond the cases above: the first positions of a prompt (0-20),
// the large bases of Mixtral/Qwen (1e6) and gpt-oss (150000), and normal-mode partial RoPE on
// strided rows (DeepSeek's MLA rotates the 64 rope dims at the end of each 576-wide latent
// cache row).
TEST_P(BackendOps, RopeAtTheModelsPositionsBasesAndStridedRows) {
  struct Case {
    const char* name;
    RopeMode mode;
    int64_t head, n_rot;
    float base;
    int64_t row, offset;  // floats per row of the buffer and where the heads start in it
    int n_head;
  };
  const Case cases[] = {
      {"normal, base 1e6", RopeMode::Normal, 128, 128, 1e6f, 4 * 128, 0, 4},
      {"neox, base 150000", RopeMode::NeoX, 64, 64, 150000.f, 2 * 64, 0, 2},
      {"normal partial on strided MLA rows", RopeMode::Normal, 64, 64, 10000.f, 576, 512, 1},
  };
  for (const Case& c : cases) {
    const int64_t n = 21, pos0 = 0;
    RopeParams p;
    p.mode = c.mode;
    p.n_rot = c.n_rot;
    p.freq_base = c.base;
    p.n_ctx_orig = 4096;
    const auto x = rnd((size_t)n * c.row);
    DeviceTensor X = upload(be(), x, c.row, n);
    const TensorView heads =
        strided_matrix_view(X.view.data + c.offset * sizeof(float), GgmlType::F32,
                            c.n_head * c.head, n, X.view.row_stride(), X.view.space);
    be().rope(heads, c.n_head, c.head, pos0, p);
    const auto y = download(be(), X.view);
    std::vector<double> want(x.begin(), x.end());
    for (int64_t t = 0; t < n; ++t)
      for (int h = 0; h < c.n_head; ++h)
        rope_ref(want, t * c.row + c.offset + h * c.head, pos0 + t, p, {});
    // Everything outside the rotated heads is untouched.
    expect_close(y, want, 1e-5, 1e-5, c.name, 2e-5 * std::max(1.0, max_abs(want)));
  }
}

// ---------------------------------------------------------------- attention

TEST_P(BackendOps, AttentionGqaWindowAndSinks) {
  struct Case {
    int n_head, n_head_kv;
    int64_t hd, hdv, window;
    bool sinks;
    int64_t pos0, n;
    int64_t v_in_k = -1;  // >= 0: V is the columns [v_in_k, v_in_k + hdv) of K's rows (MLA)
  };
  const Case cases[] = {
      {4, 4, 16, 16, 0, false, 0, 5},      // prefill from empty, MHA
      {6, 2, 32, 24, 0, false, 9, 1},      // decode, GQA, v head differs
      {4, 1, 8, 8, 0, false, 3, 6},        // MQA, chunked prefill
      {4, 2, 16, 16, 4, false, 10, 3},     // sliding window
      {4, 2, 16, 16, 0, true, 7, 2},       // sinks
      {2, 2, 64, 64, 5, true, 20, 4},      // both
      {12, 1, 40, 32, 0, false, 6, 3, 8},  // multi-head latent attention: 12 heads share one
      {12, 1, 40, 32, 0, true, 9, 1, 8},   // kv row, values its last 32 columns; decode + sinks
      {4, 2, 64, 64, 0, true, 300, 1},     // decode over several splits of positions
      {4, 2, 32, 32, 200, false, 400, 2},  // a window spanning several splits
      {8, 2, 128, 96, 0, false, 70, 40},   // prefill over several query and key tiles
      {2, 1, 256, 256, 0, true, 3, 20},    // the largest narrow head
      // DeepSeek's MLA: one 576-wide latent kv row (512 + 64 rope) per position shared by every
      // head, values its first 512 columns; decode over several splits, then a prefill.
      {16, 1, 576, 512, 0, false, 140, 1, 0},
      {4, 1, 576, 512, 0, false, 5, 20, 0},
      {2, 1, 320, 288, 0, true, 2, 6},  // between the two head-size classes
      // gemma4's shapes: sliding heads of 256 in pairs, 37 prompt tokens (tiles of 8 and a
      // ragged one) with the window's start moving through them; global heads of 512, 8 per
      // kv head, a chunk after 5 cached positions.
      {4, 2, 256, 256, 13, false, 0, 37},
      {16, 2, 512, 512, 0, false, 5, 19},
      {8, 1, 16, 16, 0, false, 33000, 5},  // a long cache: fewer tokens per tile
  };
  for (const Case& c : cases) {
    const int64_t n_ctx = c.pos0 + c.n + 3;
    const int64_t kd = c.n_head_kv * c.hd, vd = c.v_in_k >= 0 ? kd : c.n_head_kv * c.hdv;
    const int64_t v0 = c.v_in_k >= 0 ? c.v_in_k : 0;
    const auto q = rnd((size_t)c.n * c.n_head * c.hd), K = rnd((size_t)n_ctx * kd);
    const auto V = c.v_in_k >= 0 ? K : rnd((size_t)n_ctx * vd);
    const auto sinks = rnd(c.n_head, 2.f);
    DeviceTensor Q = upload(be(), q, c.n_head * c.hd, c.n), Kt = upload(be(), K, kd, n_ctx),
                 Vt = upload(be(), V, vd, n_ctx), S = upload(be(), sinks, c.n_head, 1),
                 O = poisoned(be(), c.n_head * c.hdv, c.n);
    TensorView vview = Vt.view;
    if (c.v_in_k >= 0)
      vview = strided_matrix_view(Kt.view.data + c.v_in_k * sizeof(float), GgmlType::F32, c.hdv,
                                  n_ctx, Kt.view.row_stride(), Kt.view.space);
    AttentionParams p;
    p.n_head = c.n_head;
    p.n_head_kv = c.n_head_kv;
    p.head_dim = c.hd;
    p.head_dim_v = c.hdv;
    p.scale = 1.0f / std::sqrt((float)c.hd);
    p.window = c.window;
    if (c.sinks) p.sinks = S.view.as<float>();
    be().attention(Q.view, Kt.view, vview, O.view, c.pos0, p);
    const auto o = download(be(), O.view);
    std::vector<double> want(o.size());
    const int group = c.n_head / c.n_head_kv;
    for (int64_t t = 0; t < c.n; ++t)
      for (int h = 0; h < c.n_head; ++h) {
        const int g = h / group;
        const int64_t last = c.pos0 + t;
        const int64_t first = c.window > 0 ? std::max<int64_t>(0, last + 1 - c.window) : 0;
        std::vector<double> s;
        double mx = c.sinks ? sinks[h] : -INFINITY;
        for (int64_t j = first; j <= last; ++j) {
          double d = 0;
          for (int64_t i = 0; i < c.hd; ++i)
            d += (double)q[(t * c.n_head + h) * c.hd + i] * K[j * kd + g * c.hd + i];
          s.push_back(d * p.scale);
          mx = std::max(mx, s.back());
        }
        double sum = c.sinks ? std::exp(sinks[h] - mx) : 0;
        for (double& v : s) sum += v = std::exp(v - mx);
        for (int64_t i = 0; i < c.hdv; ++i) {
          double acc = 0;
          for (int64_t j = first; j <= last; ++j)
            acc += s[j - first] / sum * V[j * vd + v0 + g * c.hdv + i];
          want[(t * c.n_head + h) * c.hdv + i] = acc;
        }
      }
    expect_close(o, want, 1e-5, 1e-5,
                 "attention heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) +
                     " window " + std::to_string(c.window) + (c.sinks ? " sinks" : ""),
                 1e-5);
  }
}

// ---------------------------------------------------------------- element-wise

double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST_P(BackendOps, GluKindsOnStridedHalves) {
  const int64_t m = 5, ff = 37;
  const auto gu = rnd((size_t)m * 2 * ff, 3.f);
  DeviceTensor GU = upload(be(), gu, 2 * ff, m);
  // The halves of one fused [m][2ff] matrix: strided views, as the fused gate_up experts use.
  const TensorView gate =
      strided_matrix_view(GU.view.data, GgmlType::F32, ff, m, GU.view.row_stride(), GU.view.space);
  const TensorView up = strided_matrix_view(GU.view.data + ff * 4, GgmlType::F32, ff, m,
                                            GU.view.row_stride(), GU.view.space);
  for (GluKind kind : {GluKind::SwiGLU, GluKind::GeGLU, GluKind::SwiGLUOai}) {
    GluParams p;
    p.kind = kind;
    p.limit = kind == GluKind::SwiGLUOai ? 2.5f : 0.f;
    DeviceTensor H = poisoned(be(), ff, m);
    be().glu(gate, up, H.view, p);
    const auto h = download(be(), H.view);
    std::vector<double> want(h.size()), mag(h.size());
    for (int64_t t = 0; t < m; ++t)
      for (int64_t i = 0; i < ff; ++i) {
        double g = gu[t * 2 * ff + i], u = gu[t * 2 * ff + ff + i];
        // Float rounding of the activation is relative to |g * u| (GeGLU's 1 + tanh cancels).
        mag[t * ff + i] = std::fabs(g * u) + std::fabs(g);
        double v = 0;
        if (kind == GluKind::SwiGLU) v = g / (1 + std::exp(-g)) * u;
        if (kind == GluKind::GeGLU) v = gelu_tanh(g) * u;
        if (kind == GluKind::SwiGLUOai) {
          g = std::min(g, (double)p.limit);
          u = std::max(-(double)p.limit, std::min(u, (double)p.limit));
          v = g / (1 + std::exp(-p.alpha * g)) * (u + 1);
        }
        want[t * ff + i] = v;
      }
    for (size_t i = 0; i < h.size(); ++i)
      ASSERT_NEAR(h[i], want[i], 4 * tol() * mag[i] + 1e-30)
          << "glu kind " << (int)kind << " element " << i;
  }
}

TEST_P(BackendOps, AddBroadcastScaleAddAndGatedAdd) {
  const int64_t n = 4, d = 67;
  const auto x = rnd(n * d), y = rnd(n * d), b = rnd(d), g = rnd(n, 2.f);
  DeviceTensor X = upload(be(), x, d, n), Y = upload(be(), y, d, n), B = upload(be(), b, d, 1),
               G = upload(be(), g, 1, n);
  be().add(X.view, Y.view);                                 // x += y
  be().add(X.view, B.view);                                 // x += b (every row)
  be().scale_add(X.view, Y.view, 0.75f);                    // x += 0.75 y
  be().gated_add(X.view, Y.view, G.view, GateFn::Sigmoid);  // x += sigmoid(g_t) y
  be().gated_add(X.view, Y.view, G.view, GateFn::None);     // x += g_t y
  const auto out = download(be(), X.view);
  std::vector<double> want(out.size());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < d; ++i) {
      const double yv = y[t * d + i];
      want[t * d + i] =
          x[t * d + i] + yv + b[i] + 0.75 * yv + yv / (1 + std::exp(-g[t])) + g[t] * yv;
    }
  expect_close(out, want, 4 * tol(), 1e-6, "add/scale_add/gated_add");
}

// Gemma's embedding / layer-output scale and its final-logit soft-capping, on a row slice so the
// rows outside it must stay untouched. Values reach |x| ~ 90 so tanh saturates for some.
// Multi-head latent attention's per-head products: x and y are column views of wider rows,
// heads step through them. Every head must equal the per-head matmul bit for bit (on the CPU
// one token's heads share one dispatch) and the float64 product within quantization error.
TEST_P(BackendOps, MatmulHeadsEqualsOneMatmulPerHead) {
  const int64_t H = 5, rows = 9;
  for (GgmlType t : {GgmlType::F32, GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_K}) {
    const int64_t cols = cols_for(t).back();
    const size_t rb = row_bytes(t, cols);
    const auto wbytes = random_weights(t, rows * H, cols, rng);
    DeviceTensor W = upload_bytes(be(), wbytes, t, cols, rows * H);
    TensorView stack = be().adopt_weight(W.view);
    stack.ne[1] = rows;
    stack.ne[2] = H;
    stack.nb[2] = rb * rows;
    // x: per head [3 floats of other data | cols], y: per head [rows | 2 floats untouched].
    const int64_t xs = cols + 3, ys = rows + 2;
    for (int64_t n : {1, 3}) {
      const auto x = rnd((size_t)(n * H * xs));
      DeviceTensor X = upload(be(), x, H * xs, n);
      DeviceTensor Y1 = poisoned(be(), H * ys, n), Y2 = poisoned(be(), H * ys, n);
      be().matmul_heads(stack, f32_columns(X.view, 3, cols), xs, f32_columns(Y1.view, 0, rows), ys);
      for (int64_t h = 0; h < H; ++h)
        be().matmul(head_block(stack, h), f32_columns(X.view, h * xs + 3, cols),
                    f32_columns(Y2.view, h * ys, rows));
      const auto y1 = download(be(), Y1.view), y2 = download(be(), Y2.view);
      for (int64_t tok = 0; tok < n; ++tok)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t r = 0; r < rows; ++r) {
            const size_t i = (size_t)(tok * H * ys + h * ys + r);
            ASSERT_EQ(0, std::memcmp(&y1[i], &y2[i], 4))
                << type_name(t) << " n=" << n << " head " << h << " row " << r;
            const RefRow wr = ref_decode(t, wbytes.data() + (h * rows + r) * rb, cols);
            double dot = 0, mag = 0;
            for (int64_t c = 0; c < cols; ++c) {
              const double xv = x[(size_t)(tok * H * xs + h * xs + 3 + c)];
              dot += wr.val[c] * xv;
              mag += wr.mag[c] * std::fabs(xv);
            }
            ASSERT_NEAR(y1[i], dot, 0.02 * mag + 1e-6) << type_name(t) << " head " << h;
          }
      // The columns between heads' outputs are not written.
      for (int64_t tok = 0; tok < n; ++tok)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t c = rows; c < ys; ++c)
            ASSERT_TRUE(std::isnan(y1[(size_t)(tok * H * ys + h * ys + c)]));
    }
  }
}

TEST_P(BackendOps, ScaleAndSoftcapOnARowSlice) {
  const int64_t n = 5, d = 131;
  const auto x = rnd(n * d, 30.f), y = rnd(n * d, 30.f);
  DeviceTensor X = upload(be(), x, d, n), Y = upload(be(), y, d, n);
  be().scale(X.view.slice_rows(1, 3), 1.75f);
  be().softcap(Y.view.slice_rows(1, 3), 30.0f);
  const auto xs = download(be(), X.view), ys = download(be(), Y.view);
  std::vector<double> want_x(xs.size()), want_y(ys.size());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < d; ++i) {
      const bool in = t >= 1 && t < 4;
      const double xv = x[t * d + i], yv = y[t * d + i];
      want_x[t * d + i] = in ? 1.75 * xv : xv;
      want_y[t * d + i] = in ? 30.0 * std::tanh(yv / 30.0) : yv;
    }
  expect_close(xs, want_x, 4 * tol(), 1e-6, "scale");
  expect_close(ys, want_y, 4 * tol(), 1e-6, "softcap");
  // A vocabulary-wide row (the CPU splits those over its threads).
  const int64_t wide = 40000;
  const auto z = rnd(2 * wide, 30.f);
  DeviceTensor Z = upload(be(), z, wide, 2);
  be().softcap(Z.view, 30.0f);
  const auto zs = download(be(), Z.view);
  std::vector<double> want_z(zs.size());
  for (size_t i = 0; i < z.size(); ++i) want_z[i] = 30.0 * std::tanh(z[i] / 30.0);
  expect_close(zs, want_z, 4 * tol(), 1e-6, "softcap of a wide row");
}

// ---------------------------------------------------------------- routing

struct RouteRef {
  std::vector<int> experts;
  std::vector<double> weights;
};

RouteRef route_ref(const std::vector<float>& lg, const RoutingSpec& s,
                   const std::vector<float>& bias, int k) {
  const int E = (int)lg.size();
  std::vector<double> p(E), sel(E);
  if (s.gating == RoutingSpec::Gating::Sigmoid) {
    for (int e = 0; e < E; ++e) p[e] = 1 / (1 + std::exp(-(double)lg[e]));
  } else if (s.softmax_after_topk) {
    for (int e = 0; e < E; ++e) p[e] = lg[e];
  } else {
    const double mx = *std::max_element(lg.begin(), lg.end());
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += p[e] = std::exp(lg[e] - mx);
    for (double& v : p) v /= sum;
  }
  for (int e = 0; e < E; ++e) sel[e] = p[e] + (bias.empty() ? 0 : bias[e]);
  std::vector<char> allowed(E, 1);
  if (s.n_group > 1) {
    const int per = E / s.n_group;
    std::vector<std::pair<double, int>> gs;
    for (int g = 0; g < s.n_group; ++g) {
      std::vector<double> v(sel.begin() + g * per, sel.begin() + (g + 1) * per);
      std::sort(v.rbegin(), v.rend());
      gs.push_back({std::accumulate(v.begin(), v.begin() + s.group_top, 0.0), -g});
    }
    std::sort(gs.rbegin(), gs.rend());
    std::fill(allowed.begin(), allowed.end(), 0);
    for (int r = 0; r < s.topk_group; ++r)
      for (int e = -gs[r].second * per; e < (-gs[r].second + 1) * per; ++e) allowed[e] = 1;
  }
  std::vector<int> order;
  for (int e = 0; e < E; ++e)
    if (allowed[e]) order.push_back(e);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return sel[a] > sel[b]; });
  RouteRef r;
  r.experts.assign(order.begin(), order.begin() + k);
  for (int e : r.experts) r.weights.push_back(p[e]);
  if (s.gating == RoutingSpec::Gating::SparseMixer) {
    // Phi-3.5-MoE's sparsemixer at inference: each rank masks, among the experts not chosen
    // yet, those whose logit is relatively further than 2 eps below its own, then softmaxes.
    std::vector<char> gone(E, 0);
    for (int j = 0; j < k; ++j) {
      const double m = lg[r.experts[j]];
      double den = 0;
      for (int e = 0; e < E; ++e) {
        const double rel = (m - lg[e]) / std::max(std::fabs((double)lg[e]), m);
        if (!gone[e] && !(rel > 2 * s.jitter_eps)) den += std::exp(lg[e] - m);
      }
      r.weights[j] = 1 / den;
      gone[r.experts[j]] = 1;
    }
  }
  if (s.softmax_after_topk) {
    const double mx = *std::max_element(r.weights.begin(), r.weights.end());
    double sum = 0;
    for (double& w : r.weights) sum += w = std::exp(w - mx);
    for (double& w : r.weights) w /= sum;
  }
  if (s.norm_weights) {
    const double sum = std::accumulate(r.weights.begin(), r.weights.end(), 0.0);
    for (double& w : r.weights) w /= sum;
  }
  for (double& w : r.weights) w *= s.scale;
  return r;
}

TEST_P(BackendOps, RouteEveryRoutingRule) {
  struct Case {
    const char* name;
    RoutingSpec spec;
    bool bias;
    int E, k;
  };
  std::vector<Case> cases;
  auto add = [&](const char* name, auto f, bool bias, int E, int k) {
    RoutingSpec s;
    f(s);
    cases.push_back({name, s, bias, E, k});
  };
  add(
      "softmax", [](RoutingSpec&) {}, false, 8, 2);
  add(
      "softmax renorm", [](RoutingSpec& s) { s.norm_weights = true; }, false, 60, 4);
  add(
      "softmax after top-k", [](RoutingSpec& s) { s.softmax_after_topk = true; }, false, 32, 4);
  add(
      "sparsemixer", [](RoutingSpec& s) { s.gating = RoutingSpec::Gating::SparseMixer; }, false, 16,
      2);
  // A wide jitter so that several experts share each rank's softmax.
  add(
      "sparsemixer wide",
      [](RoutingSpec& s) {
        s.gating = RoutingSpec::Gating::SparseMixer;
        s.jitter_eps = 0.2f;
      },
      false, 16, 3);
  add(
      "sigmoid bias norm scale",
      [](RoutingSpec& s) {
        s.gating = RoutingSpec::Gating::Sigmoid;
        s.norm_weights = true;
        s.scale = 2.5f;
      },
      true, 64, 8);
  add(
      "groups (max)",
      [](RoutingSpec& s) {
        s.n_group = 8;
        s.topk_group = 3;
        s.group_top = 1;
      },
      false, 64, 6);
  add(
      "sigmoid groups (top-2 sum) bias",
      [](RoutingSpec& s) {
        s.gating = RoutingSpec::Gating::Sigmoid;
        s.n_group = 4;
        s.topk_group = 2;
        s.group_top = 2;
        s.norm_weights = true;
      },
      true, 32, 4);
  for (const Case& c : cases) {
    const int n = 5;
    // Well separated logits (a permutation of a spaced grid plus small noise): rounding can
    // never reorder two candidates, so selection is compared exactly.
    std::vector<float> lg;
    for (int t = 0; t < n; ++t) {
      std::vector<int> perm(c.E);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int e = 0; e < c.E; ++e)
        lg.push_back(-3.0f + 6.0f * perm[e] / c.E + 0.01f * rnd(1)[0] / c.E);
    }
    std::vector<float> bias;
    if (c.bias) {
      for (int e = 0; e < c.E; ++e) bias.push_back(0.37f * (float)((e * 7) % 5) / c.E);
    }
    DeviceTensor L = upload(be(), lg, c.E, n);
    std::vector<int32_t> ex((size_t)n * c.k, -1);
    std::vector<float> w((size_t)n * c.k), probs((size_t)n * c.E);
    be().route(L.view, c.spec, bias.empty() ? nullptr : bias.data(), c.k, ex.data(), w.data(),
               probs.data());
    for (int t = 0; t < n; ++t) {
      const std::vector<float> row(lg.begin() + t * c.E, lg.begin() + (t + 1) * c.E);
      const RouteRef r = route_ref(row, c.spec, bias, c.k);
      for (int j = 0; j < c.k; ++j) {
        ASSERT_EQ(ex[t * c.k + j], r.experts[j]) << c.name << " token " << t << " rank " << j;
        ASSERT_NEAR(w[t * c.k + j], r.weights[j], 1e-5 * std::max(1.0, std::fabs(r.weights[j])))
            << c.name;
      }
    }
  }
}

// ---------------------------------------------------------------- MoE data movement

TEST_P(BackendOps, GatherScatterAndCombine) {
  const int64_t n = 3, k = 2, d = 19;
  const auto x = rnd(n * d), slots = rnd(n * k * d);
  DeviceTensor X = upload(be(), x, d, n), Gth = poisoned(be(), d, 4);
  const std::vector<int32_t> idx = {2, 0, 2, 1};
  be().gather_rows(X.view, idx, Gth.view);
  const auto g = download(be(), Gth.view);
  std::vector<double> gw;
  for (int32_t i : idx) gw.insert(gw.end(), x.begin() + i * d, x.begin() + (i + 1) * d);
  expect_close(g, gw, 0, 0, "gather_rows");

  DeviceTensor S = upload(be(), std::vector<float>(n * k * d, 0.f), d, n * k);
  DeviceTensor Src = upload(be(), std::vector<float>(slots.begin(), slots.begin() + 3 * d), d, 3);
  const std::vector<int32_t> dst = {5, 1, 2};
  be().scatter_rows(S.view, dst, Src.view);
  const auto s = download(be(), S.view);
  std::vector<double> sw(n * k * d, 0.0);
  for (size_t j = 0; j < dst.size(); ++j)
    for (int64_t i = 0; i < d; ++i) sw[dst[j] * d + i] = slots[j * d + i];
  expect_close(s, sw, 0, 0, "scatter_rows");

  DeviceTensor All = upload(be(), slots, d, n * k), Out = poisoned(be(), d, n);
  const std::vector<float> w = {0.7f, 0.3f, 0.5f, 0.25f, 1.0f, 0.9f};
  const std::vector<uint8_t> keep = {1, 1, 0, 1, 0, 0};  // token 2 keeps nothing: output 0
  be().moe_combine(Out.view, All.view, w, keep, (int)k);
  const auto o = download(be(), Out.view);
  std::vector<double> ow(n * d, 0.0);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < k; ++r)
      if (keep[t * k + r])
        for (int64_t i = 0; i < d; ++i) ow[t * d + i] += w[t * k + r] * slots[(t * k + r) * d + i];
  expect_close(o, ow, 4 * tol(), 1e-6, "moe_combine");
}

TEST_P(BackendOps, CopyStridedRowsBothWays) {
  const int64_t rows = 6, cols = 10, wide = 16;
  const auto x = rnd(rows * wide);
  DeviceTensor Wd = upload(be(), x, wide, rows), Dst = poisoned(be(), cols, rows);
  // Columns 3..12 of each row of a wider matrix, packed, then written back shifted.
  const TensorView src = strided_matrix_view(Wd.view.data + 3 * 4, GgmlType::F32, cols, rows,
                                             Wd.view.row_stride(), Wd.view.space);
  be().copy(Dst.view, src);
  const auto d = download(be(), Dst.view);
  std::vector<double> want;
  for (int64_t r = 0; r < rows; ++r)
    want.insert(want.end(), x.begin() + r * wide + 3, x.begin() + r * wide + 3 + cols);
  expect_close(d, want, 0, 0, "copy strided -> packed");
  const TensorView back = strided_matrix_view(Wd.view.data + 5 * 4, GgmlType::F32, cols, rows,
                                              Wd.view.row_stride(), Wd.view.space);
  be().copy(back, Dst.view);
  const auto w2 = download(be(), Wd.view);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < wide; ++i) {
      const double e = (i >= 5 && i < 5 + cols) ? x[r * wide + 3 + (i - 5)] : x[r * wide + i];
      ASSERT_EQ(w2[r * wide + i], e) << "copy packed -> strided row " << r << " col " << i;
    }
}

// ---------------------------------------------------------------- recurrent layers (DeltaNet)

TEST_P(BackendOps, SigmoidMulOnStridedGate) {
  const int64_t n = 6, d = 37;
  const auto x = rnd(n * d), g = rnd(n * 2 * d, 2.f);
  DeviceTensor X = upload(be(), x, d, n), G = upload(be(), g, 2 * d, n);
  if (!be().has_recurrent_ops()) return;                // sigmoid_mul belongs to the hybrids' ops
  be().sigmoid_mul(X.view, f32_columns(G.view, d, d));  // the second half of each row
  const auto out = download(be(), X.view);
  std::vector<double> want(out.size());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < d; ++i)
      want[t * d + i] = x[t * d + i] / (1 + std::exp(-(double)g[t * 2 * d + d + i]));
  expect_close(out, want, 4 * tol(), 1e-6, "sigmoid_mul");
}

TEST_P(BackendOps, Conv1dSiluContinuesItsState) {
  const int64_t C = 70, K = 4;
  const auto w = rnd(C * K, 0.5f), x1 = rnd(5 * C), x2 = rnd(1 * C), x3 = rnd(3 * C);
  DeviceTensor W = upload(be(), w, K, C),
               S = upload(be(), std::vector<float>((K - 1) * C, 0.f), C, K - 1);
  if (!be().has_recurrent_ops()) {
    // A backend without the recurrent ops refuses them by name (every backend listed has them
    // today; QwenHybrid.ABackendWithoutTheRecurrentOpsIsRefusedByName covers the model's side).
    DeviceTensor X = upload(be(), x1, C, 5), O = poisoned(be(), C, 5);
    EXPECT_THROW(be().conv1d_silu(X.view, S.view, W.view, O.view), Error);
    return;
  }
  // The reference: one convolution over the whole history x1 x2 x3 with K-1 zero rows before.
  std::vector<double> hist((K - 1) * C, 0.0);
  for (const auto* x : {&x1, &x2, &x3}) hist.insert(hist.end(), x->begin(), x->end());
  int64_t t0 = 0;
  for (const auto* x : {&x1, &x2, &x3}) {
    const int64_t n = (int64_t)x->size() / C;
    DeviceTensor X = upload(be(), *x, C, n), O = poisoned(be(), C, n);
    be().conv1d_silu(X.view, S.view, W.view, O.view);
    const auto out = download(be(), O.view);
    std::vector<double> want(out.size());
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (int64_t j = 0; j < K; ++j) s += (double)w[c * K + j] * hist[(t0 + t + j) * C + c];
        want[t * C + c] = s / (1 + std::exp(-s));
      }
    expect_close(out, want, 4 * tol(), 1e-6, "conv1d_silu");
    t0 += n;
  }
  // The state holds the last K-1 inputs.
  const auto st = download(be(), S.view);
  std::vector<double> want_st(hist.end() - (K - 1) * C, hist.end());
  expect_close(st, want_st, 0, 0, "conv1d_silu state");
}

// The gated delta rule token by token in float64 (backend.h DeltaNetParams), continuing `S`.
void delta_rule_ref(const std::vector<float>& qkv, int64_t n, int64_t width, int nk, int nv,
                    int64_t hk, int64_t hv, bool tiled, const std::vector<float>& a,
                    const std::vector<float>& b, const std::vector<float>& A,
                    const std::vector<float>& dt, std::vector<double>& S,
                    std::vector<double>& out) {
  out.assign((size_t)(n * nv * hv), 0.0);
  for (int64_t t = 0; t < n; ++t)
    for (int h = 0; h < nv; ++h) {
      const int kh = tiled ? h % nk : h / (nv / nk);
      const float* row = qkv.data() + t * width;
      std::vector<double> q(hk), k(hk);
      double qs = 0, ks = 0;
      for (int64_t i = 0; i < hk; ++i) {
        q[i] = row[kh * hk + i];
        k[i] = row[nk * hk + kh * hk + i];
        qs += q[i] * q[i];
        ks += k[i] * k[i];
      }
      for (int64_t i = 0; i < hk; ++i) {
        q[i] /= std::sqrt(qs + 1e-6) * std::sqrt((double)hk);
        k[i] /= std::sqrt(ks + 1e-6);
      }
      const double* v = nullptr;
      std::vector<double> vv(hv);
      for (int64_t j = 0; j < hv; ++j) vv[j] = row[2 * nk * hk + h * hv + j];
      v = vv.data();
      const double x = (double)a[t * nv + h] + dt[h];
      const double g = A[h] * (x > 20 ? x : std::log1p(std::exp(x)));
      const double beta = 1 / (1 + std::exp(-(double)b[t * nv + h]));
      double* Sh = S.data() + (size_t)h * hk * hv;
      for (int64_t i = 0; i < hk * hv; ++i) Sh[i] *= std::exp(g);
      for (int64_t j = 0; j < hv; ++j) {
        double mem = 0;
        for (int64_t i = 0; i < hk; ++i) mem += Sh[i * hv + j] * k[i];
        const double delta = (v[j] - mem) * beta;
        for (int64_t i = 0; i < hk; ++i) Sh[i * hv + j] += k[i] * delta;
      }
      for (int64_t j = 0; j < hv; ++j) {
        double o = 0;
        for (int64_t i = 0; i < hk; ++i) o += Sh[i * hv + j] * q[i];
        out[(size_t)(t * nv * hv + h * hv + j)] = o;
      }
    }
}

TEST_P(BackendOps, GatedDeltaNetGroupedAndTiledHeadsOverTwoCalls) {
  if (!be().has_recurrent_ops()) return;  // refusal checked by Conv1dSiluContinuesItsState
  // Value heads of 10 (the CPU's portable kernel only) and of 80: the AVX-512 kernel's 64-column
  // block and its 16-column tail, the AVX2 kernel's 32-column blocks and 8-column tail.
  for (auto [hk, hv] : {std::pair<int64_t, int64_t>{12, 10}, {16, 80}})
    for (bool tiled : {false, true}) {
      const int nk = 2, nv = 6;
      const int64_t width = 2 * nk * hk + nv * hv;
      std::vector<float> A(nv), dt = rnd(nv, 0.5f);
      for (int h = 0; h < nv; ++h) A[h] = -std::exp(0.5f * (float)h - 1.5f);
      DeviceTensor Ad = upload(be(), A, nv, 1), Dd = upload(be(), dt, nv, 1);
      DeviceTensor S = upload(be(), std::vector<float>(nv * hk * hv, 0.f), hv, nv * hk);
      std::vector<double> Sref((size_t)(nv * hk * hv), 0.0), want;
      for (int64_t n : {7, 1, 3}) {
        const auto qkv = rnd(n * width), a = rnd(n * nv), b = rnd(n * nv, 2.f);
        DeviceTensor X = upload(be(), qkv, width, n), Ad2 = upload(be(), a, nv, n),
                     Bd = upload(be(), b, nv, n), O = poisoned(be(), nv * hv, n);
        DeltaNetParams p;
        p.n_k_heads = nk, p.n_v_heads = nv, p.head_k = hk, p.head_v = hv, p.tiled = tiled;
        p.A = Ad.view.as<float>(), p.dt_bias = Dd.view.as<float>();
        be().gated_delta_net(f32_columns(X.view, 0, nk * hk), f32_columns(X.view, nk * hk, nk * hk),
                             f32_columns(X.view, 2 * nk * hk, nv * hv), Ad2.view, Bd.view, S.view,
                             O.view, p);
        delta_rule_ref(qkv, n, width, nk, nv, hk, hv, tiled, a, b, A, dt, Sref, want);
        expect_close(download(be(), O.view), want, 20 * tol(), max_abs(want),
                     tiled ? "gated_delta_net tiled" : "gated_delta_net grouped");
      }
      expect_close(download(be(), S.view), Sref, 20 * tol(), max_abs(Sref),
                   "gated_delta_net state");
    }
}

INSTANTIATE_TEST_SUITE_P(EveryBackend, BackendOps, ::testing::ValuesIn(backend_cases()),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace moeflow::test
