#pragma once
// The two inner loops of attention (q.k and p*v accumulation), vectorised: the generic
// kernels are built for weight matrices, these for short float rows of the KV cache.
#include <cstdint>

namespace moeflow {

using DotF32Fn = float (*)(const float* a, const float* b, int64_t n);
using AxpyF32Fn = void (*)(float* y, const float* x, float a, int64_t n);

// Picked once from the CPU features (AVX2+FMA when present).
DotF32Fn attn_dot_fn();
AxpyF32Fn attn_axpy_fn();

float attn_dot_avx2(const float* a, const float* b, int64_t n);
void attn_axpy_avx2(float* y, const float* x, float a, int64_t n);

// Tiles of several queries against several keys: each key and value row is read once for all
// the queries of a tile instead of once per query. Both are bit for bit the pair-by-pair loops
// above (every output element gets the same float operations in the same order), so which
// level runs them never changes a result.
//
// s[u * s_stride + j] = attn_dot_fn()(q[u], k + j * k_stride, hd) * scale for u < nq and
// j in [j0, j1).
using QkTileFn = void (*)(const float* const* q, int nq, const float* k, int64_t k_stride,
                          int64_t j0, int64_t j1, int64_t hd, float scale, float* s,
                          int64_t s_stride);
// o[u] = 0, then attn_axpy_fn()(o[u], v + j * v_stride, p[u * p_stride + j], hdv) for j from
// lo[u] up to hi[u] - 1, for every u < nq (each query has its own key range: causal masking
// and sliding windows).
using PvTileFn = void (*)(float* const* o, int nq, const float* p, int64_t p_stride,
                          const int64_t* lo, const int64_t* hi, const float* v, int64_t v_stride,
                          int64_t hdv);

// The AVX-512 tiles where the CPU has them (and MOEFLOW_SIMD allows), else the AVX2 tiles,
// else the loops above.
QkTileFn attn_qk_tile_fn();
PvTileFn attn_pv_tile_fn();
// The p.v tile as the axpy loop at every level: decode's single query per head gains nothing
// from the packed key blocks and was ~9% slower per token with them (gemma4, 2 threads).
PvTileFn attn_pv_pairs_fn();
// The q.k tile for decode: the AVX-512 tile, else the pair loop. The AVX2 tile is 1.4-1.5x the
// pair loop on its own (8 queries x 544 keys, head 64-576), yet gpt-oss decode at AVX2 ran 5%
// slower with it (23.6 vs 24.9 tok/s, alternating runs; DeepSeek's unchanged), so decode keeps
// the loop there until that is understood.
QkTileFn attn_qk_decode_fn();

// The tiles at AVX2 (attn_math_avx2.cpp). q.k: 2 queries x 2 keys per pass.
void attn_qk_tile_avx2(const float* const* q, int nq, const float* k, int64_t k_stride, int64_t j0,
                       int64_t j1, int64_t hd, float scale, float* s, int64_t s_stride);
// The p.v tile at AVX2: 4 / 2 / 1 queries per pass, the value rows read in place.
void attn_pv_tile_avx2(float* const* o, int nq, const float* p, int64_t p_stride, const int64_t* lo,
                       const int64_t* hi, const float* v, int64_t v_stride, int64_t hdv);
void attn_qk_tile_avx512(const float* const* q, int nq, const float* k, int64_t k_stride,
                         int64_t j0, int64_t j1, int64_t hd, float scale, float* s,
                         int64_t s_stride);
void attn_pv_tile_avx512(float* const* o, int nq, const float* p, int64_t p_stride,
                         const int64_t* lo, const int64_t* hi, const float* v, int64_t v_stride,
                         int64_t hdv);

}  // namespace moeflow
