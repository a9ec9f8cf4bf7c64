#include "tokenizer/pretokenizer.h"

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace moeflow {

namespace {

// GPT-2 (also GPT-NeoX, OLMo, MPT, ...).
const char* kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
// Llama-3 / cl100k (DBRX): digits in groups of up to three.
const char* kLlama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen2: like Llama-3 but every digit alone.
const char* kQwen2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen3.5 (tokenizer.json of Qwen3.5/3.6): Qwen2's with combining marks (\p{M}) kept inside
// words (and out of the punctuation runs), so a decomposed accent stays with its letter.
const char* kQwen35 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* kCjk = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+";
// o200k (GPT-4o, gpt-oss): words split at lower-to-upper case changes, an optional contraction
// kept on the word, digits in groups of up to three, '/' and line breaks after punctuation.
// The pattern of the encoding itself (llama.cpp substitutes an ASCII-only approximation).
const char* kO200k =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

}  // namespace

std::vector<std::string> PreTokenizer::patterns_for(const std::string& pre) {
  if (pre == "gpt-2" || pre == "default" || pre == "olmo" || pre == "mpt" || pre == "jais" ||
      pre == "phi-2" || pre == "gpt2" || pre == "gptneox" || pre == "gpt-neox" || pre == "")
    return {kGpt2};
  if (pre == "starcoder" || pre == "refact") return {"\\p{N}", kGpt2};
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "dbrx" ||
      pre == "smaug-bpe" || pre == "falcon3" || pre == "pixtral" || pre == "megrez" ||
      pre == "minerva-7b" ||
      // GLM-4 / GLM-4.5 (llama.cpp's CHATGLM4: the same pattern with the contractions' case
      // spelled out instead of (?i:...)).
      pre == "chatglm-bpe" || pre == "glm4" || pre == "glm5")
    return {kLlama3};
  if (pre == "gpt-4o" || pre == "llama4" || pre == "minimax-m2" || pre == "kanana2" ||
      pre == "talkie")
    return {kO200k};
  if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "stablelm2" || pre == "hunyuan")
    return {kQwen2};
  if (pre == "qwen35") return {kQwen35};
  if (pre == "deepseek-llm")
    return {
        "[\\r\\n]",
        "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293"
        "\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c"
        "\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5"
        "\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
        "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59"
        "\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc"
        "\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
        "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
        "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee"
        "\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e"
        "\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f"
        "\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
        "\U000118a0-\U000118df\U0001e900-\U0001e943]+",
        "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
        "\\s+$",
        kCjk,
        "\\p{N}+",
    };
  if (pre == "deepseek-coder") return {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kCjk, "\\p{N}"};
  if (pre == "deepseek-v3" || pre == "deepseek3-llm" || pre == "kimi-k2")
    return {"\\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
            "[!\"#$%&'()*+,\\-./"
            ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
            " ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
  return {};
}

PreTokenizer::PreTokenizer(const std::string& pre_name, bool strict) {
  auto pats = patterns_for(pre_name);
  if (pats.empty()) {
    if (strict) fail("unsupported BPE pre-tokenizer '{}' (tokenizer.ggml.pre)", pre_name);
    known_ = false;
    pats = {kGpt2};
  }
  // Vocabularies converted from tiktoken ranks: tiktoken takes a whole word that is a token
  // before merging (HF's ignore_merges).
  ignore_merges_ = pre_name == "llama-bpe" || pre_name == "llama3" || pre_name == "llama-v3" ||
                   pre_name == "glm4" || pre_name == "glm5" || pre_name == "gpt-4o";
  for (auto& p : pats) regexes_.emplace_back(p);
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  const std::vector<uint32_t> cps = unicode::decode(text);
  std::vector<std::pair<size_t, size_t>> pieces{{0, cps.size()}}, next;
  if (cps.empty()) pieces.clear();
  for (const Regex& re : regexes_) {
    next.clear();
    for (auto [b, e] : pieces) re.split(cps.data(), b, e, next);
    pieces.swap(next);
  }
  std::vector<std::string> words;
  words.reserve(pieces.size());
  for (auto [b, e] : pieces) {
    std::string w;
    for (size_t i = b; i < e; ++i) unicode::append_utf8(w, cps[i]);
    words.push_back(std::move(w));
  }
  return words;
}

}  // namespace moeflow
