#include "model/gen/model_presets.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace moeflow::gen {
namespace {

struct PresetRow {
  GenArch arch;
  const char* name;
  ModelShape shape;
};

ModelShape make(GenArch a, int64_t vocab, int64_t embd, int64_t layers, int64_t heads,
                int64_t heads_kv, int64_t head_dim, int64_t ff, int64_t ff_exp, int64_t ff_shexp,
                int64_t experts, int64_t used, int64_t ctx, double rope, double eps) {
  ModelShape s;
  s.arch = a;
  s.n_vocab = vocab;
  s.n_embd = embd;
  s.n_layer = layers;
  s.n_head = heads;
  s.n_head_kv = heads_kv;
  s.head_dim = head_dim;
  s.n_ff = ff;
  s.n_ff_exp = ff_exp;
  s.n_ff_shexp = ff_shexp;
  s.n_expert = experts;
  s.n_expert_used = used;
  s.n_ctx = ctx;
  s.rope_base = rope;
  s.rms_eps = eps;
  return s;
}

struct MlaDims {
  int64_t q_lora, kv_lora, nope, rope, v;
};
struct DsRouting {
  bool sigmoid, norm;
  double scale;
  int64_t n_group, topk_group;
};
struct Yarn {
  double factor;
  int64_t orig_ctx;
  double mscale_all_dim;
};

// DeepSeek-V2/V3 layout: MLA, `lead` dense layers of ff, `shared` experts of ff_exp.
ModelShape deepseek(int64_t vocab, int64_t embd, int64_t layers, int64_t heads, MlaDims m,
                    int64_t ff, int64_t ff_exp, int64_t experts, int64_t used, int64_t shared,
                    int64_t lead, DsRouting r, Yarn y, int64_t ctx, double rope_base) {
  ModelShape s = make(GenArch::Deepseek2, vocab, embd, layers, heads, heads, m.nope + m.rope, ff,
                      ff_exp, ff_exp * shared, experts, used, ctx, rope_base, 1e-6);
  s.q_lora_rank = m.q_lora;
  s.kv_lora_rank = m.kv_lora;
  s.qk_nope = m.nope;
  s.qk_rope = m.rope;
  s.v_head_dim = m.v;
  s.n_rot = m.rope;
  s.n_expert_shared = shared;
  s.n_layer_dense_lead = lead;
  s.sigmoid = r.sigmoid;
  s.norm_topk = r.norm;
  s.weights_scale = r.scale;
  s.n_group = r.n_group;
  s.topk_group = r.topk_group;
  s.yarn_factor = y.factor;
  s.yarn_orig_ctx = y.orig_ctx;
  s.yarn_mscale_all_dim = y.mscale_all_dim;
  return s;
}

// GLM-4.5 layout: GQA with half of each head rotating, biases, one shared expert, sigmoid
// routing with the selection bias and renormalised weights, `nextn` MTP blocks.
ModelShape glm(int64_t vocab, int64_t embd, int64_t layers, int64_t heads, int64_t heads_kv,
               int64_t head_dim, int64_t ff, int64_t ff_exp, int64_t experts, int64_t used,
               int64_t lead, double scale, bool qk_norm, int64_t nextn, int64_t ctx,
               double rope_base) {
  ModelShape s = make(GenArch::Glm4Moe, vocab, embd, layers, heads, heads_kv, head_dim, ff, ff_exp,
                      ff_exp, experts, used, ctx, rope_base, 1e-5);
  s.n_rot = head_dim / 2;
  s.n_expert_shared = 1;
  s.n_layer_dense_lead = lead;
  s.glm_qk_norm = qk_norm;
  s.n_nextn = nextn;
  s.sigmoid = true;
  s.norm_topk = true;
  s.weights_scale = scale;
  return s;
}

// MiniMax-M2 layout: GQA with half of each head rotating, RMSNorm over the whole q and k, every
// layer MoE without a shared expert, sigmoid routing with the selection bias and renormalised
// weights; feed_forward_length is the expert size (llama.cpp's converter writes both from
// intermediate_size).
ModelShape minimax(int64_t vocab, int64_t embd, int64_t layers, int64_t heads, int64_t heads_kv,
                   int64_t head_dim, int64_t n_rot, int64_t ff_exp, int64_t experts, int64_t used,
                   int64_t ctx, double rope_base) {
  ModelShape s = make(GenArch::MinimaxM2, vocab, embd, layers, heads, heads_kv, head_dim, ff_exp,
                      ff_exp, 0, experts, used, ctx, rope_base, 1e-6);
  s.n_rot = n_rot;
  s.sigmoid = true;
  s.norm_topk = true;
  return s;
}

// gpt-oss: the window on every other layer and the model's YaRN (factor 32 over 4096 positions).
ModelShape oss(ModelShape s, int64_t window) {
  s.n_swa = window;
  s.yarn_factor = 32.0;
  s.yarn_orig_ctx = 4096;
  return s;
}

// Phi-3.5-MoE: the window on every layer and LongRoPE over the original context.
ModelShape phi(ModelShape s, int64_t window, int64_t n_ctx_orig) {
  s.n_swa = window;
  s.rope_n_ctx_orig = n_ctx_orig;
  return s;
}

// Qwen3-Next / Qwen3.5 layout: 3 DeltaNet layers per full-attention layer, a quarter of each
// head rotating, a gated shared expert; qwen35moe's IMRoPE sections split the rotated pairs
// 11:11:10 as the released config's mrope_section [11, 11, 10] does.
ModelShape qwen_hybrid(ModelShape s, int64_t conv, int64_t state, int64_t k_heads,
                       int64_t v_heads) {
  s.ssm_conv = conv;
  s.ssm_state = state;
  s.ssm_k_heads = k_heads;
  s.ssm_v_heads = v_heads;
  s.full_attn_interval = 4;
  s.n_rot = s.head_dim / 4;
  if (s.arch == GenArch::Qwen35Moe) {
    const int pairs = (int)(s.n_rot / 2), a = pairs * 11 / 32;
    s.rope_sections = {a, a, pairs - 2 * a, 0};
  }
  return s;
}

// Gemma 4 (26B-A4B layout): see ModelShape. heads_kv is the sliding layers' kv heads.
ModelShape gemma4(int64_t vocab, int64_t embd, int64_t layers, int64_t heads, int64_t heads_kv,
                  int64_t heads_kv_global, int64_t head_dim_swa, int64_t head_dim, int64_t ff,
                  int64_t ff_exp, int64_t experts, int64_t used, int64_t window, int64_t period,
                  int64_t ctx) {
  ModelShape s = make(GenArch::Gemma4, vocab, embd, layers, heads, heads_kv, head_dim, ff, ff_exp,
                      0, experts, used, ctx, 1e6, 1e-6);
  s.head_dim_swa = head_dim_swa;
  s.n_head_kv_global = heads_kv_global;
  s.n_swa = window;
  s.swa_period = period;
  s.rope_base_swa = 1e4;
  s.rope_partial_global = 0.25;
  s.logit_softcap = 30.0;
  return s;
}

// tiny: fast unit tests (n_embd 64: K-quants fall back, as llama.cpp does for such rows).
// small: every row a multiple of 256 so all K-quants apply. The named presets are the released
// models' config.json values.
const std::vector<PresetRow>& table() {
  using A = GenArch;
  static const std::vector<PresetRow> rows = {
      {A::Mixtral, "tiny",
       make(A::Mixtral, 512, 64, 4, 4, 2, 16, 128, 128, 0, 8, 2, 512, 1e6, 1e-5)},
      {A::Mixtral, "small",
       make(A::Mixtral, 1024, 256, 4, 8, 4, 32, 512, 512, 0, 8, 2, 2048, 1e6, 1e-5)},
      {A::Mixtral, "8x7b",
       make(A::Mixtral, 32000, 4096, 32, 32, 8, 128, 14336, 14336, 0, 8, 2, 32768, 1e6, 1e-5)},
      {A::Qwen2Moe, "tiny",
       make(A::Qwen2Moe, 512, 64, 4, 4, 4, 16, 128, 64, 128, 8, 4, 512, 1e6, 1e-6)},
      {A::Qwen2Moe, "small",
       make(A::Qwen2Moe, 1024, 256, 4, 8, 8, 32, 512, 256, 512, 16, 4, 2048, 1e6, 1e-6)},
      {A::Qwen2Moe, "a2.7b",
       make(A::Qwen2Moe, 151936, 2048, 24, 16, 16, 128, 5632, 1408, 5632, 60, 4, 8192, 1e6, 1e-6)},
      {A::Qwen3Moe, "tiny",
       make(A::Qwen3Moe, 512, 64, 4, 4, 2, 32, 192, 64, 0, 8, 2, 512, 1e6, 1e-6)},
      {A::Qwen3Moe, "small",
       make(A::Qwen3Moe, 1024, 256, 4, 8, 4, 64, 768, 256, 0, 16, 4, 2048, 1e6, 1e-6)},
      {A::Qwen3Moe, "30b-a3b",
       make(A::Qwen3Moe, 151936, 2048, 48, 32, 4, 128, 6144, 768, 0, 128, 8, 40960, 1e6, 1e-6)},
      {A::Olmoe, "tiny", make(A::Olmoe, 512, 64, 4, 4, 4, 16, 64, 64, 0, 8, 2, 512, 1e4, 1e-5)},
      {A::Olmoe, "small",
       make(A::Olmoe, 1024, 256, 4, 8, 8, 32, 256, 256, 0, 16, 4, 2048, 1e4, 1e-5)},
      {A::Olmoe, "1b-7b",
       make(A::Olmoe, 50304, 2048, 16, 16, 16, 128, 1024, 1024, 0, 64, 8, 4096, 1e4, 1e-5)},
      // DeepSeek: tiny/small are V2-Lite-like (no q_lora, softmax, YaRN), *-v3 V3-like (q_lora,
      // sigmoid + selection bias, groups, renormalised and scaled weights).
      {A::Deepseek2, "tiny",
       deepseek(512, 64, 4, 4, {0, 32, 16, 8, 16}, 128, 32, 8, 2, 2, 1, {false, false, 1.0, 1, 1},
                {4.0, 64, 0.707}, 512, 1e4)},
      {A::Deepseek2, "tiny-v3",
       deepseek(512, 64, 4, 4, {24, 32, 16, 8, 16}, 128, 32, 8, 2, 1, 1, {true, true, 2.5, 4, 2},
                {4.0, 64, 1.0}, 512, 1e4)},
      {A::Deepseek2, "small",
       deepseek(1024, 256, 4, 8, {0, 256, 32, 32, 64}, 512, 256, 16, 4, 2, 1,
                {false, false, 1.0, 1, 1}, {4.0, 256, 0.707}, 2048, 1e4)},
      {A::Deepseek2, "small-v3",
       deepseek(1024, 256, 4, 8, {256, 256, 32, 32, 64}, 512, 256, 16, 4, 1, 1,
                {true, true, 2.5, 4, 2}, {4.0, 256, 1.0}, 2048, 1e4)},
      {A::Deepseek2, "v2-lite",
       deepseek(102400, 2048, 27, 16, {0, 512, 128, 64, 128}, 10944, 1408, 64, 6, 2, 1,
                {false, false, 1.0, 1, 1}, {40.0, 4096, 0.707}, 163840, 1e4)},
      {A::Deepseek2, "v2",
       deepseek(102400, 5120, 60, 128, {1536, 512, 128, 64, 128}, 12288, 1536, 160, 6, 2, 1,
                {false, false, 16.0, 8, 3}, {40.0, 4096, 0.707}, 163840, 1e4)},
      {A::Deepseek2, "v3",
       deepseek(129280, 7168, 61, 128, {1536, 512, 128, 64, 128}, 18432, 2048, 256, 8, 1, 3,
                {true, true, 2.5, 8, 4}, {40.0, 4096, 1.0}, 163840, 1e4)},
      {A::Deepseek2, "kimi-k2",
       deepseek(163840, 7168, 61, 64, {1536, 512, 128, 64, 128}, 18432, 2048, 384, 8, 1, 1,
                {true, true, 2.827, 1, 1}, {32.0, 4096, 1.0}, 131072, 5e4)},
      {A::Glm4Moe, "tiny", glm(512, 64, 4, 4, 2, 32, 128, 32, 8, 2, 1, 2.5, true, 1, 512, 1e4)},
      {A::Glm4Moe, "small",
       glm(1024, 256, 4, 8, 4, 64, 512, 256, 16, 4, 1, 2.5, true, 1, 2048, 1e4)},
      {A::Glm4Moe, "4.5-air",
       glm(151552, 4096, 46, 96, 8, 128, 10944, 1408, 128, 8, 1, 1.0, false, 1, 131072, 1e6)},
      {A::Glm4Moe, "4.5",
       glm(151552, 5120, 92, 96, 8, 128, 12288, 1536, 160, 8, 3, 2.5, true, 1, 131072, 1e6)},
      // gpt-oss: q is n_head * 64 wide whatever n_embd is; the window of the small shapes is
      // short enough for the tests' prompts to cross it.
      {A::GptOss, "tiny",
       oss(make(A::GptOss, 512, 64, 4, 4, 2, 32, 64, 64, 0, 8, 4, 131072, 150000, 1e-5), 8)},
      {A::GptOss, "small",
       oss(make(A::GptOss, 1024, 256, 4, 8, 2, 64, 256, 256, 0, 16, 4, 131072, 150000, 1e-5), 16)},
      {A::GptOss, "20b",
       oss(make(A::GptOss, 201088, 2880, 24, 64, 8, 64, 2880, 2880, 0, 32, 4, 131072, 150000, 1e-5),
           128)},
      {A::GptOss, "120b",
       oss(make(A::GptOss, 201088, 2880, 36, 64, 8, 64, 2880, 2880, 0, 128, 4, 131072, 150000,
                1e-5),
           128)},
      // Qwen3-Next-80B-A3B and Qwen3.6-35B-A3B: the released config.json values (rope_theta 1e7,
      // 262144 positions); tiny/small: one full-attention layer after three DeltaNet ones.
      {A::Qwen3Next, "tiny",
       qwen_hybrid(make(A::Qwen3Next, 512, 64, 4, 4, 2, 32, 128, 32, 64, 8, 2, 512, 1e7, 1e-6), 4,
                   16, 2, 4)},
      {A::Qwen3Next, "small",
       qwen_hybrid(
           make(A::Qwen3Next, 1024, 256, 4, 8, 2, 64, 512, 256, 256, 16, 4, 2048, 1e7, 1e-6), 4, 64,
           2, 4)},
      {A::Qwen3Next, "80b-a3b",
       qwen_hybrid(make(A::Qwen3Next, 151936, 2048, 48, 16, 2, 256, 5632, 512, 512, 512, 10, 262144,
                        1e7, 1e-6),
                   4, 128, 16, 32)},
      {A::Qwen35Moe, "tiny",
       qwen_hybrid(make(A::Qwen35Moe, 512, 64, 4, 4, 2, 32, 0, 32, 64, 8, 2, 512, 1e7, 1e-6), 4, 16,
                   2, 4)},
      {A::Qwen35Moe, "small",
       qwen_hybrid(make(A::Qwen35Moe, 1024, 256, 4, 8, 2, 64, 0, 256, 256, 16, 4, 2048, 1e7, 1e-6),
                   4, 64, 2, 4)},
      {A::Qwen35Moe, "35b-a3b",
       qwen_hybrid(
           make(A::Qwen35Moe, 248320, 2048, 40, 16, 2, 256, 0, 512, 512, 256, 8, 262144, 1e7, 1e-6),
           4, 128, 16, 32)},
      {A::PhiMoe, "tiny",
       phi(make(A::PhiMoe, 512, 64, 4, 4, 2, 16, 128, 128, 0, 8, 2, 2048, 1e4, 1e-5), 16, 64)},
      {A::PhiMoe, "small",
       phi(make(A::PhiMoe, 1024, 256, 4, 8, 2, 32, 512, 512, 0, 16, 2, 8192, 1e4, 1e-5), 32, 256)},
      // MiniMax-M2: q is n_head * head_dim wide (128 in tiny with n_embd 64, 6144 in m2 with 3072).
      {A::MinimaxM2, "tiny", minimax(512, 64, 4, 4, 2, 32, 16, 64, 8, 2, 512, 5e6)},
      {A::MinimaxM2, "small", minimax(1024, 256, 4, 8, 4, 64, 32, 256, 16, 4, 2048, 5e6)},
      {A::MinimaxM2, "m2", minimax(200064, 3072, 62, 48, 8, 128, 64, 1536, 256, 8, 196608, 5e6)},
      {A::PhiMoe, "3.5-moe",
       phi(make(A::PhiMoe, 32064, 4096, 32, 32, 8, 128, 6400, 6400, 0, 16, 2, 131072, 1e4, 1e-5),
           131072, 4096)},
      // Gemma 4: tiny/small alternate sliding and global layers, with windows the tests'
      // prompts cross; the global layers' cache rows are half the sliding ones' (as the 26B's).
      {A::Gemma4, "tiny", gemma4(512, 64, 4, 8, 4, 1, 16, 32, 128, 32, 8, 2, 8, 2, 512)},
      {A::Gemma4, "small", gemma4(1024, 256, 4, 8, 4, 1, 64, 128, 512, 256, 16, 4, 16, 2, 2048)},
      {A::Gemma4, "26b-a4b",
       gemma4(262144, 2816, 30, 16, 8, 2, 256, 512, 2112, 704, 128, 8, 1024, 6, 131072)},
  };
  return rows;
}

}  // namespace

QkNorm ModelShape::qk_norm() const {
  switch (arch) {
    case GenArch::Qwen3Moe:
    case GenArch::Qwen3Next:
    case GenArch::Qwen35Moe: return QkNorm::PerHead;
    case GenArch::Olmoe:
    case GenArch::MinimaxM2: return QkNorm::Full;
    case GenArch::Glm4Moe: return glm_qk_norm ? QkNorm::PerHead : QkNorm::None;
    default: return QkNorm::None;
  }
}

void ModelShape::validate() const {
  const char* a = arch_cli_name(arch);
  auto positive = [&](int64_t v, const char* what) {
    if (v <= 0) fail("gen-model --arch {}: {} must be positive (got {})", a, what, v);
  };
  positive(n_vocab, "vocabulary size (--vocab)");
  positive(n_embd, "n_embd");
  positive(n_layer, "layer count (--layers)");
  positive(n_head, "n_head");
  positive(n_head_kv, "n_head_kv");
  positive(head_dim, "head_dim");
  positive(n_ff_exp, "expert feed-forward length");
  positive(n_expert, "expert count (--experts)");
  positive(n_expert_used, "experts used per token (--expert-used)");
  positive(n_ctx, "context length");
  if (n_head % n_head_kv != 0)
    fail("gen-model --arch {}: n_head {} is not a multiple of n_head_kv {}", a, n_head, n_head_kv);
  if (head_dim % 2 != 0)
    fail("gen-model --arch {}: head_dim {} must be even for RoPE", a, head_dim);
  if (n_expert_used > n_expert)
    fail("gen-model --arch {}: --expert-used {} exceeds --experts {}", a, n_expert_used, n_expert);
  // The synthetic SentencePiece vocab needs <unk>, <s>, </s> and the 256 byte tokens.
  if (n_vocab < 260) fail("gen-model: --vocab {} is too small (minimum 260)", n_vocab);
  if (arch == GenArch::Olmoe && (n_head * head_dim != n_embd || n_head_kv != n_head))
    fail(
        "gen-model --arch olmoe: llama.cpp needs n_head*head_dim == n_embd and n_head_kv == "
        "n_head");
  if (arch == GenArch::Mixtral && n_ff != n_ff_exp)
    fail("gen-model --arch mixtral: feed_forward_length must equal the expert length");
  if (n_layer_dense_lead >= n_layer)
    fail("gen-model --arch {}: {} leading dense layers leave no MoE layer in --layers {}", a,
         n_layer_dense_lead, n_layer);
  if (n_layer_dense_lead > 0) positive(n_ff, "feed_forward_length of the dense layers");
  if (n_group < 1 || topk_group < 1 || topk_group > n_group || n_expert % n_group != 0 ||
      n_expert_used > topk_group * (n_expert / n_group))
    fail(
        "gen-model --arch {}: {} expert groups keeping {} do not fit --experts {} / --expert-used "
        "{}",
        a, n_group, topk_group, n_expert, n_expert_used);
  if (n_rot < 0 || n_rot > head_dim || n_rot % 2 != 0)
    fail("gen-model --arch {}: rotary dims {} must be even and at most head_dim {}", a, n_rot,
         head_dim);
  if (mla()) {
    positive(kv_lora_rank, "kv_lora_rank");
    positive(qk_nope, "qk_nope_head_dim");
    positive(qk_rope, "qk_rope_head_dim");
    positive(v_head_dim, "v_head_dim");
    if (q_lora_rank < 0) fail("gen-model --arch {}: q_lora_rank must not be negative", a);
  }
  if (hybrid()) {
    positive(ssm_conv, "DeltaNet convolution taps");
    positive(ssm_state, "DeltaNet head size");
    positive(ssm_k_heads, "DeltaNet key heads");
    positive(ssm_v_heads, "DeltaNet value heads");
    positive(full_attn_interval, "full-attention interval");
    if (ssm_conv < 2) fail("gen-model --arch {}: the convolution needs at least 2 taps", a);
    if (ssm_v_heads % ssm_k_heads != 0)
      fail("gen-model --arch {}: {} DeltaNet value heads are not a multiple of {} key heads", a,
           ssm_v_heads, ssm_k_heads);
    positive(n_ff_shexp, "shared expert feed-forward length");
  }
  if (gemma4()) {
    positive(head_dim_swa, "head_dim_swa");
    positive(n_head_kv_global, "n_head_kv_global");
    positive(swa_period, "sliding window period");
    positive(n_ff, "feed_forward_length of the dense FFN");
    if (n_head % n_head_kv_global != 0 || head_dim_swa % 2 != 0 ||
        (int64_t)(head_dim * rope_partial_global) % 2 != 0)
      fail(
          "gen-model --arch gemma4: the global layers' kv heads must divide n_head and the head "
          "sizes / rotary dims must be even");
  }
  if (arch == GenArch::PhiMoe && (n_head * head_dim != n_embd || n_ff != n_ff_exp))
    fail(
        "gen-model --arch phimoe: llama.cpp needs n_head*head_dim == n_embd and "
        "feed_forward_length == the expert length");
}

GenArch parse_arch(const std::string& name) {
  if (name == "mixtral" || name == "llama") return GenArch::Mixtral;
  if (name == "qwen2moe") return GenArch::Qwen2Moe;
  if (name == "qwen3moe") return GenArch::Qwen3Moe;
  if (name == "olmoe") return GenArch::Olmoe;
  if (name == "deepseek2") return GenArch::Deepseek2;
  if (name == "glm4moe") return GenArch::Glm4Moe;
  if (name == "gpt-oss" || name == "gpt_oss") return GenArch::GptOss;
  if (name == "phimoe") return GenArch::PhiMoe;
  if (name == "qwen3next") return GenArch::Qwen3Next;
  if (name == "qwen35moe") return GenArch::Qwen35Moe;
  if (name == "minimax-m2" || name == "minimax_m2") return GenArch::MinimaxM2;
  if (name == "gemma4") return GenArch::Gemma4;
  fail(
      "gen-model: unknown --arch '{}' (choose mixtral, qwen2moe, qwen3moe, olmoe, deepseek2, "
      "glm4moe, gpt-oss, phimoe, qwen3next, qwen35moe, minimax-m2 or gemma4)",
      name);
}

const char* arch_cli_name(GenArch a) {
  switch (a) {
    case GenArch::Mixtral: return "mixtral";
    case GenArch::Qwen2Moe: return "qwen2moe";
    case GenArch::Qwen3Moe: return "qwen3moe";
    case GenArch::Olmoe: return "olmoe";
    case GenArch::Deepseek2: return "deepseek2";
    case GenArch::Glm4Moe: return "glm4moe";
    case GenArch::GptOss: return "gpt-oss";
    case GenArch::PhiMoe: return "phimoe";
    case GenArch::Qwen3Next: return "qwen3next";
    case GenArch::Qwen35Moe: return "qwen35moe";
    case GenArch::MinimaxM2: return "minimax-m2";
    case GenArch::Gemma4: return "gemma4";
  }
  return "?";
}

const char* arch_gguf_name(GenArch a) {
  switch (a) {
    case GenArch::Mixtral: return "llama";
    case GenArch::Qwen2Moe: return "qwen2moe";
    case GenArch::Qwen3Moe: return "qwen3moe";
    case GenArch::Olmoe: return "olmoe";
    case GenArch::Deepseek2: return "deepseek2";
    case GenArch::Glm4Moe: return "glm4moe";
    case GenArch::GptOss: return "gpt-oss";
    case GenArch::PhiMoe: return "phimoe";
    case GenArch::Qwen3Next: return "qwen3next";
    case GenArch::Qwen35Moe: return "qwen35moe";
    case GenArch::MinimaxM2: return "minimax-m2";
    case GenArch::Gemma4: return "gemma4";
  }
  return "?";
}

std::vector<std::string> preset_names(GenArch a) {
  std::vector<std::string> out;
  for (const auto& r : table())
    if (r.arch == a) out.emplace_back(r.name);
  return out;
}

ModelShape find_preset(GenArch a, const std::string& preset) {
  for (const auto& r : table()) {
    if (r.arch == a && preset == r.name) {
      ModelShape s = r.shape;
      s.preset = preset;
      return s;
    }
  }
  fail("gen-model: --arch {} has no preset '{}' (choose {})", arch_cli_name(a), preset,
       fmt::join(preset_names(a), ", "));
}

}  // namespace moeflow::gen
