// A model bigger than the memory it may use, end to end through `moeflow run`: auto-fit turns
// expert offloading on and says why (and keeps every expert resident when the model fits), the
// explicit settings override it, and under a real memory limit (a cgroup that counts the page
// cache) the run completes with the same tokens while its resident set stays within
// non-expert weights + KV cache + activations + expert budget + the stated runtime slack, the
// non-expert weights held in the process's own memory rather than in file pages.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "memory_cgroup.h"
#include "support/run_binary.h"
#include "support/test_helpers.h"

namespace moeflow::test {
namespace {

using nlohmann::json;
constexpr uint64_t MiB = 1ull << 20;
// The part of auto-fit's margin that is not proportional to memory: what the runtime itself
// (code, libraries, heap, thread stacks) may use beyond the planned bytes.
constexpr uint64_t kRuntimeSlack = 64 * MiB;

// F16 Mixtral-shaped (small preset) with `experts` experts per layer: 786 KiB per expert; a
// vocabulary of `vocab` makes the non-expert weights 2 x vocab x 512 bytes.
std::string gen_model(const std::string& name, int experts, int vocab) {
  const std::string p = temp_path(name);
  if (std::filesystem::exists(p)) return p;
  const Cmd c = run_moeflow("gen-model --arch mixtral --preset small --type F16 --experts " +
                            std::to_string(experts) + " --vocab " + std::to_string(vocab) +
                            " --seed 3 -t 2 -q -o " + p);
  EXPECT_EQ(c.rc, 0) << c.out;
  return p;
}

// The --stats json object (the last line of stderr) and the generated text (stdout).
struct RunResult {
  int rc = -1;
  std::string text, err;
  json stats;
};

// `shell` is a shell command line; its stderr goes to a file so stdout stays the text.
RunResult run_shell(const std::string& shell) {
  const std::string err = temp_path("stderr.txt");
  RunResult r;
  FILE* p = popen((shell + " 2>" + err).c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.text.append(buf, n);
  const int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  FILE* f = std::fopen(err.c_str(), "r");
  if (f) {
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) r.err.append(buf, n);
    std::fclose(f);
  }
  const size_t last = r.err.find_last_of('\n', r.err.size() >= 2 ? r.err.size() - 2 : 0);
  const std::string line = r.err.substr(last == std::string::npos ? 0 : last + 1);
  r.stats = json::parse(line, nullptr, false);
  return r;
}

RunResult run_split(const std::string& args) {
  return run_shell(std::string(MOEFLOW_BINARY) + " " + args);
}

const char* kGen = " -p ids:1,2,3,4,5 -n 12 --temp 0 -t 2 --stats json";

TEST(AutoFit, ModelBiggerThanTheAllowanceOffloadsAndSaysWhy) {
  const std::string m = gen_model("fit_a.gguf", 16, 1024);  // 50 MiB of experts
  const RunResult ref = run_split("run -m " + m + kGen + " --no-offload");
  ASSERT_EQ(ref.rc, 0) << ref.err;
  const RunResult r = run_split("run -m " + m + kGen + " --mem-limit 96MiB");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("moeflow: expert offloading on, budget"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("96.0 MiB available, --mem-limit"), std::string::npos) << r.err;
  ASSERT_TRUE(r.stats.is_object()) << r.err;
  const json& mem = r.stats["memory"];
  EXPECT_EQ(mem["plan"], "auto");
  EXPECT_TRUE(mem["offload"].get<bool>());
  const uint64_t budget = mem["budget_bytes"];
  EXPECT_GT(budget, 0u);
  EXPECT_LT(budget, mem["expert_bytes"].get<uint64_t>());
  // The token embedding (the generated model has an output head of its own) is read from the
  // file, not planned for.
  const uint64_t table = mem["table_bytes"];
  EXPECT_GT(table, 0u);
  EXPECT_LT(table, mem["non_expert_bytes"].get<uint64_t>());
  EXPECT_EQ(budget + mem["non_expert_bytes"].get<uint64_t>() - table +
                mem["kv_bytes"].get<uint64_t>() + mem["state_bytes"].get<uint64_t>() +
                mem["snapshot_bytes"].get<uint64_t>() + mem["scratch_bytes"].get<uint64_t>() +
                mem["margin_bytes"].get<uint64_t>(),
            96 * MiB);
  EXPECT_EQ(r.stats["offload"]["budget_bytes"].get<uint64_t>(), budget);
  EXPECT_EQ(r.text, ref.text);  // offloading stays exact
  // --no-offload is its own plan.
  EXPECT_EQ(ref.stats["memory"]["plan"], "off");
  EXPECT_FALSE(ref.stats.contains("offload"));
}

// gen-model writes GGUF's 32-byte alignment, so its expert slices sit off 4 KiB boundaries:
// when auto-fit offloads, the user is told that `moeflow pack` aligns them; a packed copy, an
// explicit budget (a choice already made) and a model that fits hear nothing of it.
TEST(AutoFit, OffloadingAnUnpackedFileSuggestsPack) {
  const std::string m = gen_model("fit_a.gguf", 16, 1024);
  const std::string packed = temp_path("fit_a_packed.gguf");
  ASSERT_EQ(run_moeflow("pack -m " + m + " -o " + packed).rc, 0);
  const char* note = "are not 4 KiB-aligned";
  const RunResult r = run_split("run -m " + m + kGen + " --mem-limit 96MiB");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find(note), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("moeflow pack -m " + m), std::string::npos) << r.err;
  const RunResult p = run_split("run -m " + packed + kGen + " --mem-limit 96MiB");
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_TRUE(p.stats["memory"]["offload"].get<bool>()) << p.err;
  EXPECT_EQ(p.err.find(note), std::string::npos) << p.err;
  EXPECT_EQ(p.text, r.text);  // the same model
  const RunResult e = run_split("run -m " + m + kGen + " --expert-cache 20MiB");
  ASSERT_EQ(e.rc, 0) << e.err;
  EXPECT_EQ(e.err.find(note), std::string::npos) << e.err;
  const RunResult f = run_split("run -m " + m + kGen + " --mem-limit 1GiB");
  ASSERT_EQ(f.rc, 0) << f.err;
  EXPECT_EQ(f.err.find(note), std::string::npos) << f.err;
  std::filesystem::remove(packed);
}

TEST(AutoFit, ModelThatFitsKeepsEveryExpertResident) {
  const std::string m = gen_model("fit_b.gguf", 16, 1024);
  const RunResult r = run_split("run -m " + m + kGen + " --mem-limit 1GiB");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("expert offloading on"), std::string::npos) << r.err;
  EXPECT_EQ(r.stats["memory"]["plan"], "auto");
  EXPECT_FALSE(r.stats["memory"]["offload"].get<bool>());
  EXPECT_NE(r.stats["memory"]["reason"].get<std::string>().find("all experts resident"),
            std::string::npos);
  EXPECT_FALSE(r.stats.contains("offload"));
  // The plain command on this machine: a 50 MiB model fits any machine that runs the tests.
  const RunResult plain = run_split("run -m " + m + kGen);
  ASSERT_EQ(plain.rc, 0) << plain.err;
  EXPECT_FALSE(plain.stats["memory"]["offload"].get<bool>()) << plain.err;
  // A model that fits is read into the process's memory (2 MiB pages) unless --mmap: the
  // weights show up in the anonymous part of the resident set, or in the file part; the same
  // tokens either way. Compared between the two runs: the rest of each part (the binary's own
  // pages, a sanitizer's shadow memory: ~50 MB each under ASan) is the same in both.
  const uint64_t file_bytes = std::filesystem::file_size(m);
  EXPECT_TRUE(plain.stats["memory"]["weights_read_into_memory"].get<bool>()) << plain.err;
  const RunResult mapped = run_split("run -m " + m + kGen + " --mmap");
  ASSERT_EQ(mapped.rc, 0) << mapped.err;
  EXPECT_FALSE(mapped.stats["memory"]["weights_read_into_memory"].get<bool>()) << mapped.err;
  auto rss = [](const RunResult& r, const char* part) -> int64_t {
    return r.stats["memory"][part].get<int64_t>();
  };
  EXPECT_GE(rss(plain, "rss_anon_bytes") - rss(mapped, "rss_anon_bytes"), (int64_t)file_bytes / 2)
      << plain.err << "\n"
      << mapped.err;
  EXPECT_GE(rss(mapped, "rss_file_bytes") - rss(plain, "rss_file_bytes"), (int64_t)file_bytes / 4)
      << plain.err << "\n"
      << mapped.err;
  EXPECT_EQ(mapped.text, plain.text);
  // --no-offload keeps the mapping: it is also how a model that does not fit runs resident.
  const RunResult off = run_split("run -m " + m + kGen + " --no-offload");
  ASSERT_EQ(off.rc, 0) << off.err;
  EXPECT_FALSE(off.stats["memory"]["weights_read_into_memory"].get<bool>()) << off.err;
  EXPECT_EQ(off.text, plain.text);
}

// A model read into memory gets its matmul weights repacked into the CPU kernels' layouts
// (runtime/cpu_repack.h) where the SIMD level has one: the same tokens as the file's layout
// (--no-repack) and as the mapping (--mmap), which repack nothing. Returns the bytes repacked.
uint64_t expect_repack_keeps_tokens(const std::string& m) {
  const RunResult plain = run_split("run -m " + m + kGen);
  EXPECT_EQ(plain.rc, 0) << plain.err;
  if (plain.rc != 0) return 0;
  EXPECT_TRUE(plain.stats["memory"]["weights_read_into_memory"].get<bool>()) << plain.err;
  for (const char* flag : {" --no-repack", " --mmap"}) {
    const RunResult r = run_split("run -m " + m + kGen + flag);
    EXPECT_EQ(r.rc, 0) << flag << ": " << r.err;
    if (r.rc != 0) continue;
    EXPECT_EQ(r.stats["memory"]["weights_repacked_bytes"].get<uint64_t>(), 0u) << flag;
    EXPECT_EQ(r.text, plain.text) << flag;
  }
  return plain.stats["memory"]["weights_repacked_bytes"].get<uint64_t>();
}

// Offloaded, the model keeps the file's layout unless --repack-offloaded asks for the same
// layouts there: the non-expert weights' copies at load and every expert as it arrives in its
// cache slot (experts/slot_rewrite.h). The same tokens either way, and as the model read into
// memory.
struct OffloadedRepack {
  uint64_t weights = 0;  // non-expert bytes copied into a CPU layout
  uint64_t slots = 0;    // expert bytes rewritten on arrival
};
OffloadedRepack expect_offloaded_repack_keeps_tokens(const std::string& m) {
  const RunResult resident = run_split("run -m " + m + kGen);
  const std::string off = " --cache-rate 0.5";
  const RunResult plain = run_split("run -m " + m + kGen + off);
  const RunResult repacked = run_split("run -m " + m + kGen + off + " --repack-offloaded");
  OffloadedRepack out;
  for (const RunResult* r : {&resident, &plain, &repacked}) {
    EXPECT_EQ(r->rc, 0) << r->err;
    if (r->rc != 0) return out;
  }
  for (const RunResult* r : {&plain, &repacked}) {
    EXPECT_TRUE(r->stats["offload"]["enabled"].get<bool>()) << r->err;
    EXPECT_EQ(r->text, resident.text) << r->err;
  }
  EXPECT_EQ(plain.stats["memory"]["weights_repacked_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(plain.stats["offload"]["total"]["bytes_rewritten"].get<uint64_t>(), 0u);
  const nlohmann::json& t = repacked.stats["offload"]["total"];
  out.weights = repacked.stats["memory"]["weights_repacked_bytes"].get<uint64_t>();
  out.slots = t["bytes_rewritten"].get<uint64_t>();
  // Every rewritten expert was read (a slice is read whole, and rewritten once).
  EXPECT_GE(t["bytes_read"].get<uint64_t>(), out.slots);
  if (out.slots) {
    EXPECT_GT(t["rewrite_s"].get<double>(), 0.0);
  }
  return out;
}

// The level the suite runs at as MOEFLOW_SIMD caps it ("" when not capped).
std::string simd_cap() {
  const char* cap = std::getenv("MOEFLOW_SIMD");
  return cap == nullptr ? "" : cap;
}

// The model at temp_path(name), generated with `gen_args` unless an earlier test did.
std::string model_once(const std::string& name, const std::string& gen_args) {
  const std::string m = temp_path(name);
  if (!std::filesystem::exists(m)) {
    const Cmd c = run_moeflow("gen-model " + gen_args + " -q -o " + m);
    EXPECT_EQ(c.rc, 0) << c.out;
  }
  return m;
}

const char* kQ4kModel = "--arch mixtral --preset small --type Q4_K --seed 5";
const char* kMxfp4Model = "--arch gpt-oss --preset small --type Q8_0 --expert-type MXFP4 --seed 5";

// Q4_K -> Q4_K_R8 at the AVX2 and AVX-512 levels.
TEST(AutoFit, RepackedWeightsGenerateTheSameTokens) {
  const std::string m = model_once("fit_q4k.gguf", kQ4kModel);
  const uint64_t repacked = expect_repack_keeps_tokens(m);
  // Every expert and attention matrix of this model is Q4_K with whole groups of 8 rows; only
  // the scalar level (MOEFLOW_SIMD=scalar) keeps its own kernel and repacks nothing.
  if (simd_cap() == "scalar")
    EXPECT_EQ(repacked, 0u);
  else
    EXPECT_GE(repacked, std::filesystem::file_size(m) / 2);
}

// gpt-oss's MXFP4 experts and Q8_0 attention and output -> MXFP4_R8 and Q8_0_R8 at the AVX2 and
// AVX-512 levels (backend/cpu/mxfp4_rows8.h, q8_0_rows8.h).
TEST(AutoFit, RepackedMxfp4ExpertsGenerateTheSameTokens) {
  const std::string m = model_once("fit_mxfp4.gguf", kMxfp4Model);
  const uint64_t repacked = expect_repack_keeps_tokens(m);
  if (simd_cap() == "scalar")
    EXPECT_EQ(repacked, 0u);
  else
    EXPECT_GE(repacked, std::filesystem::file_size(m) / 2);
}

TEST(AutoFit, OffloadedRepackGeneratesTheSameTokens) {
  for (const auto& [name, args] :
       {std::pair{"fit_q4k.gguf", kQ4kModel}, std::pair{"fit_mxfp4.gguf", kMxfp4Model}}) {
    SCOPED_TRACE(name);
    const std::string m = model_once(name, args);
    const OffloadedRepack r = expect_offloaded_repack_keeps_tokens(m);
    if (simd_cap() == "scalar") {
      EXPECT_EQ(r.weights, 0u);
      EXPECT_EQ(r.slots, 0u);
    } else {
      // Attention (and gpt-oss's Q8_0 output head) among the copies; the experts in the slots.
      EXPECT_GT(r.weights, 0u);
      EXPECT_GE(r.slots, std::filesystem::file_size(m) / 8);
    }
  }
}

TEST(AutoFit, ExplicitSettingsOverrideAndContradictionsAreErrors) {
  const std::string m = gen_model("fit_c.gguf", 16, 1024);
  const RunResult e = run_split("run -m " + m + kGen + " --expert-cache 8MiB");
  ASSERT_EQ(e.rc, 0) << e.err;
  EXPECT_EQ(e.stats["memory"]["plan"], "explicit");
  EXPECT_EQ(e.stats["offload"]["budget_bytes"].get<uint64_t>(), 8 * MiB);
  EXPECT_EQ(e.err.find("moeflow: expert offloading on"), std::string::npos)
      << "an explicit budget is not announced as auto-fit's choice: " << e.err;
  const RunResult rate = run_split("run -m " + m + kGen + " --cache-rate 0.5");
  ASSERT_EQ(rate.rc, 0) << rate.err;
  EXPECT_EQ(rate.stats["memory"]["plan"], "explicit");
  // Options that contradict each other are usage errors (exit 2), found before the model is
  // opened; a budget the model cannot use is a runtime error (exit 1).
  struct Bad {
    const char* args;
    const char* says;
    int rc;
  };
  for (const Bad& b :
       {Bad{" --no-offload --expert-cache 1GiB", "exclusive", 2},
        Bad{" --no-offload --cache-rate 0.5", "exclusive", 2},
        Bad{" --expert-cache auto --cache-rate 0.5", "--expert-cache excludes --cache-rate", 2},
        Bad{" --no-offload --mem-limit 1GiB", "--mem-limit", 2},
        Bad{" --mem-limit lots", "--mem-limit", 2},
        Bad{" --expert-cache 1KiB", "fewer than one layer's top-k", 1},
        Bad{" --mem-limit 20MiB", "does not fit", 1}}) {
    const Cmd c = run_moeflow("run -m " + m + kGen + b.args);
    EXPECT_EQ(c.rc, b.rc) << b.args << "\n" << c.out;
    EXPECT_NE(c.out.find(b.says), std::string::npos) << b.args << "\n" << c.out;
    EXPECT_EQ(c.out.find("error"), c.out.rfind("error")) << "one message: " << c.out;
  }
}

// The test that needs a real limit: skipped (saying which capability is missing) where this
// process may not create a memory cgroup.
TEST(BiggerThanRam, ResidentSetStaysWithinThePlanUnderAMemoryLimit) {
  // 4 layers x 64 experts x 786 KiB = 201 MiB of experts, 2 x 64000 x 512 B = 62.5 MiB of
  // embeddings: a 265 MiB file under a 192 MiB limit.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // A sanitizer's shadow memory and quarantine are charged to the cgroup (95 MiB at start under
  // ASan): the resident set is no longer the program's. Release and scalar runs check it.
  GTEST_SKIP() << "the resident set under a sanitizer is not the program's (shadow memory)";
#endif
  const std::string m = gen_model("rss.gguf", 64, 64000);
  const uint64_t limit = 192 * MiB;
  ASSERT_GT(std::filesystem::file_size(m), limit);
  std::string why;
  auto cg = MemoryCgroup::create("moeflow_rss_test", limit, why);
  if (!cg) GTEST_SKIP() << "needs a writable memory cgroup to limit the test's RAM: " << why;
  const RunResult ref = run_split("run -m " + m + kGen + " --no-offload");
  ASSERT_EQ(ref.rc, 0) << ref.err;
  // The file's pages cached by the reference run are charged to another group: inside the limit
  // they would be free to use, so they go first. Written back first: DONTNEED leaves dirty pages
  // (the file was just generated) in the cache, and under a busy disk the limited run then
  // mapped them in by fault-around (CI saw 27 MB of file pages instead of ~12.5).
  const int fd = ::open(m.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fdatasync(fd), 0);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  ::close(fd);
  const RunResult r = run_shell(cg->wrap(std::string(MOEFLOW_BINARY) + " run -m " + m + kGen));
  ASSERT_EQ(r.rc, 0) << "killed under the limit? " << r.err;
  ASSERT_TRUE(r.stats.is_object()) << r.err;
  const json& mem = r.stats["memory"];
  EXPECT_EQ(mem["plan"], "auto");
  ASSERT_TRUE(mem["offload"].get<bool>()) << mem.dump();
  EXPECT_NE(mem["available_source"].get<std::string>().find("cgroup"), std::string::npos)
      << mem.dump();
  EXPECT_EQ(r.text, ref.text);
  const uint64_t plan = mem["non_expert_bytes"].get<uint64_t>() + mem["kv_bytes"].get<uint64_t>() +
                        mem["state_bytes"].get<uint64_t>() + mem["snapshot_bytes"].get<uint64_t>() +
                        mem["scratch_bytes"].get<uint64_t>() + mem["budget_bytes"].get<uint64_t>();
  const uint64_t hwm = mem["vm_hwm_bytes"], rss = mem["vm_rss_bytes"];
  EXPECT_LE(hwm, plan + kRuntimeSlack) << mem.dump();
  EXPECT_LE(rss, plan + kRuntimeSlack) << mem.dump();
  // The non-expert weights are the process's own memory, not file pages left to eviction.
  const uint64_t non_expert = mem["non_expert_bytes"];
  EXPECT_GE(mem["rss_anon_bytes"].get<uint64_t>(), non_expert) << mem.dump();
  EXPECT_LT(mem["rss_file_bytes"].get<uint64_t>(), non_expert / 4) << mem.dump();
  EXPECT_LE(cg->peak(), limit);
}

}  // namespace
}  // namespace moeflow::test
