#include "model/arch.h"

#include <array>

#include "core/error.h"

namespace moeflow {
namespace {

// "llama" covers Mixtral (expert_count > 0) and dense Llama; the GGUF converter has already
// permuted Q/K rows for interleaved-pair RoPE.
constexpr std::array<ArchSpec, 4> kArchs = {{
    {"llama", RopeStyle::Normal, QkNorm::None, false, false, true},
    {"qwen2moe", RopeStyle::NeoX, QkNorm::None, true, true, false},
    {"qwen3moe", RopeStyle::NeoX, QkNorm::PerHead, false, false, true},
    {"olmoe", RopeStyle::NeoX, QkNorm::Full, false, false, false},
}};

}  // namespace

std::string known_arch_names() {
  std::string s;
  for (const auto& a : kArchs) {
    if (!s.empty()) s += ", ";
    s += a.name;
  }
  return s;
}

const ArchSpec& find_arch(const std::string& name) {
  for (const auto& a : kArchs)
    if (name == a.name) return a;
  fail("unsupported architecture '{}' (general.architecture); supported: {}", name,
       known_arch_names());
}

}  // namespace moeflow
