#include "runtime/memory_facts.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

namespace moeflow {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> split_ws(const std::string& line) {
  std::istringstream is(line);
  std::vector<std::string> out;
  for (std::string w; is >> w;) out.push_back(w);
  return out;
}

std::optional<uint64_t> to_u64(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  try {
    return std::stoull(s);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string parent_dir(const std::string& d) {
  const size_t k = d.find_last_of('/');
  return k == std::string::npos || k == 0 ? "/" : d.substr(0, k);
}

// The cgroup directory of this process under mount `m` for the hierarchy path `path`.
std::string cgroup_dir(const CgroupMount& m, std::string path) {
  if (m.root != "/" && path.rfind(m.root, 0) == 0) path = path.substr(m.root.size());
  if (path == "/") path.clear();
  return m.mount_point + path;
}

// The cgroup (own or ancestor, up to the mount point) that leaves the least headroom.
std::optional<CgroupMemory> tightest(int version, const CgroupMount& m, const std::string& dir0) {
  const char* limit_file = version == 1 ? "memory.limit_in_bytes" : "memory.max";
  const char* usage_file = version == 1 ? "memory.usage_in_bytes" : "memory.current";
  const char* active = version == 1 ? "total_active_file" : "active_file";
  const char* inactive = version == 1 ? "total_inactive_file" : "inactive_file";
  std::optional<CgroupMemory> best;
  for (std::string dir = dir0;; dir = parent_dir(dir)) {
    const auto limit = cgroup_limit_value(slurp(dir + "/" + limit_file));
    if (limit) {
      CgroupMemory c;
      c.version = version;
      c.path = dir;
      c.limit = *limit;
      const std::string usage = slurp(dir + "/" + usage_file);
      c.usage = to_u64(split_ws(usage).empty() ? "" : split_ws(usage)[0]).value_or(0);
      const std::string stat = slurp(dir + "/memory.stat");
      c.reclaimable = memory_stat_value(stat, active).value_or(0) +
                      memory_stat_value(stat, inactive).value_or(0);
      if (!best || c.headroom() < best->headroom()) best = c;
    }
    if (dir.size() <= m.mount_point.size() || dir == "/") break;
  }
  return best;
}

}  // namespace

uint64_t CgroupMemory::headroom() const {
  const uint64_t used = usage > reclaimable ? usage - reclaimable : 0;
  return used >= limit ? 0 : limit - used;
}

uint64_t MemoryFacts::available() const {
  if (cgroup) return std::min(mem_available, cgroup->headroom());
  return mem_available;
}

std::string MemoryFacts::source() const {
  if (cgroup && cgroup->headroom() < mem_available)
    return fmt::format(
        "cgroup v{} limit {} at {}, {} charged", cgroup->version, format_bytes(cgroup->limit),
        cgroup->path,
        format_bytes(cgroup->usage > cgroup->reclaimable ? cgroup->usage - cgroup->reclaimable
                                                         : 0));
  return "MemAvailable";
}

std::optional<uint64_t> meminfo_value(const std::string& meminfo, const std::string& key) {
  std::istringstream is(meminfo);
  for (std::string line; std::getline(is, line);) {
    const auto w = split_ws(line);
    if (w.size() < 2 || w[0] != key + ":") continue;
    const auto v = to_u64(w[1]);
    if (!v) return std::nullopt;
    return w.size() >= 3 && w[2] == "kB" ? *v * 1024 : *v;
  }
  return std::nullopt;
}

std::optional<std::string> cgroup_path(const std::string& proc_cgroup,
                                       const std::string& controller) {
  std::istringstream is(proc_cgroup);
  for (std::string line; std::getline(is, line);) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string ctrls = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (controller.empty()) {
      if (line.substr(0, a) == "0" && ctrls.empty()) return path;
      continue;
    }
    std::istringstream cs(ctrls);
    for (std::string c; std::getline(cs, c, ',');)
      if (c == controller) return path;
  }
  return std::nullopt;
}

std::optional<CgroupMount> cgroup_mount(const std::string& mountinfo, int version) {
  std::istringstream is(mountinfo);
  for (std::string line; std::getline(is, line);) {
    const auto w = split_ws(line);
    const auto dash = std::find(w.begin(), w.end(), "-");
    if (w.size() < 5 || dash == w.end() || dash + 3 > w.end()) continue;
    const std::string& fstype = *(dash + 1);
    if (version == 2 && fstype != "cgroup2") continue;
    if (version == 1) {
      if (fstype != "cgroup") continue;
      bool memory = false;
      std::istringstream os(*(dash + 3));
      for (std::string o; std::getline(os, o, ',');) memory |= o == "memory";
      if (!memory) continue;
    }
    return CgroupMount{w[3], w[4]};
  }
  return std::nullopt;
}

std::optional<uint64_t> cgroup_limit_value(const std::string& text) {
  const auto w = split_ws(text);
  if (w.empty() || w[0] == "max") return std::nullopt;
  const auto v = to_u64(w[0]);
  // cgroup v1 writes "no limit" as the largest page-aligned signed value.
  if (!v || *v >= (1ull << 62)) return std::nullopt;
  return v;
}

std::optional<uint64_t> memory_stat_value(const std::string& stat, const std::string& key) {
  std::istringstream is(stat);
  for (std::string line; std::getline(is, line);) {
    const auto w = split_ws(line);
    if (w.size() >= 2 && w[0] == key) return to_u64(w[1]);
  }
  return std::nullopt;
}

MemoryFacts read_memory_facts() {
  MemoryFacts f;
  const std::string mi = slurp("/proc/meminfo");
  f.mem_total = meminfo_value(mi, "MemTotal").value_or(0);
  f.mem_available = meminfo_value(mi, "MemAvailable").value_or(0);
  const std::string pc = slurp("/proc/self/cgroup"), mounts = slurp("/proc/self/mountinfo");
  for (int version : {1, 2}) {
    const auto path = cgroup_path(pc, version == 1 ? "memory" : "");
    const auto mount = cgroup_mount(mounts, version);
    if (!path || !mount) continue;
    const auto c = tightest(version, *mount, cgroup_dir(*mount, *path));
    if (c && (!f.cgroup || c->headroom() < f.cgroup->headroom())) f.cgroup = c;
  }
  return f;
}

ProcessMemory read_process_memory() {
  const std::string st = slurp("/proc/self/status");
  return {meminfo_value(st, "VmRSS").value_or(0), meminfo_value(st, "VmHWM").value_or(0),
          meminfo_value(st, "RssAnon").value_or(0), meminfo_value(st, "RssFile").value_or(0)};
}

std::string format_bytes(uint64_t b) {
  const double v = static_cast<double>(b);
  if (v >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", v / (1024.0 * 1024 * 1024));
  if (v >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", v / (1024.0 * 1024));
  return fmt::format("{:.1f} KiB", v / 1024.0);
}

}  // namespace moeflow
