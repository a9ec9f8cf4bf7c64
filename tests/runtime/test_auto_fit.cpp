// Auto-fit (runtime/auto_fit.h) as a pure function of byte counts, and the parsers of the
// memory facts it is fed (runtime/memory_facts.h), on synthetic inputs.
#include <gtest/gtest.h>

#include "core/error.h"
#include "runtime/auto_fit.h"
#include "runtime/memory_facts.h"

namespace moeflow {
namespace {

constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

// Shaped like the 4-layer Mixtral of the benchmark: 3.17 GiB of experts of 99 MiB each.
ModelMemory mixtral_like() {
  ModelMemory m;
  m.non_expert_bytes = 190 * MiB;
  m.expert_bytes = 3246 * MiB;
  m.kv_bytes = 128 * MiB;
  m.scratch_bytes = 80 * MiB;
  m.min_budget = 2 * 99 * MiB;
  m.n_ctx = 4096;
  m.top_k = 2;
  return m;
}

TEST(AutoFit, MarginIsStated) {
  EXPECT_EQ(fit_margin(0), 64 * MiB);
  EXPECT_EQ(fit_margin(16 * GiB), 64 * MiB + GiB);
}

TEST(AutoFit, ModelThatFitsStaysResident) {
  const ModelMemory m = mixtral_like();
  const FitDecision d = auto_fit(m, 16 * GiB, "MemAvailable");
  EXPECT_FALSE(d.offload);
  EXPECT_EQ(d.budget, 0u);
  EXPECT_NE(d.reason.find("all experts resident"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("MemAvailable"), std::string::npos) << d.reason;
}

TEST(AutoFit, BoundaryIsModelPlusMargin) {
  const ModelMemory m = mixtral_like();
  const uint64_t all = m.fixed() + m.expert_bytes;
  // available a where all + 64 MiB + a/16 == a  <=>  a = (all + 64 MiB) * 16 / 15
  const uint64_t edge = (all + 64 * MiB) * 16 / 15 + 16;
  EXPECT_FALSE(auto_fit(m, edge, "x").offload);
  EXPECT_TRUE(auto_fit(m, edge - 64 * 1024, "x").offload);
}

TEST(AutoFit, TooBigOffloadsWithWhatIsLeft) {
  const ModelMemory m = mixtral_like();
  for (uint64_t avail : {2 * GiB, 1600 * MiB, 800 * MiB}) {
    const FitDecision d = auto_fit(m, avail, "cgroup v1 limit");
    ASSERT_TRUE(d.offload) << avail;
    EXPECT_EQ(d.margin, fit_margin(avail));
    // Everything adds up to exactly what is available.
    EXPECT_EQ(d.budget + m.fixed() + d.margin, avail);
    EXPECT_GE(d.budget, m.min_budget);
    EXPECT_LT(d.budget, m.expert_bytes);
    EXPECT_NE(d.reason.find("expert offloading on"), std::string::npos) << d.reason;
    EXPECT_NE(d.reason.find("cgroup v1 limit"), std::string::npos) << d.reason;
    EXPECT_NE(d.reason.find("--no-offload"), std::string::npos) << d.reason;
  }
}

TEST(AutoFit, AnEmbeddingReadFromTheFileIsNotPlannedFor) {
  // A token embedding the output head does not share is looked up in the file's mapping (one
  // row a token): the budget gets its bytes, and the account says so.
  ModelMemory a = mixtral_like(), b = mixtral_like();
  b.table_bytes = 70 * MiB;
  const FitDecision da = auto_fit(a, 1600 * MiB, "x"), db = auto_fit(b, 1600 * MiB, "x");
  ASSERT_TRUE(da.offload && db.offload);
  EXPECT_EQ(db.budget - da.budget, 70 * MiB);
  EXPECT_EQ(db.budget + b.fixed_host() + db.margin, 1600 * MiB);
  EXPECT_EQ(da.reason.find("read from the file"), std::string::npos) << da.reason;
  EXPECT_NE(db.reason.find("token embedding 70.0 MiB read from the file"), std::string::npos)
      << db.reason;
}

TEST(AutoFit, MoreContextLeavesLessBudget) {
  ModelMemory a = mixtral_like(), b = mixtral_like();
  b.kv_bytes = 4 * a.kv_bytes;
  b.n_ctx = 4 * a.n_ctx;
  EXPECT_EQ(auto_fit(a, 2 * GiB, "x").budget - auto_fit(b, 2 * GiB, "x").budget, 3 * a.kv_bytes);
}

TEST(AutoFit, BelowOneLayersTopKIsRefusedWithTheWholeAccount) {
  const ModelMemory m = mixtral_like();
  const uint64_t need = m.fixed() + m.min_budget;  // + margin
  try {
    auto_fit(m, need, "cgroup v1 limit 600 MiB");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string s = e.what();
    for (const char* part :
         {"does not fit", "non-expert weights", "KV cache", "-c 4096", "activations", "top-2",
          "margin", "cgroup v1 limit 600 MiB", "--expert-cache"})
      EXPECT_NE(s.find(part), std::string::npos) << part << " missing in: " << s;
  }
  // Just enough: the smallest budget itself.
  const uint64_t edge = (need + 64 * MiB) * 16 / 15 + 16;
  const FitDecision d = auto_fit(m, edge, "x");
  EXPECT_TRUE(d.offload);
  EXPECT_GE(d.budget, m.min_budget);
  EXPECT_LT(d.budget, m.min_budget + MiB);
}

TEST(AutoFit, UnknownMemoryKeepsTheOldBehaviour) {
  const FitDecision d = auto_fit(mixtral_like(), 0, "");
  EXPECT_FALSE(d.offload);
  EXPECT_NE(d.reason.find("unknown"), std::string::npos) << d.reason;
}

TEST(MemoryFacts, MeminfoValues) {
  const std::string mi =
      "MemTotal:       24684084 kB\nMemFree:        19084800 kB\n"
      "MemAvailable:   22480268 kB\nHugePages_Total:       0\n";
  EXPECT_EQ(meminfo_value(mi, "MemAvailable"), 22480268ull * 1024);
  EXPECT_EQ(meminfo_value(mi, "MemTotal"), 24684084ull * 1024);
  EXPECT_EQ(meminfo_value(mi, "HugePages_Total"), 0u);
  EXPECT_FALSE(meminfo_value(mi, "MemAvail").has_value());
  EXPECT_FALSE(meminfo_value("", "MemAvailable").has_value());
}

TEST(MemoryFacts, CgroupPathOfV1AndV2) {
  const std::string pc =
      "9:name=systemd:/\n4:memory:/process_api/99cda\n3:cpu,cpuacct:/x\n0::/user.slice/a\n";
  EXPECT_EQ(cgroup_path(pc, "memory"), "/process_api/99cda");
  EXPECT_EQ(cgroup_path(pc, "cpuacct"), "/x");
  EXPECT_EQ(cgroup_path(pc, ""), "/user.slice/a");
  EXPECT_FALSE(cgroup_path("4:memory:/a\n", "").has_value());
  EXPECT_FALSE(cgroup_path("0::/a\n", "memory").has_value());
}

TEST(MemoryFacts, CgroupMounts) {
  const std::string mi =
      "30 25 0:26 / /sys/fs/cgroup/cpu rw,nosuid shared:9 - cgroup cgroup rw,cpu\n"
      "31 25 0:27 /docker/abc /sys/fs/cgroup/memory rw,nosuid shared:10 - cgroup cgroup rw,memory\n"
      "32 25 0:28 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
  const auto v1 = cgroup_mount(mi, 1);
  ASSERT_TRUE(v1.has_value());
  EXPECT_EQ(v1->mount_point, "/sys/fs/cgroup/memory");
  EXPECT_EQ(v1->root, "/docker/abc");
  const auto v2 = cgroup_mount(mi, 2);
  ASSERT_TRUE(v2.has_value());
  EXPECT_EQ(v2->mount_point, "/sys/fs/cgroup/unified");
  EXPECT_FALSE(cgroup_mount("30 25 0:26 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", 1));
}

TEST(MemoryFacts, LimitValues) {
  EXPECT_EQ(cgroup_limit_value("2147483648\n"), 2147483648ull);
  EXPECT_FALSE(cgroup_limit_value("max\n").has_value());
  EXPECT_FALSE(cgroup_limit_value("9223372036854771712\n").has_value());  // v1 "unlimited"
  EXPECT_FALSE(cgroup_limit_value("").has_value());
  EXPECT_EQ(memory_stat_value("cache 10\ntotal_inactive_file 4096\n", "total_inactive_file"),
            4096u);
  EXPECT_FALSE(memory_stat_value("cache 10\n", "inactive_file").has_value());
}

TEST(MemoryFacts, TheTighterOfMemAvailableAndTheCgroupBinds) {
  MemoryFacts f;
  f.mem_available = 20 * GiB;
  EXPECT_EQ(f.available(), 20 * GiB);
  EXPECT_EQ(f.source(), "MemAvailable");
  CgroupMemory c;
  c.version = 1;
  c.path = "/sys/fs/cgroup/memory/bench";
  c.limit = 2 * GiB;
  c.usage = 700 * MiB;
  c.reclaimable = 500 * MiB;  // page cache the limit will reclaim
  EXPECT_EQ(c.headroom(), 2 * GiB - 200 * MiB);
  f.cgroup = c;
  EXPECT_EQ(f.available(), 2 * GiB - 200 * MiB);
  EXPECT_NE(f.source().find("cgroup v1 limit 2.00 GiB"), std::string::npos) << f.source();
  f.mem_available = GiB;  // the machine itself is tighter than the cgroup
  EXPECT_EQ(f.available(), GiB);
  EXPECT_EQ(f.source(), "MemAvailable");
  c.usage = 3 * GiB;  // over the limit (it was lowered under a running group): no room
  c.reclaimable = 0;
  EXPECT_EQ(c.headroom(), 0u);
}

TEST(MemoryFacts, ThisMachineHasMeminfoAndAResidentSet) {
  const MemoryFacts f = read_memory_facts();
  EXPECT_GT(f.mem_total, 0u);
  EXPECT_GT(f.mem_available, 0u);
  EXPECT_LE(f.available(), f.mem_available);
  const ProcessMemory pm = read_process_memory();
  EXPECT_GT(pm.vm_rss, 0u);
  EXPECT_GE(pm.vm_hwm, pm.vm_rss);
}

}  // namespace
}  // namespace moeflow
