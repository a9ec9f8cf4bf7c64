#pragma once
// A child memory cgroup of this process's own, for running a command under a RAM limit that
// counts its page cache too (what a smaller machine would be). cgroup v1 (memory.limit_in_bytes)
// or v2 (memory.max, needs the memory controller delegated to this process's cgroup). When
// neither can be made here, create() returns null and says why, naming the missing capability.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "runtime/memory_facts.h"

namespace moeflow::test {

class MemoryCgroup {
 public:
  static std::unique_ptr<MemoryCgroup> create(const std::string& name, uint64_t limit,
                                              std::string& why) {
    const std::string pc = slurp("/proc/self/cgroup"), mi = slurp("/proc/self/mountinfo");
    for (int version : {1, 2}) {
      const auto path = cgroup_path(pc, version == 1 ? "memory" : "");
      const auto mount = cgroup_mount(mi, version);
      if (!path || !mount) continue;
      std::string rel = *path;
      if (mount->root != "/" && rel.rfind(mount->root, 0) == 0)
        rel = rel.substr(mount->root.size());
      if (rel == "/") rel.clear();
      const std::string dir =
          mount->mount_point + rel + "/" + name + "_" + std::to_string(getpid());
      if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
        why += "cannot create memory cgroup " + dir + ": " + std::strerror(errno) + "; ";
        continue;
      }
      auto g = std::unique_ptr<MemoryCgroup>(new MemoryCgroup(dir, version));
      const char* file = version == 1 ? "memory.limit_in_bytes" : "memory.max";
      if (!g->write(file, std::to_string(limit))) {
        why += "cannot set " + dir + "/" + file + " (cgroup v" + std::to_string(version) +
               " memory controller not writable or not delegated); ";
        continue;
      }
      return g;
    }
    if (why.empty())
      why = "no cgroup memory controller is mounted (neither cgroup v1 'memory' nor cgroup2)";
    return nullptr;
  }
  ~MemoryCgroup() { ::rmdir(dir_.c_str()); }

  // Shell text that moves the shell into the group, then runs `cmd` there.
  std::string wrap(const std::string& cmd) const {
    return "sh -c 'echo $$ > " + dir_ + "/cgroup.procs && exec " + cmd + "'";
  }
  // Peak charge of the group (v1 memory.max_usage_in_bytes, v2 memory.peak when present).
  uint64_t peak() const {
    const std::string v =
        slurp(dir_ + (version_ == 1 ? "/memory.max_usage_in_bytes" : "/memory.peak"));
    return v.empty() ? 0 : std::stoull(v);
  }
  const std::string& dir() const { return dir_; }

 private:
  MemoryCgroup(std::string dir, int version) : dir_(std::move(dir)), version_(version) {}
  bool write(const char* file, const std::string& value) const {
    std::ofstream f(dir_ + "/" + file);
    f << value;
    f.flush();
    return static_cast<bool>(f);
  }
  static std::string slurp(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  std::string dir_;
  int version_;
};

}  // namespace moeflow::test
