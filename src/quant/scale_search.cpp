// Scale searches. The pattern everywhere: try a small grid of candidate inverse scales around
// the max-abs choice, round every element, solve the least-squares scale (and offset) for those
// integers in closed form, keep the candidate with the least squared error, then re-round with
// the fitted scale until it stops improving. Sub-block scales are then quantized to their few
// bits and the super-block scales refitted by least squares over all 256 elements.
#include "quant/scale_search.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/fp16.h"
#include "quant/quant_impl.h"

namespace moeflow::quant_detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- x ~= s * L - m on one sub-block, s >= 0, m >= 0 (the format stores m as a subtracted
// unsigned quantity, so a block that is all positive must still have offset <= 0).
struct AsymFit {
  float s = 0, m = 0;
  double err = kInf;
};

AsymFit fit_asym(const float* x, int n, int nmax, uint8_t* L) {
  float xmin = x[0], xmax = x[0];
  double sx = 0, sxx = 0;
  for (int i = 0; i < n; ++i) {
    xmin = x[i] < xmin ? x[i] : xmin;
    xmax = x[i] > xmax ? x[i] : xmax;
    sx += x[i];
    sxx += (double)x[i] * x[i];
  }
  if (xmin > 0) xmin = 0;
  AsymFit best;
  if (xmax <= xmin) {  // constant non-positive block: the offset alone is exact
    std::memset(L, 0, (size_t)n);
    best.m = -xmin;
    best.err = 0;
    return best;
  }
  uint8_t cand[32];
  auto attempt = [&](float iscale, float off) {
    double sq = 0, sqq = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_round_fast(iscale * (x[i] - off), 0, nmax);
      cand[i] = (uint8_t)l;
      sq += l;
      sqq += l * l;
      sqx += l * (double)x[i];
    }
    double s = 0, b = 0;
    const double det = n * sqq - sq * sq;
    if (det > 0) {
      s = (n * sqx - sq * sx) / det;
      b = (sqq * sx - sq * sqx) / det;
    }
    if (b > 0 || det <= 0) {
      b = 0;
      s = sqq > 0 ? sqx / sqq : 0;
    }
    if (s < 0) {
      s = 0;
      b = sx / n < 0 ? sx / n : 0;
    }
    const double err = sxx - 2 * s * sqx - 2 * b * sx + s * s * sqq + 2 * s * b * sq + n * b * b;
    if (err < best.err) {
      best.err = err;
      best.s = (float)s;
      best.m = (float)-b;
      std::memcpy(L, cand, (size_t)n);
    }
  };
  const float range = xmax - xmin;
  for (int k = 0; k <= 20; ++k) attempt((nmax - 1.0f + 0.1f * k) / range, xmin);
  for (int it = 0; it < 3 && best.s > 0; ++it) {
    const double before = best.err;
    attempt(1.0f / best.s, -best.m);
    if (!(best.err < before)) break;
  }
  return best;
}

// ---- x ~= s * L on one sub-block, L in [-nneg, npos].
float fit_sym(const float* x, int n, int nneg, int npos, int8_t* L) {
  float amax = 0, mx = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      mx = x[i];
    }
  }
  if (amax == 0) {
    std::memset(L, 0, (size_t)n);
    return 0;
  }
  int8_t cand[32];
  double best_score = -1;
  float best_s = 0;
  auto attempt = [&](float iscale) {
    double sqq = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_round_fast(iscale * x[i], -nneg, npos);
      cand[i] = (int8_t)l;
      sqq += l * l;
      sqx += l * (double)x[i];
    }
    if (sqq <= 0) return;
    const double score = sqx * sqx / sqq;  // error = sum x^2 - score
    if (score > best_score) {
      best_score = score;
      best_s = (float)(sqx / sqq);
      std::memcpy(L, cand, (size_t)n);
    }
  };
  for (int k = -9; k <= 9; ++k) attempt(-(nneg + 0.1f * k) / mx);
  for (int k = -4; k <= 4; ++k) attempt((npos + 0.1f * k) / mx);
  for (int it = 0; it < 3 && best_s != 0; ++it) {
    const double before = best_score;
    attempt(1.0f / best_s);
    if (!(best_score > before)) break;
  }
  return best_s;
}

// A refitted scale is only an offer: one that is negative or does not fit fp16 is declined
// (the caller keeps its previous, valid scale) rather than failing valid input.
bool fp16_scale(double v, uint16_t& h, bool allow_negative = false) {
  if (!((allow_negative || v >= 0) && std::fabs(v) < 65504.0)) return false;
  h = fp32_to_fp16((float)v);
  return true;
}

float max_of(const float* v, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

}  // namespace

void quantize_superblock_asym(const float* x, int sub, int nmax, int smax, AsymResult& out,
                              GgmlType t) {
  const int nsub = 256 / sub;
  float s[16], m[16];
  for (int j = 0; j < nsub; ++j) {
    const AsymFit f = fit_asym(x + j * sub, sub, nmax, out.L + j * sub);
    s[j] = f.s;
    m[j] = f.m;
  }
  const float max_s = max_of(s, nsub), max_m = max_of(m, nsub);
  out.d = store_super_scale(max_s / smax, t);
  out.dmin = store_super_scale(max_m / smax, t);
  float d = fp16_to_fp32(out.d), dmin = fp16_to_fp32(out.dmin);
  for (int j = 0; j < nsub; ++j) {
    out.ls[j] = (uint8_t)(d > 0 ? clamp_round_fast(s[j] / d, 0, smax) : 0);
    out.lm[j] = (uint8_t)(dmin > 0 ? clamp_round_fast(m[j] / dmin, 0, smax) : 0);
  }

  // With the integer sub-scales fixed, the best element codes for given (d, dmin) are plain
  // rounding; then (d, dmin) themselves are a 2-parameter least-squares problem.
  auto requant = [&](float dd, float dm, uint8_t* L) {
    double err = 0;
    for (int j = 0; j < nsub; ++j) {
      const float sc = dd * out.ls[j], mn = dm * out.lm[j];
      const float isc = sc > 0 ? 1.0f / sc : 0.0f;
      for (int i = j * sub; i < (j + 1) * sub; ++i) {
        const int l = sc > 0 ? clamp_round_fast((x[i] + mn) * isc, 0, nmax) : 0;
        L[i] = (uint8_t)l;
        const double e = (double)sc * l - mn - x[i];
        err += e * e;
      }
    }
    return err;
  };
  // Rounding each sub-block scale / min to its integer independently is not optimal once the
  // element codes re-round against it: try the neighbouring integers too.
  for (int j = 0; j < nsub; ++j) {
    const float* xs = x + j * sub;
    double best = -1;
    int bls = out.ls[j], blm = out.lm[j];
    // A value at the top of its range anchors the super-scale (d = max / smax); keeping it
    // there lets quantize(dequantize(q)) find the same grid again.
    const int da = out.ls[j] == smax ? 0 : 1, db = out.lm[j] == smax ? 0 : 1;
    for (int a = out.ls[j] - da; a <= out.ls[j] + da; ++a) {
      if (a < 0 || a > smax) continue;
      for (int b = out.lm[j] - db; b <= out.lm[j] + db; ++b) {
        if (b < 0 || b > smax) continue;
        const float sc = d * a, mn = dmin * b;
        const float isc = sc > 0 ? 1.0f / sc : 0.0f;
        double e = 0;
        for (int i = 0; i < sub; ++i) {
          const int l = sc > 0 ? clamp_round_fast((xs[i] + mn) * isc, 0, nmax) : 0;
          const float r = sc * l - mn - xs[i];
          e += (double)r * r;
        }
        if (best < 0 || e < best) {
          best = e;
          bls = a;
          blm = b;
        }
      }
    }
    out.ls[j] = (uint8_t)bls;
    out.lm[j] = (uint8_t)blm;
  }
  double err = requant(d, dmin, out.L);
  uint8_t L2[256];
  for (int it = 0; it < 2; ++it) {
    double saa = 0, sac = 0, scc = 0, sax = 0, scx = 0;
    for (int i = 0; i < 256; ++i) {
      const double a = (double)out.ls[i / sub] * out.L[i], c = out.lm[i / sub];
      saa += a * a;
      sac += a * c;
      scc += c * c;
      sax += a * x[i];
      scx += c * x[i];
    }
    // minimise sum (d a - dm c - x)^2 over d, dm
    const double det = saa * scc - sac * sac;
    double nd, ndm;
    if (det > 1e-12 * saa * scc && scc > 0) {
      nd = (sax * scc - scx * sac) / det;
      ndm = (sax * sac - scx * saa) / det;
    } else if (saa > 0) {
      nd = sax / saa;
      ndm = dmin;
    } else {  // d underflowed to 0 in fp16 (tiny inputs): the mins alone carry the block
      nd = 0;
      ndm = scc > 0 && scx < 0 ? -scx / scc : 0;
    }
    uint16_t hd, hdm;
    if (!fp16_scale(nd, hd) || !fp16_scale(ndm, hdm)) break;
    const double e2 = requant(fp16_to_fp32(hd), fp16_to_fp32(hdm), L2);
    if (!(e2 < err)) break;
    err = e2;
    out.d = hd;
    out.dmin = hdm;
    std::memcpy(out.L, L2, sizeof(L2));
  }
  // Never worse than storing zeros (possible only when the scales underflow fp16).
  double sxx = 0;
  for (int i = 0; i < 256; ++i) sxx += (double)x[i] * x[i];
  if (err > sxx) {
    out.d = out.dmin = 0;
    std::memset(out.ls, 0, sizeof(out.ls));
    std::memset(out.lm, 0, sizeof(out.lm));
    std::memset(out.L, 0, sizeof(out.L));
  }
}

void quantize_superblock_sym(const float* x, int sub, int nneg, int npos, int sc_lo, int sc_hi,
                             SymResult& out, GgmlType t) {
  const int nsub = 256 / sub;
  float s[16];
  float smax_abs = 0, smax = 0;
  for (int j = 0; j < nsub; ++j) {
    s[j] = fit_sym(x + j * sub, sub, nneg, npos, out.L + j * sub);
    if (std::fabs(s[j]) > smax_abs) {
      smax_abs = std::fabs(s[j]);
      smax = s[j];
    }
  }
  out.d = store_super_scale(smax / sc_lo, t);
  const float d = fp16_to_fp32(out.d);
  for (int j = 0; j < nsub; ++j)
    out.ls[j] = (int8_t)(d != 0 ? clamp_round_fast(s[j] / d, sc_lo, sc_hi) : 0);

  auto requant = [&](float dd, int8_t* L) {
    double err = 0;
    for (int j = 0; j < nsub; ++j) {
      const float sc = dd * out.ls[j];
      const float isc = sc != 0 ? 1.0f / sc : 0.0f;
      for (int i = j * sub; i < (j + 1) * sub; ++i) {
        const int l = sc != 0 ? clamp_round_fast(x[i] * isc, -nneg, npos) : 0;
        L[i] = (int8_t)l;
        const double e = (double)sc * l - x[i];
        err += e * e;
      }
    }
    return err;
  };
  double err = requant(d, out.L);
  int8_t L2[256];
  for (int it = 0; it < 2; ++it) {
    double saa = 0, sax = 0;
    for (int i = 0; i < 256; ++i) {
      const double a = (double)out.ls[i / sub] * out.L[i];
      saa += a * a;
      sax += a * x[i];
    }
    uint16_t hd;
    if (saa <= 0 || !fp16_scale(sax / saa, hd, true)) break;
    const double e2 = requant(fp16_to_fp32(hd), L2);
    if (!(e2 < err)) break;
    err = e2;
    out.d = hd;
    std::memcpy(out.L, L2, sizeof(L2));
  }
}

float fit_grid_scale(const float* x, int n, const Grid16& g, uint8_t* idx) {
  const int8_t* v = g.v;
  const int nv = 16;
  float amax = 0, mx = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      mx = x[i];
    }
  }
  if (amax == 0) {
    const uint8_t z = (uint8_t)nearest_level(0.0f, g);
    std::memset(idx, z, (size_t)n);
    return 0;
  }
  uint8_t cand[256];
  double best_score = -1;
  float best_s = 0;
  auto attempt = [&](float iscale) {
    double svv = 0, svx = 0;
    for (int i = 0; i < n; ++i) {
      const int k = nearest_level(iscale * x[i], g);
      cand[i] = (uint8_t)k;
      svv += v[k] * v[k];
      svx += v[k] * (double)x[i];
    }
    if (svv <= 0) return;
    const double score = svx * svx / svv;
    if (score > best_score) {
      best_score = score;
      best_s = (float)(svx / svv);
      std::memcpy(idx, cand, (size_t)n);
    }
  };
  for (int k = -7; k <= 7; ++k) attempt((v[0] + k) / mx);
  for (int k = -4; k <= 4; ++k) attempt((v[nv - 1] + 2 * k) / mx);
  for (int it = 0; it < 3 && best_s != 0; ++it) {
    const double before = best_score;
    attempt(1.0f / best_s);
    if (!(best_score > before)) break;
  }
  return best_s;
}

}  // namespace moeflow::quant_detail
