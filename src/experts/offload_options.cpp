#include "experts/offload_options.h"

#include <cctype>
#include <cmath>

namespace moeflow {

uint64_t parse_byte_size(const std::string& text, const std::string& option) {
  size_t i = 0;
  double v = 0;
  try {
    v = std::stod(text, &i);
  } catch (const std::exception&) {
    fail("{}: '{}' is not a size (examples: 3GiB, 512MiB, 1.5G)", option, text);
  }
  std::string unit = text.substr(i);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(0, 1);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mul = 0;
  if (unit.empty() || unit == "b") mul = 1;
  else if (unit == "k" || unit == "kib" || unit == "kb") mul = 1024.0;
  else if (unit == "m" || unit == "mib" || unit == "mb") mul = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib" || unit == "gb") mul = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib" || unit == "tb") mul = 1024.0 * 1024 * 1024 * 1024;
  else fail("{}: unknown unit '{}' in '{}' (use B, KiB, MiB, GiB, TiB)", option, unit, text);
  const double bytes = v * mul;
  if (!(bytes > 0) || !std::isfinite(bytes) || bytes > 1.8e19)
    fail("{}: size '{}' must be positive", option, text);
  return static_cast<uint64_t>(bytes);
}

uint64_t resolve_budget(const OffloadOptions& o, uint64_t total_expert_bytes) {
  if (!o.expert_cache.empty() && o.cache_rate > 0)
    fail("--expert-cache and --cache-rate are exclusive: give one of them");
  if (!o.expert_cache.empty()) return parse_byte_size(o.expert_cache, "--expert-cache");
  if (o.cache_rate > 0) {
    if (!(o.cache_rate <= 1.0)) fail("--cache-rate must be in (0, 1], got {}", o.cache_rate);
    return static_cast<uint64_t>(std::ceil(o.cache_rate * static_cast<double>(total_expert_bytes)));
  }
  if (o.cache_rate < 0) fail("--cache-rate must be in (0, 1], got {}", o.cache_rate);
  return 0;
}

int model_top_k(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  const int64_t k = f.get_int(arch + ".expert_used_count");
  MOEFLOW_CHECK(k >= 1 && k <= 1024, "{}: {}.expert_used_count = {} is not a valid top-k",
                f.path(), arch, k);
  return static_cast<int>(k);
}

}  // namespace moeflow
