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

namespace moeflow {

PrecisionModeConfig resolve_mode(const OffloadOptions& o, const GgufFile& file) {
  PrecisionModeConfig m;
  m.mode = parse_expert_mode(o.mode);
  const bool hobbit = m.needs_low(), skip = m.mode == ExpertMode::Skip;
  // A threshold given for another mode would silently do nothing: say so instead.
  if (!hobbit && (o.hobbit_t1 || o.hobbit_t2))
    fail("--hobbit-t1 / --hobbit-t2 apply to --mode hobbit or hobbit-all (the mode is {})", o.mode);
  if (!skip && o.skip_threshold)
    fail("--skip-threshold applies to --mode skip (the mode is {})", o.mode);
  if (!hobbit && (!o.low_cache.empty() || o.low_cache_rate != 0 || o.low_share))
    fail("--low-cache / --low-cache-rate / --low-share apply to --mode hobbit or hobbit-all "
         "(the mode is {})",
         o.mode);
  m.t1 = o.hobbit_t1.value_or(m.t1);
  m.t2 = o.hobbit_t2.value_or(m.t2);
  m.skip_threshold = o.skip_threshold.value_or(skip ? kDefaultSkipThreshold : 0.0);
  m.precalc = o.precalc;
  validate(m);
  if (hobbit) {
    bool has_low = false;
    for (const ExpertLayerIndex& l : build_expert_index(file, "low").layers)
      has_low |= l.n_expert > 0;
    if (!has_low)
      fail("--mode {}: {} has no low-precision expert copies; make them with `moeflow pack "
           "-m {} -o OUT.gguf --low Q4_0` (or Q2_K, Q3_K, ...)",
           o.mode, file.path(), file.path());
  }
  return m;
}

uint64_t resolve_low_budget(const OffloadOptions& o, const PrecisionModeConfig& mode,
                            uint64_t budget, uint64_t total_low, uint64_t min_low) {
  if (!mode.needs_low()) return 0;
  const int given = !o.low_cache.empty() + (o.low_cache_rate != 0) + o.low_share.has_value();
  if (given > 1) fail("--low-cache, --low-cache-rate and --low-share are exclusive: give one of them");
  uint64_t low = 0;
  if (!o.low_cache.empty()) {
    low = parse_byte_size(o.low_cache, "--low-cache");
  } else if (o.low_cache_rate != 0) {
    if (!(o.low_cache_rate > 0 && o.low_cache_rate <= 1.0))
      fail("--low-cache-rate must be in (0, 1], got {}", o.low_cache_rate);
    low = static_cast<uint64_t>(std::ceil(o.low_cache_rate * static_cast<double>(total_low)));
  } else {
    const double share = o.low_share.value_or(kDefaultLowShare);
    if (!(share > 0 && share < 1)) fail("--low-share must be in (0, 1), got {}", share);
    low = static_cast<uint64_t>(std::ceil(share * static_cast<double>(budget)));
  }
  low = std::max(low, min_low);
  if (low >= budget)
    fail("the low-precision expert cache ({} bytes, at least one layer's top-k low copies) "
         "takes the whole expert budget ({} bytes): raise --expert-cache / --cache-rate or "
         "lower --low-cache / --low-cache-rate / --low-share",
         low, budget);
  return low;
}

void add_mode_json(nlohmann::json& j, const OffloadSession& s, bool per_layer) {
  j["mode"] = expert_mode_name(s.mode.mode);
  if (s.mode.needs_low()) {
    j["hobbit_t1"] = s.mode.t1;
    j["hobbit_t2"] = s.mode.t2;
  }
  if (s.mode.mode == ExpertMode::Skip) j["skip_threshold"] = s.mode.skip_threshold;
  j["precalc"] = s.mode.precalc;
  if (!s.usage) return;
  const std::vector<PrecisionUsage::Counts> layers = s.usage->snapshot();
  PrecisionUsage::Counts tot;
  for (const auto& c : layers) tot += c;  // from the same snapshot as the per-layer counts
  j["uses"] = usage_json(tot);
  if (!per_layer) return;
  if (j.contains("layers") && j["layers"].is_array()) {
    for (auto& l : j["layers"]) {
      const size_t i = l.value("layer", size_t{0});
      l["uses"] = usage_json(i < layers.size() ? layers[i] : PrecisionUsage::Counts{});
    }
  } else {
    nlohmann::json arr = nlohmann::json::array();
    for (size_t i = 0; i < layers.size(); ++i) {
      nlohmann::json u = usage_json(layers[i]);
      u["layer"] = i;
      arr.push_back(std::move(u));
    }
    j["uses_per_layer"] = std::move(arr);
  }
}

}  // namespace moeflow
