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
                int64_t heads_kv, int64_t head_dim, int64_t ff, int64_t ff_exp,
                int64_t ff_shexp, int64_t experts, int64_t used, int64_t ctx, double rope,
                double eps) {
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

// gpt-oss: the window on every other layer and the model's YaRN (factor 32 over 4096 positions).
ModelShape oss(ModelShape s, int64_t window) {
  s.n_swa = window;
  s.rope_yarn_factor = 32.0;
  s.rope_n_ctx_orig = 4096;
  return s;
}

// Phi-3.5-MoE: the window on every layer and LongRoPE over the original context.
ModelShape phi(ModelShape s, int64_t window, int64_t n_ctx_orig) {
  s.n_swa = window;
  s.rope_n_ctx_orig = n_ctx_orig;
  return s;
}

// tiny: fast unit tests (n_embd 64: K-quants fall back, as llama.cpp does for such rows).
// small: every row a multiple of 256 so all K-quants apply. The named presets are the released
// models' config.json values.
const std::vector<PresetRow>& table() {
  using A = GenArch;
  static const std::vector<PresetRow> rows = {
      {A::Mixtral, "tiny", make(A::Mixtral, 512, 64, 4, 4, 2, 16, 128, 128, 0, 8, 2, 512, 1e6, 1e-5)},
      {A::Mixtral, "small", make(A::Mixtral, 1024, 256, 4, 8, 4, 32, 512, 512, 0, 8, 2, 2048, 1e6, 1e-5)},
      {A::Mixtral, "8x7b",
       make(A::Mixtral, 32000, 4096, 32, 32, 8, 128, 14336, 14336, 0, 8, 2, 32768, 1e6, 1e-5)},
      {A::Qwen2Moe, "tiny", make(A::Qwen2Moe, 512, 64, 4, 4, 4, 16, 128, 64, 128, 8, 4, 512, 1e6, 1e-6)},
      {A::Qwen2Moe, "small",
       make(A::Qwen2Moe, 1024, 256, 4, 8, 8, 32, 512, 256, 512, 16, 4, 2048, 1e6, 1e-6)},
      {A::Qwen2Moe, "a2.7b",
       make(A::Qwen2Moe, 151936, 2048, 24, 16, 16, 128, 5632, 1408, 5632, 60, 4, 8192, 1e6, 1e-6)},
      {A::Qwen3Moe, "tiny", make(A::Qwen3Moe, 512, 64, 4, 4, 2, 32, 192, 64, 0, 8, 2, 512, 1e6, 1e-6)},
      {A::Qwen3Moe, "small",
       make(A::Qwen3Moe, 1024, 256, 4, 8, 4, 64, 768, 256, 0, 16, 4, 2048, 1e6, 1e-6)},
      {A::Qwen3Moe, "30b-a3b",
       make(A::Qwen3Moe, 151936, 2048, 48, 32, 4, 128, 6144, 768, 0, 128, 8, 40960, 1e6, 1e-6)},
      {A::Olmoe, "tiny", make(A::Olmoe, 512, 64, 4, 4, 4, 16, 64, 64, 0, 8, 2, 512, 1e4, 1e-5)},
      {A::Olmoe, "small", make(A::Olmoe, 1024, 256, 4, 8, 8, 32, 256, 256, 0, 16, 4, 2048, 1e4, 1e-5)},
      {A::Olmoe, "1b-7b",
       make(A::Olmoe, 50304, 2048, 16, 16, 16, 128, 1024, 1024, 0, 64, 8, 4096, 1e4, 1e-5)},
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
       oss(make(A::GptOss, 201088, 2880, 36, 64, 8, 64, 2880, 2880, 0, 128, 4, 131072, 150000, 1e-5),
           128)},
      {A::PhiMoe, "tiny",
       phi(make(A::PhiMoe, 512, 64, 4, 4, 2, 16, 128, 128, 0, 8, 2, 2048, 1e4, 1e-5), 16, 64)},
      {A::PhiMoe, "small",
       phi(make(A::PhiMoe, 1024, 256, 4, 8, 2, 32, 512, 512, 0, 16, 2, 8192, 1e4, 1e-5), 32, 256)},
      {A::PhiMoe, "3.5-moe",
       phi(make(A::PhiMoe, 32064, 4096, 32, 32, 8, 128, 6400, 6400, 0, 16, 2, 131072, 1e4, 1e-5),
           131072, 4096)},
  };
  return rows;
}

}  // namespace

QkNorm ModelShape::qk_norm() const {
  switch (arch) {
    case GenArch::Qwen3Moe: return QkNorm::PerHead;
    case GenArch::Olmoe: return QkNorm::Full;
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
  if (head_dim % 2 != 0) fail("gen-model --arch {}: head_dim {} must be even for RoPE", a, head_dim);
  if (n_expert_used > n_expert)
    fail("gen-model --arch {}: --expert-used {} exceeds --experts {}", a, n_expert_used, n_expert);
  // The synthetic SentencePiece vocab needs <unk>, <s>, </s> and the 256 byte tokens.
  if (n_vocab < 260) fail("gen-model: --vocab {} is too small (minimum 260)", n_vocab);
  if (arch == GenArch::Olmoe && (n_head * head_dim != n_embd || n_head_kv != n_head))
    fail("gen-model --arch olmoe: llama.cpp needs n_head*head_dim == n_embd and n_head_kv == n_head");
  if (arch == GenArch::Mixtral && n_ff != n_ff_exp)
    fail("gen-model --arch mixtral: feed_forward_length must equal the expert length");
  if (arch == GenArch::PhiMoe && (n_head * head_dim != n_embd || n_ff != n_ff_exp))
    fail("gen-model --arch phimoe: llama.cpp needs n_head*head_dim == n_embd and "
         "feed_forward_length == the expert length");
}

GenArch parse_arch(const std::string& name) {
  if (name == "mixtral" || name == "llama") return GenArch::Mixtral;
  if (name == "qwen2moe") return GenArch::Qwen2Moe;
  if (name == "qwen3moe") return GenArch::Qwen3Moe;
  if (name == "olmoe") return GenArch::Olmoe;
  if (name == "gpt-oss" || name == "gpt_oss") return GenArch::GptOss;
  if (name == "phimoe") return GenArch::PhiMoe;
  fail("gen-model: unknown --arch '{}' (choose mixtral, qwen2moe, qwen3moe, olmoe, gpt-oss or "
       "phimoe)", name);
}

const char* arch_cli_name(GenArch a) {
  switch (a) {
    case GenArch::Mixtral: return "mixtral";
    case GenArch::Qwen2Moe: return "qwen2moe";
    case GenArch::Qwen3Moe: return "qwen3moe";
    case GenArch::Olmoe: return "olmoe";
    case GenArch::GptOss: return "gpt-oss";
    case GenArch::PhiMoe: return "phimoe";
  }
  return "?";
}

const char* arch_gguf_name(GenArch a) {
  switch (a) {
    case GenArch::Mixtral: return "llama";
    case GenArch::Qwen2Moe: return "qwen2moe";
    case GenArch::Qwen3Moe: return "qwen3moe";
    case GenArch::Olmoe: return "olmoe";
    case GenArch::GptOss: return "gpt-oss";
    case GenArch::PhiMoe: return "phimoe";
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
