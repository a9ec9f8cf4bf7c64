#pragma once
// What the machine lets this process use: /proc/meminfo's MemAvailable and, when the process
// sits in a memory cgroup with a limit (v1 memory.limit_in_bytes, v2 memory.max, any ancestor),
// the room that limit leaves. A container or a systemd slice usually shows the host's
// MemAvailable in /proc/meminfo while its cgroup holds it to far less, so the smaller of the two
// is what auto-fit (runtime/auto_fit.h) plans with. Also this process's resident set (VmRSS,
// VmHWM) for the statistics.
//
// The parsers are separate from the readers so tests can feed them synthetic files.
#include <cstdint>
#include <optional>
#include <string>

namespace moeflow {

struct CgroupMemory {
  int version = 0;           // 1 or 2
  std::string path;          // directory of the cgroup whose limit binds (the tightest)
  uint64_t limit = 0;        // bytes
  uint64_t usage = 0;        // charged now (anonymous + page cache)
  uint64_t reclaimable = 0;  // file-backed page cache inside usage (dropped under pressure)
  // Room left under the limit: limit - usage + reclaimable, clamped to [0, limit].
  uint64_t headroom() const;
};

struct MemoryFacts {
  uint64_t mem_total = 0;
  uint64_t mem_available = 0;          // /proc/meminfo MemAvailable
  std::optional<CgroupMemory> cgroup;  // only when a limit below "unlimited" applies
  // min(mem_available, cgroup headroom), and which of them it is.
  uint64_t available() const;
  std::string source() const;  // "MemAvailable" or "cgroup v1 limit 2.00 GiB (...)"
};

// Reads /proc/meminfo, /proc/self/cgroup and /proc/self/mountinfo and the cgroup files they
// lead to. Never throws: a missing or unreadable file leaves that part out (no cgroup, or
// mem_available 0 when /proc/meminfo is missing; auto-fit then refuses to guess).
MemoryFacts read_memory_facts();

// --- parsers (exposed for tests) ---
// "MemAvailable:  123 kB" lines -> bytes; nullopt when the key is absent.
std::optional<uint64_t> meminfo_value(const std::string& meminfo, const std::string& key);
// The cgroup path of a controller in /proc/self/cgroup text: v1 lines "N:memory:/a/b", v2 the
// "0::/a/b" line (controller "" selects it).
std::optional<std::string> cgroup_path(const std::string& proc_cgroup,
                                       const std::string& controller);
// Mount point and mount root of the cgroup filesystem in /proc/self/mountinfo text: v1 the
// "cgroup" mount whose super options include "memory", v2 the "cgroup2" mount.
struct CgroupMount {
  std::string root, mount_point;
};
std::optional<CgroupMount> cgroup_mount(const std::string& mountinfo, int version);
// A limit file's value: "max" or a v1 "unlimited" (>= 2^62) -> nullopt.
std::optional<uint64_t> cgroup_limit_value(const std::string& text);
// "key value" lines of memory.stat.
std::optional<uint64_t> memory_stat_value(const std::string& stat, const std::string& key);

struct ProcessMemory {
  uint64_t vm_rss = 0;    // resident now
  uint64_t vm_hwm = 0;    // peak resident
  uint64_t rss_anon = 0;  // of vm_rss: the process's own memory (heap, copies, caches)
  uint64_t rss_file = 0;  // of vm_rss: mapped file pages (code, the model's mmap)
};
ProcessMemory read_process_memory();

// "1.50 GiB" / "512.0 MiB" for messages.
std::string format_bytes(uint64_t bytes);

}  // namespace moeflow
