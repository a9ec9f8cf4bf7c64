// Scale searches. The pattern everywhere: try a small grid of candidate inverse scales around
// the max-abs choice, round every element, solve the least-squares scale (and offset) for those
// integers in closed form, keep the candidate with the least squared error, then re-round with
// the fitted scale until it stops improving. Sub-block scales are then quantized to their few
// bits and the super-block scales refitted by least squares over all 256 elements.
#include "quant/scale_search.h"

#include <algorithm>
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

// The searches below try many candidate scales on the same few elements. Each candidate's sums
// are a chain of dependent double additions in element order; evaluated one candidate after
// another the quantizer waited on those chains (and, with the candidate state held in lambda
// captures, reloaded it at every element: a uint8_t store may alias anything). The batches run
// a group of candidates side by side, element by element, each candidate's sums still in element
// order: the same bits as one at a time, with 10-30% less CPU for the K-quant and IQ4
// quantization that `moeflow gen-model` and `moeflow quantize` spend most of their time in.

// Least-squares (s, b) of x ~= s * L + b (b <= 0, s >= 0) for codes with the given sums, and
// its squared error.
struct AsymCandidate {
  double s = 0, b = 0, err = kInf;
};
AsymCandidate solve_asym(int n, double sq, double sqq, double sqx, double sx, double sxx) {
  AsymCandidate c;
  const double det = n * sqq - sq * sq;
  if (det > 0) {
    c.s = (n * sqx - sq * sx) / det;
    c.b = (sqq * sx - sq * sqx) / det;
  }
  if (c.b > 0 || det <= 0) {
    c.b = 0;
    c.s = sqq > 0 ? sqx / sqq : 0;
  }
  if (c.s < 0) {
    c.s = 0;
    c.b = sx / n < 0 ? sx / n : 0;
  }
  const double s = c.s, b = c.b;
  c.err = sxx - 2 * s * sqx - 2 * b * sx + s * s * sqq + 2 * s * b * sq + n * b * b;
  return c;
}

// Codes round(iscale * (x - off)) clamped to [0, nmax] of `nc` candidate inverse scales, and
// their sums (sq, sqq exact integers; sqx in element order).
void asym_sums(const float* x, int n, int nmax, const float* iscale, float off, int nc, double* sq,
               double* sqq, double* sqx) {
  // Four candidates per pass over the elements, their sums in registers (a lane past nc repeats
  // the last candidate and is dropped).
  constexpr int W = 4;
  for (int c0 = 0; c0 < nc; c0 += W) {
    float is[W];
    for (int w = 0; w < W; ++w) is[w] = iscale[std::min(c0 + w, nc - 1)];
    int q[W] = {}, qq[W] = {};
    double qx[W] = {};
    for (int i = 0; i < n; ++i) {
      const float xo = x[i] - off;
      const double xd = x[i];
#pragma GCC unroll 4
      for (int w = 0; w < W; ++w) {
        const int l = clamp_round_fast(is[w] * xo, 0, nmax);
        q[w] += l;
        qq[w] += l * l;
        qx[w] += l * xd;
      }
    }
    for (int w = 0; w < W && c0 + w < nc; ++w) {
      sq[c0 + w] = q[w];
      sqq[c0 + w] = qq[w];
      sqx[c0 + w] = qx[w];
    }
  }
}

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
  // Keeps a candidate that beats the best so far (in the order tried), with its codes.
  float best_iscale = 0, best_off = 0;
  auto offer = [&](const AsymCandidate& c, float iscale, float off) {
    if (c.err < best.err) {
      best.err = c.err;
      best.s = (float)c.s;
      best.m = (float)-c.b;
      best_iscale = iscale;
      best_off = off;
      return true;
    }
    return false;
  };
  const float range = xmax - xmin;
  constexpr int kGrid = 21;
  float isc[kGrid];
  double sq[kGrid], sqq[kGrid], sqx[kGrid];
  for (int k = 0; k < kGrid; ++k) isc[k] = (nmax - 1.0f + 0.1f * k) / range;
  asym_sums(x, n, nmax, isc, xmin, kGrid, sq, sqq, sqx);
  for (int k = 0; k < kGrid; ++k)
    offer(solve_asym(n, sq[k], sqq[k], sqx[k], sx, sxx), isc[k], xmin);
  for (int it = 0; it < 3 && best.s > 0; ++it) {
    const float is = 1.0f / best.s, off = -best.m;
    asym_sums(x, n, nmax, &is, off, 1, sq, sqq, sqx);
    if (!offer(solve_asym(n, sq[0], sqq[0], sqx[0], sx, sxx), is, off)) break;
  }
  for (int i = 0; i < n; ++i)
    L[i] = (uint8_t)clamp_round_fast(best_iscale * (x[i] - best_off), 0, nmax);
  return best;
}

// The best scale so far of a symmetric search (fit_sym, fit_grid_scale), from the sums of a
// candidate's codes: vv = sum of code^2, vx = sum of code * x; the squared error it removes is
// vx^2 / vv. A later candidate replaces it only when strictly better (the order tried decides
// ties).
struct SymChoice {
  double score = -1;  // < 0: no candidate with a non-zero code yet
  float s = 0, iscale = 0;
  bool offer(double vv, double vx, float is) {
    if (vv <= 0) return false;
    const double sc = vx * vx / vv;
    if (!(sc > score)) return false;
    score = sc;
    s = (float)(vx / vv);
    iscale = is;
    return true;
  }
};

// ---- x ~= s * L on one sub-block, L in [-nneg, npos].
// Codes round(iscale * x) clamped to [-nneg, npos] of `nc` candidate inverse scales, and their
// sums (sqq exact; sqx in element order).
void sym_sums(const float* x, int n, int nneg, int npos, const float* iscale, int nc, double* sqq,
              double* sqx) {
  constexpr int W = 4;  // as asym_sums
  for (int c0 = 0; c0 < nc; c0 += W) {
    float is[W];
    for (int w = 0; w < W; ++w) is[w] = iscale[std::min(c0 + w, nc - 1)];
    int qq[W] = {};
    double qx[W] = {};
    for (int i = 0; i < n; ++i) {
      const float xf = x[i];
      const double xd = x[i];
#pragma GCC unroll 4
      for (int w = 0; w < W; ++w) {
        const int l = clamp_round_fast(is[w] * xf, -nneg, npos);
        qq[w] += l * l;
        qx[w] += l * xd;
      }
    }
    for (int w = 0; w < W && c0 + w < nc; ++w) {
      sqq[c0 + w] = qq[w];
      sqx[c0 + w] = qx[w];
    }
  }
}

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
  SymChoice best;
  constexpr int kGrid = 19 + 9;
  float isc[kGrid];
  double sqq[kGrid], sqx[kGrid];
  int c = 0;
  for (int k = -9; k <= 9; ++k) isc[c++] = -(nneg + 0.1f * k) / mx;
  for (int k = -4; k <= 4; ++k) isc[c++] = (npos + 0.1f * k) / mx;
  sym_sums(x, n, nneg, npos, isc, kGrid, sqq, sqx);
  for (int k = 0; k < kGrid; ++k) best.offer(sqq[k], sqx[k], isc[k]);
  for (int it = 0; it < 3 && best.s != 0; ++it) {
    const float is = 1.0f / best.s;
    sym_sums(x, n, nneg, npos, &is, 1, sqq, sqx);
    if (!best.offer(sqq[0], sqx[0], is)) break;
  }
  if (best.score < 0) return best.s;  // no candidate had a non-zero code: L as the caller left it
  for (int i = 0; i < n; ++i) L[i] = (int8_t)clamp_round_fast(best.iscale * x[i], -nneg, npos);
  return best.s;
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
    // A value at the top of its range anchors the super-scale (d = max / smax); keeping it
    // there lets quantize(dequantize(q)) find the same grid again.
    const int da = out.ls[j] == smax ? 0 : 1, db = out.lm[j] == smax ? 0 : 1;
    // The (up to 3 x 3) neighbours side by side, each one's error in element order.
    int ca[9], cb[9], nc = 0;
    float csc[9], cmn[9], cisc[9];
    for (int a = out.ls[j] - da; a <= out.ls[j] + da; ++a) {
      if (a < 0 || a > smax) continue;
      for (int b = out.lm[j] - db; b <= out.lm[j] + db; ++b) {
        if (b < 0 || b > smax) continue;
        ca[nc] = a;
        cb[nc] = b;
        csc[nc] = d * a;
        cmn[nc] = dmin * b;
        cisc[nc] = csc[nc] > 0 ? 1.0f / csc[nc] : 0.0f;
        ++nc;
      }
    }
    double e[9];
    constexpr int W = 4;  // four neighbours per pass, their sums in registers (as asym_sums)
    for (int c0 = 0; c0 < nc; c0 += W) {
      float sc[W], mn[W], isc[W];
      for (int w = 0; w < W; ++w) {
        const int c = std::min(c0 + w, nc - 1);
        sc[w] = csc[c];
        mn[w] = cmn[c];
        isc[w] = cisc[c];
      }
      double ew[W] = {};
      for (int i = 0; i < sub; ++i) {
        const float xi = xs[i];
#pragma GCC unroll 4
        for (int w = 0; w < W; ++w) {
          // isc is 0 where sc is: the code rounds 0 (or NaN, clamped) to 0, as no scale should.
          const int l = clamp_round_fast((xi + mn[w]) * isc[w], 0, nmax);
          const float r = sc[w] * l - mn[w] - xi;
          ew[w] += (double)r * r;
        }
      }
      for (int w = 0; w < W && c0 + w < nc; ++w) e[c0 + w] = ew[w];
    }
    double best = -1;
    int bls = out.ls[j], blm = out.lm[j];
    for (int c = 0; c < nc; ++c) {
      if (best < 0 || e[c] < best) {
        best = e[c];
        bls = ca[c];
        blm = cb[c];
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
  // Four candidates per pass as in asym_sums: the sums of the grid values of the chosen levels
  // (svv exact, svx in element order) for each.
  auto sums = [x, n, &g, v](const float* iscale, int nc, double* svv, double* svx) {
    constexpr int W = 4;
    for (int c0 = 0; c0 < nc; c0 += W) {
      float is[W];
      for (int w = 0; w < W; ++w) is[w] = iscale[std::min(c0 + w, nc - 1)];
      int vv[W] = {};
      double vx[W] = {};
      for (int i = 0; i < n; ++i) {
        const float xf = x[i];
        const double xd = x[i];
#pragma GCC unroll 4
        for (int w = 0; w < W; ++w) {
          const int k = nearest_level(is[w] * xf, g);
          vv[w] += v[k] * v[k];
          vx[w] += v[k] * xd;
        }
      }
      for (int w = 0; w < W && c0 + w < nc; ++w) {
        svv[c0 + w] = vv[w];
        svx[c0 + w] = vx[w];
      }
    }
  };
  SymChoice best;
  constexpr int kGrid = 15 + 9;
  float isc[kGrid];
  double svv[kGrid], svx[kGrid];
  int c = 0;
  for (int k = -7; k <= 7; ++k) isc[c++] = (v[0] + k) / mx;
  for (int k = -4; k <= 4; ++k) isc[c++] = (v[nv - 1] + 2 * k) / mx;
  sums(isc, kGrid, svv, svx);
  for (int k = 0; k < kGrid; ++k) best.offer(svv[k], svx[k], isc[k]);
  for (int it = 0; it < 3 && best.s != 0; ++it) {
    const float is = 1.0f / best.s;
    sums(&is, 1, svv, svx);
    if (!best.offer(svv[0], svx[0], is)) break;
  }
  if (best.score < 0) return best.s;  // no candidate chose a non-zero level: idx as left
  for (int i = 0; i < n; ++i) idx[i] = (uint8_t)nearest_level(best.iscale * x[i], g);
  return best.s;
}

}  // namespace moeflow::quant_detail
