#pragma once
// A synthetic expert file for the offloading tests: every expert slice holds pseudo-random
// bytes at a 32-byte-aligned (deliberately not 4 KiB-aligned) offset, like a GGUF tensor, and
// the test keeps its own copy of the bytes as the reference.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "experts/expert_store.h"
#include "gguf/expert_index.h"
#include "policy/eviction_policy.h"

namespace moeflow::test {

struct FakeModel {
  std::string path;
  ExpertIndex index;
  std::vector<uint8_t> bytes;  // the whole file
  int n_layers = 0;
  int n_experts = 0;

  ~FakeModel() {
    if (!path.empty()) std::filesystem::remove(path);
  }
  const uint8_t* slice(int l, int e, int p) const {
    return bytes.data() + index.layers[l].slices[e][p].file_offset;
  }
  uint64_t nbytes(int l, int e, int p) const { return index.layers[l].slices[e][p].nbytes; }
};

// Layers before `first_moe_layer` are dense (no experts): by default layer 0, so tests cover
// layers without experts. Sizes differ per layer so slots must fit the largest expert.
inline void make_fake_model(FakeModel& m, const std::string& name, int n_layers, int n_experts,
                            int64_t base_cols, uint32_t seed, int first_moe_layer = 1) {
  m.path = (std::filesystem::temp_directory_path() /
            ("moeflow_offload_" + name + "_" + std::to_string(::getpid()) + ".bin"))
               .string();
  m.n_layers = n_layers;
  m.n_experts = n_experts;
  m.index.n_layers = n_layers;
  m.index.layers.resize(n_layers);
  uint64_t off = 4096 + 96;  // a "header", so slices start off 4 KiB boundaries
  std::mt19937 rng(seed);
  for (int l = 0; l < n_layers; ++l) {
    ExpertLayerIndex& li = m.index.layers[l];
    li.layer = l;
    if (l < first_moe_layer) continue;
    li.n_expert = n_experts;
    li.slices.resize(n_experts);
    const int64_t cols = base_cols + 8 * (l % 3);
    const int64_t rows = 24 + 8 * (l % 2);
    for (int p = 0; p < kNumExpertProj; ++p) {
      for (int e = 0; e < n_experts; ++e) {
        ExpertSlice& s = li.slices[e][p];
        s.type = GgmlType::F32;
        s.rows = p == 2 ? cols : rows;
        s.cols = p == 2 ? rows : cols;
        s.nbytes = static_cast<uint64_t>(s.rows * s.cols * 4);
        s.file_offset = off;
        off += (s.nbytes + 31) / 32 * 32 + 32 * (rng() % 3);
      }
    }
  }
  m.bytes.resize(off + 1000);  // trailing bytes not 4 KiB-aligned
  for (auto& b : m.bytes) b = static_cast<uint8_t>(rng());
  FILE* f = std::fopen(m.path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot create " + m.path);
  std::fwrite(m.bytes.data(), 1, m.bytes.size(), f);
  std::fflush(f);
  ::fsync(fileno(f));
  // Out of the page cache, so the memory test can check reads never bring it back.
  ::posix_fadvise(fileno(f), 0, 0, POSIX_FADV_DONTNEED);
  std::fclose(f);
}

// Bytes of one cache slot for the model's experts (the budget unit of the provider tests).
inline uint64_t slot_bytes(const FakeModel& m) {
  return ExpertStore({m.path}, m.index).slot_bytes();
}

// Minimal LRU for tests, independent of the policy module.
class TestLru : public EvictionPolicy {
 public:
  std::string name() const override { return "test-lru"; }
  void on_access(ExpertKey k, uint64_t t) override { last_[key(k)] = t; }
  void on_insert(ExpertKey k, uint64_t t) override { last_[key(k)] = t; }
  void on_evict(ExpertKey k) override { last_.erase(key(k)); }
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t) override {
    ExpertKey best = c[0];
    for (auto k : c) {
      if (last_[key(k)] < last_[key(best)]) best = k;
    }
    return best;
  }

 private:
  static uint64_t key(ExpertKey k) {
    return (uint64_t(uint32_t(k.layer)) << 32) | uint32_t(k.expert);
  }
  std::unordered_map<uint64_t, uint64_t> last_;
};

}  // namespace moeflow::test
