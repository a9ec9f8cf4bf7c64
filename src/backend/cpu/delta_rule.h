#pragma once
// Internal to backend/cpu: one token of the gated delta rule on one value head's state, at each
// SIMD level (CpuBackend::gated_delta_net loops heads and tokens around it).
//
// With S the head's state [head_k][head_v] (row-major), k and q the token's L2-normalised key and
// (scaled) query, v its value, the rule is
//   S' = decay * S + k delta^T,  delta = (v - decay * S^T k) * beta,  out = S'^T q.
// The kernels expand out = decay * (S^T q) + (k . q) * delta, so one read of S gives both S^T k
// and S^T q; and since column j of delta only needs column j of S^T k, S is walked in blocks of
// columns small enough for L1 (64 columns x 128 rows = 32 KB): the update re-reads the block from
// L1, and the state streams from memory once per token instead of twice.
#include <cstdint>

namespace moeflow::kernels {

struct DeltaToken {
  const float* k = nullptr;  // [head_k], L2-normalised
  const float* q = nullptr;  // [head_k], L2-normalised and scaled by 1/sqrt(head_k)
  const float* v = nullptr;  // [head_v]
  float kq = 0;              // k . q
  float decay = 1, beta = 0;
  float* out = nullptr;  // [head_v]
};

// S [hk][hv] is updated in place.
using DeltaStepFn = void (*)(float* S, int64_t hk, int64_t hv, const DeltaToken& t);

void delta_step_generic(float* S, int64_t hk, int64_t hv, const DeltaToken& t);
void delta_step_avx2(float* S, int64_t hk, int64_t hv, const DeltaToken& t);    // hv % 8 == 0
void delta_step_avx512(float* S, int64_t hk, int64_t hv, const DeltaToken& t);  // hv % 16 == 0

// The kernel of the active SIMD level (MOEFLOW_SIMD honoured) for heads of hv columns.
DeltaStepFn delta_step_fn(int64_t hv);

}  // namespace moeflow::kernels
