#pragma once
// Thin helpers over the CPU kernels used by every layer of the forward pass.
#include <cstdint>

#include "core/thread_pool.h"
#include "experts/expert_provider.h"
#include "model/weights.h"

namespace moeflow {

// Y[m][w.rows] = X[m][w.cols] * W^T (matvec for one token, matmul for several).
void linear(const WeightRef& w, const float* X, int64_t m, float* Y, ThreadPool* pool);
void linear_raw(GgmlType t, const void* W, int64_t rows, int64_t cols, const float* X, int64_t m,
                float* Y, ThreadPool* pool);

// SwiGLU feed-forward of one expert (or dense FFN) on m tokens: Y = down(silu(gate X) * up X).
// A fused gate_up expert has data[Up] == nullptr and 2*ff rows in the gate slice (gate first).
// GU needs m * 2 * ff floats of scratch, H m * ff.
void swiglu_ffn(const ExpertView& e, const float* X, int64_t m, float* GU, float* H, float* Y,
                ThreadPool* pool);

// Expert-shaped view of three non-expert matrices (dense FFN, shared expert).
ExpertView view_of(const WeightRef& gate, const WeightRef& up, const WeightRef& down);

// Intermediate size of the expert (rows of gate, or half of fused gate_up).
int64_t ffn_size(const ExpertView& e);

}  // namespace moeflow
