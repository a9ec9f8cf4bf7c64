#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "trace/hw_profile.h"

namespace moeflow::trace {
namespace {

// One Mixtral-8x7B expert (3 matrices 4096x14336) at ~4.5 bits/weight (Q4_K-class): the size an
// offloading engine moves per miss.
constexpr double kMixtralExpertQ4Bytes = 3.0 * 4096 * 14336 * 4.5 / 8;

HwProfile pcie() {
  // GPU fast tier: an RTX-4090-class card computes a 4-bit expert matvec in ~0.15 ms and the
  // rest of a layer in ~0.25 ms; pinned host->device copies sustain ~25 GB/s.
  return {"pcie4x16", 25.0, 0.01, kMixtralExpertQ4Bytes, 0.15, 0.25, 2.5};
}

HwProfile nvme() {
  // CPU fast tier (RAM budget): a 4-bit expert matvec streams ~99 MB at ~40 GB/s of memory
  // bandwidth (~2.5 ms); misses are O_DIRECT reads from a Gen4 NVMe SSD at ~6.5 GB/s.
  return {"nvme-gen4", 6.5, 0.08, kMixtralExpertQ4Bytes, 2.5, 1.0, 0};
}

HwProfile instant() {
  // Copies that take no time: every prefetch arrives before its use and a miss costs no stall,
  // so what remains are the logical counts (hits, misses, prefetches used, experts moved) — the
  // model of the live engine under --prefetch-wait, which reads each prefetch before going on
  // (tests/trace/test_replay_parity.cpp). A declined miss is copied too (no host CPU path), as
  // the live cache reads it into a transient slot.
  return {"instant", 1e12, 0.0, kMixtralExpertQ4Bytes, 0.15, 0.25, 0};
}

HwProfile from_json(const nlohmann::json& j, HwProfile base, const std::string& what) {
  try {
    base.link_gb_s = j.value("link_gb_s", j.value("read_gb_s", base.link_gb_s));
    base.latency_ms = j.value("latency_ms", base.latency_ms);
    base.expert_bytes = j.value("expert_bytes", base.expert_bytes);
    base.expert_compute_ms = j.value("expert_compute_ms", base.expert_compute_ms);
    base.layer_ms = j.value("layer_ms", base.layer_ms);
    base.cpu_expert_ms = j.value("cpu_expert_ms", base.cpu_expert_ms);
    base.name = j.value("name", base.name);
  } catch (const nlohmann::json::exception& e) {
    fail("hardware profile '{}': bad field ({})", what, e.what());
  }
  MOEFLOW_CHECK(base.link_gb_s > 0 && base.expert_bytes > 0 && base.expert_compute_ms >= 0 &&
                    base.layer_ms >= 0 && base.latency_ms >= 0 && base.cpu_expert_ms >= 0,
                "hardware profile '{}': link_gb_s and expert_bytes must be > 0, times >= 0", what);
  return base;
}

nlohmann::json load_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("hardware profile '{}': cannot open", path);
  try {
    return nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    fail("hardware profile '{}': bad JSON ({})", path, e.what());
  }
}

}  // namespace

std::vector<std::string> hw_profile_names() {
  return {"pcie4x16", "nvme-gen4", "instant", "local"};
}

HwProfile hw_profile(const std::string& n) {
  if (n == "pcie4x16") return pcie();
  if (n == "nvme-gen4") return nvme();
  if (n == "instant") return instant();
  if (n == "local") {
    std::string path;
    if (const char* e = std::getenv("MOEFLOW_LOCAL_PROFILE")) path = e;
#ifdef MOEFLOW_SOURCE_DIR_FOR_PROFILE
    if (path.empty()) path = MOEFLOW_SOURCE_DIR_FOR_PROFILE "/bench/io/local_profile.json";
#endif
    if (path.empty() || !std::filesystem::exists(path)) path = "bench/io/local_profile.json";
    if (!std::filesystem::exists(path))
      fail(
          "hardware profile 'local': no measured profile (set MOEFLOW_LOCAL_PROFILE or write "
          "bench/io/local_profile.json "
          "with {{\"read_gb_s\": ...}})");
    HwProfile p = from_json(load_json(path), nvme(), path);
    p.name = "local";
    return p;
  }
  if (std::filesystem::exists(n)) return from_json(load_json(n), pcie(), n);
  fail("unknown hardware profile '{}' (known: pcie4x16, nvme-gen4, local, or a JSON file)", n);
}

}  // namespace moeflow::trace
