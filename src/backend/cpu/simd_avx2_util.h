#pragma once
// Shared AVX2 helpers (include only from *_avx2.cpp / *_avx512.cpp, which get the ISA flags).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace moeflow::kernels::avx2 {
namespace {  // internal linkage: see nt_dispatch.h

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Unsigned bytes times signed bytes, pairs summed to int16 (no saturation while u <= 128 and
// |s| <= 127, which every caller guarantees).
inline __m256i mul_us(__m256i u, __m256i s) { return _mm256_maddubs_epi16(u, s); }

// Signed x signed bytes summed in groups of four to int32.
inline __m256i dot_ss_i32(__m256i x, __m256i y) {
  const __m256i ax = _mm256_sign_epi8(x, x);
  const __m256i sy = _mm256_sign_epi8(y, x);
  return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
}

inline float fp16(uint16_t h) { return _cvtsh_ss(h); }

// Software prefetch for the DRAM-bound dot loops: called once per weight block of `Bytes` bytes,
// it touches every cache line of the block that lies kPrefetchAhead bytes further on (one
// prefetch per 64 bytes of block, so consecutive calls cover the stream without gaps; rows are
// contiguous, so near a row's end it fetches the next row). Measured on Zen 3, Q4_K matvec from
// DRAM with 2 threads: one prefetch per block 1 KiB ahead reached ~60% of the streaming-read
// bandwidth, every line 2-4 KiB ahead ~84% (distances 2-6 KiB are within noise of each other).
// Prefetches never fault, so running past the end of the weights is harmless.
// The hint is T2 (into L2, not L1): on the 2-vCPU Xeon VM (2026-11-27, decode, 2 threads, phase
// timers around the output head) T0 streamed Gemma 4's 415 MB Q4_K head at 15.6 GB/s and T2 at
// 17.6; DeepSeek-V2-Lite decode went from 63-64 to 67-70 tok/s; no prefetch at all fell to 11
// GB/s. Likely because an L1 prefetch holds one of the core's few L1 miss buffers for the whole
// DRAM latency, while one into L2 leaves them to the demand loads (which then hit L2).
constexpr int kPrefetchAhead = 3072;
template <size_t Bytes>
inline void prefetch_block(const void* block) {
  const char* p = static_cast<const char*>(block) + kPrefetchAhead;
#pragma GCC unroll 8
  for (size_t l = 0; l < (Bytes + 63) / 64; ++l) _mm_prefetch(p + 64 * l, _MM_HINT_T2);
}

// 32 bytes, byte k = 0xFF if bit k of `bits` is set.
inline __m256i bits_to_bytes(uint32_t bits) {
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                         0x0101010101010101LL, 0x0000000000000000LL);
  const __m256i mask = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, mask), mask);
}

// int16 scale s[0] in the low 128-bit lane and s[1] in the high one (one 16-element group each).
inline __m256i scale_pair(const int16_t* s) {
  int32_t pair;
  std::memcpy(&pair, s, 4);
  const __m256i ctl = _mm256_set_epi64x(0x0302030203020302LL, 0x0302030203020302LL,
                                        0x0100010001000100LL, 0x0100010001000100LL);
  return _mm256_shuffle_epi8(_mm256_set1_epi32(pair), ctl);
}

}  // namespace
}  // namespace moeflow::kernels::avx2
