#include "model/gen/model_generator.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "gguf/gguf_writer.h"
#include "gguf/tensor_names.h"
#include "model/gen/gen_metadata.h"
#include "model/gen/gen_random.h"
#include "quant/quant.h"

namespace moeflow::gen {
namespace {

bool is_float_type(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

bool producible(GgmlType t) { return is_float_type(t) || can_quantize(t); }

bool fits(GgmlType t, int64_t row_len) { return row_len % type_traits(t).block_size == 0; }

void encode_row(GgmlType t, const float* src, uint8_t* dst, int64_t n) {
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = fp32_to_fp16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = fp32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    default: quantize_row(t, src, dst, n);
  }
}

struct Planner {
  const GenOptions& opt;
  std::vector<PlannedTensor> out;

  void add(std::string name, GgmlType requested, std::vector<int64_t> dims, float std,
           InitKind init = InitKind::Normal) {
    PlannedTensor t;
    t.name = std::move(name);
    t.requested = requested;
    t.type = resolve_type(requested, dims[0]);
    t.dims = std::move(dims);
    t.std = std;
    t.init = init;
    out.push_back(std::move(t));
  }
  // Norm weights and biases stay F32 whatever the weight type, as llama.cpp keeps them.
  void gain(std::string name, int64_t n) {
    add(std::move(name), GgmlType::F32, {n}, 0.1f, InitKind::Gain);
  }
  void bias(std::string name, int64_t n) { add(std::move(name), GgmlType::F32, {n}, 0.1f); }
};

float inv_sqrt(int64_t n) { return 1.0f / std::sqrt((float)n); }

}  // namespace

int64_t PlannedTensor::n_rows() const {
  int64_t r = 1;
  for (size_t i = 1; i < dims.size(); ++i) r *= dims[i];
  return r;
}

uint64_t PlannedTensor::nbytes() const {
  return (uint64_t)row_bytes(type, row_len()) * (uint64_t)n_rows();
}

GgmlType resolve_type(GgmlType requested, int64_t row_len) {
  if (!producible(requested))
    fail("gen-model: cannot write tensors of type {} (no quantizer for it)", type_name(requested));
  if (fits(requested, row_len)) return requested;
  GgmlType alt;
  switch (requested) {
    case GgmlType::Q4_K: alt = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: alt = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: alt = GgmlType::Q8_0; break;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::IQ4_XS: alt = GgmlType::IQ4_NL; break;
    default: alt = GgmlType::F16; break;
  }
  if (!producible(alt)) alt = GgmlType::Q4_0;
  if (!producible(alt) || !fits(alt, row_len)) alt = GgmlType::F16;
  return alt;
}

namespace {

// attn_q/k/v (+ biases, q/k norms) and attn_output of a grouped-query attention layer.
void plan_gqa(Planner& p, const ModelShape& s, GgmlType wt,
              const std::function<std::string(const char*)>& n) {
  const int64_t q_dim = s.n_head * s.head_dim;
  const int64_t kv_dim = s.n_head_kv * s.head_dim;
  p.add(n("attn_q.weight"), wt, {s.n_embd, q_dim}, inv_sqrt(s.n_embd));
  p.add(n("attn_k.weight"), wt, {s.n_embd, kv_dim}, inv_sqrt(s.n_embd));
  p.add(n("attn_v.weight"), wt, {s.n_embd, kv_dim}, inv_sqrt(s.n_embd));
  if (s.qkv_bias()) {
    p.bias(n("attn_q.bias"), q_dim);
    p.bias(n("attn_k.bias"), kv_dim);
    p.bias(n("attn_v.bias"), kv_dim);
  }
  if (s.qk_norm() == QkNorm::PerHead) {
    p.gain(n("attn_q_norm.weight"), s.head_dim);
    p.gain(n("attn_k_norm.weight"), s.head_dim);
  } else if (s.qk_norm() == QkNorm::Full) {
    p.gain(n("attn_q_norm.weight"), q_dim);
    p.gain(n("attn_k_norm.weight"), kv_dim);
  }
  p.add(n("attn_output.weight"), wt, {q_dim, s.n_embd}, inv_sqrt(q_dim));
  if (s.out_bias()) p.bias(n("attn_output.bias"), s.n_embd);
  // One sink logit per head, O(1) like the other logits.
  if (s.arch == GenArch::GptOss) p.add(n("attn_sinks.weight"), GgmlType::F32, {s.n_head}, 1.0f);
}

// Gemma 4's layer l as llama.cpp's converter stores the 26B-A4B: attention at the layer's own
// head size and kv heads (no attn_v on global layers: the keys are the values), q/k norms, the
// four norms around attention and FFN, the dense FFN, the router with its input scale, the
// experts with gate and up fused and a per-expert factor, the three norms of the MoE branch,
// the layer's output scale.
void plan_gemma4_block(Planner& p, const GenOptions& opt, int64_t l,
                       const std::function<std::string(const char*)>& n) {
  const ModelShape& s = opt.shape;
  const GgmlType wt = opt.type, et = opt.expert_type.value_or(wt);
  const bool swa = s.is_swa_layer(l);
  const int64_t hd = swa ? s.head_dim_swa : s.head_dim;
  const int64_t q_dim = s.n_head * hd, kv_dim = (swa ? s.n_head_kv : s.n_head_kv_global) * hd;
  p.gain(n("attn_norm.weight"), s.n_embd);
  p.add(n("attn_q.weight"), wt, {s.n_embd, q_dim}, inv_sqrt(s.n_embd));
  p.add(n("attn_k.weight"), wt, {s.n_embd, kv_dim}, inv_sqrt(s.n_embd));
  if (swa) p.add(n("attn_v.weight"), wt, {s.n_embd, kv_dim}, inv_sqrt(s.n_embd));
  p.add(n("attn_output.weight"), wt, {q_dim, s.n_embd}, inv_sqrt(q_dim));
  p.gain(n("attn_q_norm.weight"), hd);
  p.gain(n("attn_k_norm.weight"), hd);
  p.gain(n("post_attention_norm.weight"), s.n_embd);
  p.gain(n("ffn_norm.weight"), s.n_embd);
  p.add(n("ffn_gate.weight"), wt, {s.n_embd, s.n_ff}, inv_sqrt(s.n_embd));
  p.add(n("ffn_up.weight"), wt, {s.n_embd, s.n_ff}, inv_sqrt(s.n_embd));
  p.add(n("ffn_down.weight"), wt, {s.n_ff, s.n_embd}, inv_sqrt(s.n_ff));
  p.gain(n("post_ffw_norm_1.weight"), s.n_embd);
  p.gain(n("pre_ffw_norm_2.weight"), s.n_embd);
  p.gain(n("post_ffw_norm_2.weight"), s.n_embd);
  p.gain(n("post_ffw_norm.weight"), s.n_embd);
  // The router reads rms_norm(x) * scale / sqrt(n_embd), whose entries are ~1/sqrt(n_embd):
  // std router_scale (not / sqrt(n_embd)) gives logits of std ~router_scale.
  p.add(n("ffn_gate_inp.weight"), GgmlType::F32, {s.n_embd, s.n_expert}, opt.router_scale);
  p.gain(n("ffn_gate_inp.scale"), s.n_embd);
  p.add(expert_tensor_name((int)l, ExpertTensor::GateUp), et,
        {s.n_embd, 2 * s.n_ff_exp, s.n_expert}, inv_sqrt(s.n_embd));
  p.add(expert_tensor_name((int)l, ExpertTensor::Down), et, {s.n_ff_exp, s.n_embd, s.n_expert},
        inv_sqrt(s.n_ff_exp));
  p.gain(expert_tensor_name((int)l, ExpertTensor::Down, "scale"), s.n_expert);
  p.gain(n("layer_output_scale.weight"), 1);
}

// Multi-head latent attention as current llama.cpp converters store it (attn_kv_b split into
// attn_k_b, each head's key block transposed, and attn_v_b).
void plan_mla(Planner& p, const ModelShape& s, GgmlType wt,
              const std::function<std::string(const char*)>& n) {
  const int64_t q_dim = s.n_head * (s.qk_nope + s.qk_rope);
  if (s.q_lora_rank > 0) {
    p.add(n("attn_q_a.weight"), wt, {s.n_embd, s.q_lora_rank}, inv_sqrt(s.n_embd));
    p.gain(n("attn_q_a_norm.weight"), s.q_lora_rank);
    p.add(n("attn_q_b.weight"), wt, {s.q_lora_rank, q_dim}, inv_sqrt(s.q_lora_rank));
  } else {
    p.add(n("attn_q.weight"), wt, {s.n_embd, q_dim}, inv_sqrt(s.n_embd));
  }
  p.add(n("attn_kv_a_mqa.weight"), wt, {s.n_embd, s.kv_lora_rank + s.qk_rope}, inv_sqrt(s.n_embd));
  p.gain(n("attn_kv_a_norm.weight"), s.kv_lora_rank);
  // attn_k_b is stored transposed: as the decompression latent -> key (attn_kv_b's key rows)
  // its fan-in is kv_lora_rank, not the stored row length.
  p.add(n("attn_k_b.weight"), wt, {s.qk_nope, s.kv_lora_rank, s.n_head}, inv_sqrt(s.kv_lora_rank));
  p.add(n("attn_v_b.weight"), wt, {s.kv_lora_rank, s.v_head_dim, s.n_head},
        inv_sqrt(s.kv_lora_rank));
  p.add(n("attn_output.weight"), wt, {s.n_head * s.v_head_dim, s.n_embd},
        inv_sqrt(s.n_head * s.v_head_dim));
}

// A gated DeltaNet layer as llama.cpp's converters store it (qwen3next: one ssm_ba of
// [beta | alpha] per key head; qwen35moe: ssm_beta and ssm_alpha). The convolution kernel and
// the per-head vectors stay F32, as llama.cpp keeps them.
void plan_delta_net(Planner& p, const ModelShape& s, GgmlType wt,
                    const std::function<std::string(const char*)>& n) {
  const int64_t key_dim = s.ssm_k_heads * s.ssm_state, value_dim = s.ssm_v_heads * s.ssm_state;
  const int64_t channels = 2 * key_dim + value_dim;
  p.add(n("attn_qkv.weight"), wt, {s.n_embd, channels}, inv_sqrt(s.n_embd));
  p.add(n("attn_gate.weight"), wt, {s.n_embd, value_dim}, inv_sqrt(s.n_embd));
  if (s.arch == GenArch::Qwen3Next) {
    p.add(n("ssm_ba.weight"), wt, {s.n_embd, 2 * s.ssm_v_heads}, inv_sqrt(s.n_embd));
  } else {
    p.add(n("ssm_beta.weight"), wt, {s.n_embd, s.ssm_v_heads}, inv_sqrt(s.n_embd));
    p.add(n("ssm_alpha.weight"), wt, {s.n_embd, s.ssm_v_heads}, inv_sqrt(s.n_embd));
  }
  p.add(n("ssm_conv1d.weight"), GgmlType::F32, {s.ssm_conv, channels}, inv_sqrt(s.ssm_conv));
  p.bias(n("ssm_dt.bias"), s.ssm_v_heads);
  p.add(n("ssm_a"), GgmlType::F32, {s.ssm_v_heads}, 0.5f, InitKind::SsmDecay);
  p.gain(n("ssm_norm.weight"), s.ssm_state);
  p.add(n("ssm_out.weight"), wt, {value_dim, s.n_embd}, inv_sqrt(value_dim));
}

// The full-attention layer of the hybrids: attn_q holds [q | gate] per head.
void plan_gated_attention(Planner& p, const ModelShape& s, GgmlType wt,
                          const std::function<std::string(const char*)>& n) {
  const int64_t q_dim = s.n_head * s.head_dim, kv_dim = s.n_head_kv * s.head_dim;
  p.add(n("attn_q.weight"), wt, {s.n_embd, 2 * q_dim}, inv_sqrt(s.n_embd));
  p.add(n("attn_k.weight"), wt, {s.n_embd, kv_dim}, inv_sqrt(s.n_embd));
  p.add(n("attn_v.weight"), wt, {s.n_embd, kv_dim}, inv_sqrt(s.n_embd));
  p.gain(n("attn_q_norm.weight"), s.head_dim);
  p.gain(n("attn_k_norm.weight"), s.head_dim);
  p.add(n("attn_output.weight"), wt, {q_dim, s.n_embd}, inv_sqrt(q_dim));
}

// Router (+ selection bias), stacked experts and the shared expert(s) of MoE layer l.
void plan_moe(Planner& p, const GenOptions& opt, int64_t l,
              const std::function<std::string(const char*)>& n) {
  const ModelShape& s = opt.shape;
  const GgmlType wt = opt.type, et = opt.expert_type.value_or(wt);
  // Routers stay F32, as llama.cpp's quantizer leaves ffn_gate_inp alone.
  p.add(n("ffn_gate_inp.weight"), GgmlType::F32, {s.n_embd, s.n_expert},
        opt.router_scale * inv_sqrt(s.n_embd));
  if (s.sigmoid) p.bias(n("exp_probs_b.bias"), s.n_expert);
  const bool oss = s.arch == GenArch::GptOss;
  if (oss) p.bias(n("ffn_gate_inp.bias"), s.n_expert);
  p.add(expert_tensor_name((int)l, ExpertTensor::Gate), et, {s.n_embd, s.n_ff_exp, s.n_expert},
        inv_sqrt(s.n_embd));
  p.add(expert_tensor_name((int)l, ExpertTensor::Up), et, {s.n_embd, s.n_ff_exp, s.n_expert},
        inv_sqrt(s.n_embd));
  p.add(expert_tensor_name((int)l, ExpertTensor::Down), et, {s.n_ff_exp, s.n_embd, s.n_expert},
        inv_sqrt(s.n_ff_exp));
  if (oss) {  // expert biases, F32 rows [n_expert][n]
    const auto exp_bias = [&](ExpertTensor t, int64_t rows) {
      p.add(expert_tensor_name((int)l, t, "bias"), GgmlType::F32, {rows, s.n_expert}, 0.1f);
    };
    exp_bias(ExpertTensor::Gate, s.n_ff_exp);
    exp_bias(ExpertTensor::Up, s.n_ff_exp);
    exp_bias(ExpertTensor::Down, s.n_embd);
  }
  if (s.shared_expert()) {
    if (s.gated_shared_expert())
      p.add(n("ffn_gate_inp_shexp.weight"), GgmlType::F32, {s.n_embd}, inv_sqrt(s.n_embd));
    p.add(n("ffn_gate_shexp.weight"), wt, {s.n_embd, s.n_ff_shexp}, inv_sqrt(s.n_embd));
    p.add(n("ffn_up_shexp.weight"), wt, {s.n_embd, s.n_ff_shexp}, inv_sqrt(s.n_embd));
    p.add(n("ffn_down_shexp.weight"), wt, {s.n_ff_shexp, s.n_embd}, inv_sqrt(s.n_ff_shexp));
  }
}

// One decoder block: layer l of the trunk, or (l >= n_layer) a next-token-prediction block,
// which is a MoE block plus its nextn projections.
void plan_block(Planner& p, const GenOptions& opt, int64_t l) {
  const ModelShape& s = opt.shape;
  const GgmlType wt = opt.type;
  const std::function<std::string(const char*)> n = [l](const char* what) {
    return fmt::format("blk.{}.{}", l, what);
  };
  if (s.gemma4()) return plan_gemma4_block(p, opt, l, n);
  const bool phi = s.arch == GenArch::PhiMoe;
  p.gain(n("attn_norm.weight"), s.n_embd);
  if (phi) p.bias(n("attn_norm.bias"), s.n_embd);
  if (s.mla())
    plan_mla(p, s, wt, n);
  else if (s.recurrent_layer(l))
    plan_delta_net(p, s, wt, n);
  else if (s.hybrid())
    plan_gated_attention(p, s, wt, n);
  else
    plan_gqa(p, s, wt, n);
  const bool post_attn_norm = s.arch == GenArch::Glm4Moe || s.arch == GenArch::GptOss || s.hybrid();
  p.gain(n(post_attn_norm ? "post_attention_norm.weight" : "ffn_norm.weight"), s.n_embd);
  if (phi) p.bias(n("ffn_norm.bias"), s.n_embd);
  if (s.moe_layer(l)) {
    plan_moe(p, opt, l, n);
  } else {
    p.add(n("ffn_gate.weight"), wt, {s.n_embd, s.n_ff}, inv_sqrt(s.n_embd));
    p.add(n("ffn_up.weight"), wt, {s.n_embd, s.n_ff}, inv_sqrt(s.n_embd));
    p.add(n("ffn_down.weight"), wt, {s.n_ff, s.n_embd}, inv_sqrt(s.n_ff));
  }
  if (l >= s.n_layer) {
    p.add(n("nextn.eh_proj.weight"), wt, {2 * s.n_embd, s.n_embd}, inv_sqrt(2 * s.n_embd));
    p.gain(n("nextn.enorm.weight"), s.n_embd);
    p.gain(n("nextn.hnorm.weight"), s.n_embd);
    p.gain(n("nextn.shared_head_norm.weight"), s.n_embd);
  }
}

}  // namespace

std::vector<PlannedTensor> plan_tensors(const GenOptions& opt) {
  const ModelShape& s = opt.shape;
  s.validate();
  const GgmlType wt = opt.type;
  Planner p{opt, {}};
  // Embedding rows are looked up, not multiplied, so unit variance keeps the residual O(1);
  // Gemma multiplies them by sqrt(n_embd), so its rows are drawn that much smaller.
  p.add("token_embd.weight", opt.embd_type.value_or(wt), {s.n_embd, s.n_vocab},
        s.gemma4() ? inv_sqrt(s.n_embd) : 1.0f);
  const bool phi = s.arch == GenArch::PhiMoe;
  if (phi) {
    // LongRoPE's per-pair factors (synthetic: 1 for the short context, rising to 32 for the
    // long one; the real ones are in the model's config).
    p.add("rope_factors_long.weight", GgmlType::F32, {s.head_dim / 2}, 0.0f, InitKind::LongRope);
    p.add("rope_factors_short.weight", GgmlType::F32, {s.head_dim / 2}, 0.0f, InitKind::ShortRope);
  }
  if (s.gemma4()) {
    // One table of divisors for the global layers' proportional RoPE.
    p.add("rope_freqs.weight", GgmlType::F32, {s.head_dim / 2}, 0.0f, InitKind::ProportionalRope);
    p.out.back().rotated = (int64_t)(s.head_dim * s.rope_partial_global) / 2;
  }
  for (int64_t l = 0; l < s.n_layer + s.n_nextn; ++l) plan_block(p, opt, l);
  p.gain("output_norm.weight", s.n_embd);
  if (phi) p.bias("output_norm.bias", s.n_embd);
  // Gemma ties the output head to the embedding (no output.weight, as in the released files).
  if (!s.gemma4())
    p.add("output.weight", opt.output_type.value_or(wt), {s.n_embd, s.n_vocab}, inv_sqrt(s.n_embd));
  if (phi) p.bias("output.bias", s.n_vocab);
  return std::move(p.out);
}

void generate_row(const PlannedTensor& t, uint64_t seed, int64_t row, float* out) {
  if (t.init == InitKind::ProportionalRope) {
    for (int64_t i = 0; i < t.row_len(); ++i) out[i] = i < t.rotated ? 1.0f : 1e30f;
    return;
  }
  if (t.init == InitKind::LongRope || t.init == InitKind::ShortRope) {
    const int64_t n = t.row_len();
    for (int64_t i = 0; i < n; ++i) {
      const float x = n > 1 ? (float)i / (float)(n - 1) : 0.0f;
      out[i] = t.init == InitKind::LongRope ? 1.0f + 31.0f * x * x : 1.0f + 0.05f * x;
    }
    return;
  }
  const uint64_t st = row_stream_seed(seed, stable_hash(t.name), row);
  const float mean = t.init == InitKind::Gain ? 1.0f : 0.0f;
  fill_normal(st, out, t.row_len(), mean, t.std);
  if (t.init == InitKind::SsmDecay)
    for (int64_t i = 0; i < t.row_len(); ++i) out[i] = -std::exp(out[i]);
}

namespace {

// "blk.7.ffn_up_exps.weight" -> "ffn_up_exps.weight"; "" for a tensor that is not a routed
// expert's.
std::string expert_repeat_key(const std::string& name) {
  if (name.find("_exps") == std::string::npos || name.rfind("blk.", 0) != 0) return "";
  const size_t dot = name.find('.', 4);
  return dot == std::string::npos ? "" : name.substr(dot + 1);
}

}  // namespace

GenSummary generate_model(const GenOptions& opt, const std::string& path,
                          const GenProgress& progress) {
  const double t0 = now_seconds();
  std::vector<PlannedTensor> plan = plan_tensors(opt);
  if (opt.threads < 1) fail("gen-model: --threads must be at least 1 (got {})", opt.threads);
  auto pool = std::make_shared<ThreadPool>(opt.threads);

  GgufWriter w;
  write_metadata(w, opt);
  GenSummary sum;
  // --repeat-experts: the first MoE layer's encoded expert tensors, by name with the layer
  // number left out. The writer asks for tensors in order, one at a time.
  auto first_experts = std::make_shared<std::map<std::string, std::vector<uint8_t>>>();
  for (const PlannedTensor& t : plan) {
    sum.n_tensors++;
    sum.n_params += t.row_len() * t.n_rows();
    sum.tensor_bytes += t.nbytes();
    if (t.type != t.requested) sum.n_fallback++;
    const uint64_t seed = opt.seed;
    const std::string repeat_key = opt.repeat_experts ? expert_repeat_key(t.name) : "";
    w.add_tensor(t.name, t.type, t.dims,
                 [t, seed, pool, repeat_key, first_experts](uint8_t* dst, uint64_t nbytes) {
                   const size_t rb = row_bytes(t.type, t.row_len());
                   if (nbytes != rb * (uint64_t)t.n_rows())
                     fail("gen-model: writer asked for {} bytes of tensor '{}', expected {}",
                          nbytes, t.name, rb * (uint64_t)t.n_rows());
                   if (!repeat_key.empty()) {
                     auto it = first_experts->find(repeat_key);
                     if (it != first_experts->end() && it->second.size() == nbytes) {
                       std::memcpy(dst, it->second.data(), nbytes);
                       return;
                     }
                   }
                   pool->parallel_for(t.n_rows(), [&](int64_t begin, int64_t end, int) {
                     std::vector<float> buf((size_t)t.row_len());
                     for (int64_t r = begin; r < end; ++r) {
                       generate_row(t, seed, r, buf.data());
                       encode_row(t.type, buf.data(), dst + (size_t)r * rb, t.row_len());
                     }
                   });
                   if (!repeat_key.empty()) (*first_experts)[repeat_key].assign(dst, dst + nbytes);
                 });
  }
  w.write(path, progress);
  std::error_code ec;
  const auto fsz = std::filesystem::file_size(path, ec);
  sum.file_bytes = ec ? 0 : (uint64_t)fsz;
  sum.seconds = now_seconds() - t0;
  return sum;
}

}  // namespace moeflow::gen
