#include "quant/quant.h"

#include "core/error.h"
#include "quant/quant_impl.h"

namespace moeflow {
namespace {

using namespace quant_detail;

using DequantFn = void (*)(const void*, float*, int64_t);
using QuantFn = void (*)(const float*, void*, int64_t);

struct Codec {
  DequantFn dequant;
  QuantFn quant;
};

// Q8_1 and the IQ1/2/3 grids are not produced or read by moeflow; they fall through to the
// "unsupported" error below.
Codec codec_for(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return {dequantize_f32, quantize_f32};
    case GgmlType::F16: return {dequantize_f16, quantize_f16};
    case GgmlType::BF16: return {dequantize_bf16, quantize_bf16};
    case GgmlType::Q4_0: return {dequantize_q4_0, quantize_q4_0};
    case GgmlType::Q4_1: return {dequantize_q4_1, quantize_q4_1};
    case GgmlType::Q5_0: return {dequantize_q5_0, quantize_q5_0};
    case GgmlType::Q5_1: return {dequantize_q5_1, quantize_q5_1};
    case GgmlType::Q8_0: return {dequantize_q8_0, quantize_q8_0};
    case GgmlType::Q2_K: return {dequantize_q2_k, quantize_q2_k};
    case GgmlType::Q3_K: return {dequantize_q3_k, quantize_q3_k};
    case GgmlType::Q4_K: return {dequantize_q4_k, quantize_q4_k};
    case GgmlType::Q5_K: return {dequantize_q5_k, quantize_q5_k};
    case GgmlType::Q6_K: return {dequantize_q6_k, quantize_q6_k};
    case GgmlType::Q8_K: return {dequantize_q8_k, quantize_q8_k};
    case GgmlType::IQ4_NL: return {dequantize_iq4_nl, quantize_iq4_nl};
    case GgmlType::IQ4_XS: return {dequantize_iq4_xs, quantize_iq4_xs};
    case GgmlType::MXFP4: return {dequantize_mxfp4, quantize_mxfp4};
    default: return {nullptr, nullptr};
  }
}

void check_count(GgmlType t, int64_t n, const char* what) {
  const TypeTraits& tr = type_traits(t);  // throws for ids that are no ggml type
  if (n < 0) fail("{} {}: negative element count {}", what, tr.name, n);
  if (n % tr.block_size != 0)
    fail("{} {}: {} elements is not a multiple of the block size {}", what, tr.name, n,
         tr.block_size);
}

}  // namespace

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  check_count(t, n, "dequantize");
  const Codec c = codec_for(t);
  if (!c.dequant) fail("dequantize: tensor type {} is not supported by moeflow", type_name(t));
  if (n > 0) c.dequant(src, dst, n);
}

void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  check_count(t, n, "quantize");
  const Codec c = codec_for(t);
  if (!c.quant) fail("quantize: moeflow cannot produce tensor type {}", type_name(t));
  if (n > 0) c.quant(src, dst, n);
}

bool can_quantize(GgmlType t) { return codec_for(t).quant != nullptr; }

bool can_dequantize(GgmlType t) { return codec_for(t).dequant != nullptr; }

}  // namespace moeflow
