#include "runtime/offload_options.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "policy/eviction_policy.h"
#include "policy/predictor.h"

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
  if (unit.empty() || unit == "b")
    mul = 1;
  else if (unit == "k" || unit == "kib" || unit == "kb")
    mul = 1024.0;
  else if (unit == "m" || unit == "mib" || unit == "mb")
    mul = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib" || unit == "gb")
    mul = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib" || unit == "tb")
    mul = 1024.0 * 1024 * 1024 * 1024;
  else
    fail("{}: unknown unit '{}' in '{}' (use B, KiB, MiB, GiB, TiB)", option, unit, text);
  const double bytes = v * mul;
  if (!(bytes > 0) || !std::isfinite(bytes) || bytes > 1.8e19)
    fail("{}: size '{}' must be positive", option, text);
  return static_cast<uint64_t>(bytes);
}

std::optional<DeviceSource> parse_expert_source(const std::string& name) {
  if (name == "auto") return std::nullopt;
  if (name == "ram") return DeviceSource::Ram;
  if (name == "file") return DeviceSource::File;
  fail("--expert-source: '{}' is not one of auto, ram, file", name);
}

const char* expert_source_name(const std::optional<DeviceSource>& s) {
  return !s ? "auto" : *s == DeviceSource::Ram ? "ram" : "file";
}

namespace {

bool known(const std::vector<std::string>& names, const std::string& n) {
  return std::find(names.begin(), names.end(), n) != names.end();
}

template <typename... Args>
std::optional<std::string> err(fmt::format_string<Args...> f, Args&&... args) {
  return fmt::format(f, std::forward<Args>(args)...);
}

}  // namespace

std::optional<std::string> check_offload_options(const OffloadOptions& o,
                                                 std::optional<BackendKind> backend) {
  // Names (the CLI checks them when it parses; library callers get the same words).
  if (o.policy != "auto" && !known(eviction_policy_names(), o.policy))
    return err("--cache-policy: unknown policy '{}' (known: auto, {})", o.policy,
               fmt::join(eviction_policy_names(), ", "));
  if (o.prefetch != "none" && !known(predictor_names(), o.prefetch))
    return err("--prefetch: unknown predictor '{}' (known: none, {})", o.prefetch,
               fmt::join(predictor_names(), ", "));
  // Options that exclude each other.
  if (o.expert_cache && o.cache_rate > 0)
    return err("--expert-cache and --cache-rate are exclusive: give one of them");
  if (o.no_offload && o.enabled())
    return err("--no-offload and --expert-cache / --cache-rate are exclusive: give one of them");
  if (o.mem_limit && (o.no_offload || o.enabled()))
    return err(
        "--mem-limit sizes the automatic expert budget; it does nothing with --no-offload or "
        "an explicit --expert-cache / --cache-rate");
  if (o.mmap && (o.no_offload || o.enabled()))
    return err(
        "--mmap keeps a model that fits the free memory mapped instead of read into memory; "
        "with --no-offload or an explicit --expert-cache / --cache-rate the file stays mapped "
        "anyway");
  if (o.no_repack && (o.mmap || o.no_offload || o.enabled()))
    return err(
        "--no-repack keeps the weights of a model read into memory in their file layout; with "
        "--mmap, --no-offload or an explicit --expert-cache / --cache-rate nothing is read into "
        "memory or repacked anyway");
  if (o.repack_offloaded && (o.mmap || o.no_offload || o.no_repack))
    return err(
        "--repack-offloaded rewrites an offloaded model's weights into the CPU kernels' layouts; "
        "with --mmap or --no-offload nothing is offloaded, and --no-repack asks for the file's "
        "layout");
  if (o.vram_budget && o.vram_free)
    return err("--vram-budget and --vram-free are exclusive: give one of them");
  if ((o.low_cache.has_value() + (o.low_cache_rate != 0) + o.low_share.has_value()) > 1)
    return err("--low-cache, --low-cache-rate and --low-share are exclusive: give one of them");
  // Ranges.
  if (o.cache_rate < 0 || o.cache_rate > 1.0 || std::isnan(o.cache_rate))
    return err("--cache-rate must be in (0, 1], got {}", o.cache_rate);
  if (o.prefill_slots < 0)
    return err("--prefill-slots must be 0 (off) or more, got {}", o.prefill_slots);
  if (o.lookahead < 1) return err("--lookahead must be 1 or more, got {}", o.lookahead);
  if (o.io_threads < 0) return err("--io-threads must be 0 (auto) or more, got {}", o.io_threads);
  if (o.low_cache_rate < 0 || o.low_cache_rate > 1.0 || std::isnan(o.low_cache_rate))
    return err("--low-cache-rate must be in (0, 1], got {}", o.low_cache_rate);
  if (o.low_share && !(*o.low_share > 0 && *o.low_share < 1))
    return err("--low-share must be in (0, 1), got {}", *o.low_share);
  // Options that belong to another backend.
  const bool vram_options =
      o.vram_budget || o.vram_free || o.vram_limit || o.expert_source || o.cpu_experts;
  if (backend == BackendKind::Cpu && vram_options)
    return err(
        "--vram-budget, --vram-free, --vram-limit, --expert-source and --cpu-experts shape the "
        "VRAM "
        "expert cache of --backend cuda; the CPU backend's RAM cache takes --expert-cache or "
        "--cache-rate");
  if (backend && *backend != BackendKind::Cpu &&
      (o.enabled() || o.no_offload || o.mem_limit || o.mmap || o.no_repack || o.repack_offloaded))
    return err(
        "--expert-cache, --cache-rate, --no-offload, --mem-limit, --mmap, --no-repack and "
        "--repack-offloaded shape the CPU "
        "backend's RAM use; with --backend {} give --vram-budget SIZE or --vram-free SIZE",
        backend_kind_name(*backend));
  // Options that belong to another mode, or to another option: they would do nothing.
  const char* mode = expert_mode_name(o.mode);
  const bool hobbit = o.mode == ExpertMode::Hobbit || o.mode == ExpertMode::HobbitAll;
  if (!hobbit && (o.hobbit_t1 || o.hobbit_t2))
    return err("--hobbit-t1 / --hobbit-t2 apply to --mode hobbit or hobbit-all (the mode is {})",
               mode);
  if (o.mode != ExpertMode::Skip && o.skip_threshold)
    return err("--skip-threshold applies to --mode skip (the mode is {})", mode);
  if (!hobbit && (o.low_cache || o.low_cache_rate != 0 || o.low_share))
    return err(
        "--low-cache / --low-cache-rate / --low-share apply to --mode hobbit or hobbit-all "
        "(the mode is {})",
        mode);
  if (!o.predictor_model.empty() && o.prefetch != "promoe")
    return err("--predictor-model is read by --prefetch promoe only (got --prefetch {})",
               o.prefetch);
  if (o.policy != "auto" && eviction_policy_needs_calibration(o.policy) && o.policy_calib.empty())
    return err(
        "--cache-policy {} places experts by how often a calibration run used them: give "
        "--policy-calib TRACE (record one with `moeflow trace -m MODEL --prompts FILE -o TRACE`)",
        o.policy);
  if (!o.policy_calib.empty() &&
      !(o.policy != "auto" && eviction_policy_needs_calibration(o.policy)))
    return err("--policy-calib calibrates --cache-policy static or daop (the policy is {})",
               o.policy);
  // A replayed routing is not what the hidden states would route to: a predictor reading them
  // would be measured guessing another routing than the one the cache serves.
  if (!o.routing_trace.empty() && o.prefetch != "none" && predictor_reads_hidden_states(o.prefetch))
    return err(
        "--prefetch {} guesses from hidden states, which do not follow a routing replayed by "
        "--routing-trace: not meaningful under replay (use token, duoserve, eamc or none)",
        o.prefetch);
  if (o.routing_request < 0)
    return err("--routing-request must be >= 0, got {}", o.routing_request);
  if (o.routing_request != 0 && o.routing_trace.empty())
    return err("--routing-request picks a request of --routing-trace, which is not given");
  // The thresholds' own ranges (model/moe/precision_mode.h).
  try {
    validate(mode_config(o));
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

PrecisionModeConfig mode_config(const OffloadOptions& o) {
  PrecisionModeConfig m;
  m.mode = o.mode;
  m.t1 = o.hobbit_t1.value_or(m.t1);
  m.t2 = o.hobbit_t2.value_or(m.t2);
  m.skip_threshold =
      o.skip_threshold.value_or(o.mode == ExpertMode::Skip ? kDefaultSkipThreshold : 0.0);
  m.precalc = o.precalc;
  return m;
}

void validate(const OffloadOptions& o, std::optional<BackendKind> backend) {
  if (auto e = check_offload_options(o, backend)) fail("{}", *e);
}

}  // namespace moeflow
