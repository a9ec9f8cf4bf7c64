// `moeflow pack -m IN -o OUT`: rewrite a GGUF for offloading. Tensor data is aligned to 4 KiB
// and each layer's expert tensors are stored together after all non-expert tensors, so every
// expert slice whose size is a multiple of 4 KiB (true for real Mixtral/Qwen shapes in K-quants)
// starts on a 4 KiB boundary: O_DIRECT reads it exactly, with no superset bytes.
// `moeflow pack --measure -m FILE` measures O_DIRECT read bandwidth of the expert slices.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/aligned_buffer.h"
#include "core/error.h"
#include "core/timer.h"
#include "experts/expert_store.h"
#include "gguf/expert_index.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"

namespace moeflow::cli {
namespace {

struct PackArgs {
  std::string in, out;
  bool measure = false;
  int threads = 4;
  double seconds = 3.0;
};

bool is_expert_tensor(const std::string& name, int& layer) {
  if (name.rfind("blk.", 0) != 0 || name.find("_exps.") == std::string::npos) return false;
  layer = std::atoi(name.c_str() + 4);
  return true;
}

int run_pack(const PackArgs& a) {
  auto in = GgufFile::open(a.in);
  const ExpertIndex idx = build_expert_index(*in);
  GgufWriter w(kDirectAlign);
  for (const GgufKV& kv : in->metadata()) {
    if (kv.key == "general.alignment") continue;
    w.set(kv.key, kv.value);
  }
  w.set_u32("general.alignment", static_cast<uint32_t>(kDirectAlign));
  w.set_bool("moeflow.packed", true);
  w.set_u32("moeflow.packed.alignment", static_cast<uint32_t>(kDirectAlign));

  std::vector<const GgufTensorInfo*> dense, experts;
  for (const auto& t : in->tensors()) {
    int layer = 0;
    (is_expert_tensor(t.name, layer) ? experts : dense).push_back(&t);
  }
  // Expert tensors grouped by layer (gate, up, down of a layer adjacent), after the rest.
  std::stable_sort(experts.begin(), experts.end(), [](const GgufTensorInfo* x, const GgufTensorInfo* y) {
    int lx = 0, ly = 0;
    is_expert_tensor(x->name, lx);
    is_expert_tensor(y->name, ly);
    return lx < ly;
  });
  uint64_t unaligned = 0, slices = 0;
  for (const auto& li : idx.layers) {
    for (const auto& e : li.slices) {
      for (const auto& s : e) {
        if (s.nbytes == 0) continue;
        ++slices;
        unaligned += s.nbytes % kDirectAlign != 0;
      }
    }
  }
  w.set_bool("moeflow.packed.slices_aligned", unaligned == 0);
  const GgufFile& f = *in;
  for (const auto* list : {&dense, &experts}) {
    for (const GgufTensorInfo* t : *list) {
      w.add_tensor(t->name, t->type, t->dims, [&f, t](uint8_t* dst, uint64_t n) {
        std::memcpy(dst, f.data(*t), std::min<uint64_t>(n, t->nbytes));
      });
    }
  }
  w.write(a.out);
  std::fprintf(stderr, "packed %s -> %s: %zu tensors, %llu expert slices, %llu not 4 KiB-aligned%s\n",
               a.in.c_str(), a.out.c_str(), in->tensors().size(), (unsigned long long)slices,
               (unsigned long long)unaligned,
               unaligned ? " (slice sizes are not multiples of 4 KiB)" : "");
  return 0;
}

// Reads random expert chunks with O_DIRECT from `threads` threads for about `seconds`.
int run_measure(const PackArgs& a) {
  auto file = GgufFile::open(a.in);
  auto store = ExpertStore::open(*file);
  struct Key { int l, e, p; };
  std::vector<Key> keys;
  uint64_t aligned_slices = 0;
  for (int l = 0; l < store->n_layers(); ++l) {
    for (int e = 0; e < store->n_experts(l); ++e) {
      for (int p = 0; p < kNumExpertProj; ++p) {
        const ChunkLoc& c = store->chunk(l, e, p);
        if (c.nbytes == 0) continue;
        keys.push_back({l, e, p});
        aligned_slices += c.inner_offset == 0 && c.aligned_len == c.nbytes;
      }
    }
  }
  if (keys.empty()) fail("{}: no expert tensors to measure", a.in);
  if (a.threads < 1 || a.threads > 64) fail("--threads must be in 1..64");
  std::shuffle(keys.begin(), keys.end(), std::mt19937(42));
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> useful{0}, read{0};
  const double t0 = now_seconds();
  std::vector<std::thread> th;
  std::vector<std::string> errors(a.threads);
  for (int i = 0; i < a.threads; ++i) {
    th.emplace_back([&, i] {
      AlignedBuffer buf(store->slot_bytes(), kDirectAlign);
      try {
        while (now_seconds() - t0 < a.seconds) {
          const size_t k = next++;
          if (k >= keys.size()) break;
          const Key& key = keys[k];
          store->read(key.l, key.e, key.p, buf.data());
          const ChunkLoc& c = store->chunk(key.l, key.e, key.p);
          useful += c.nbytes;
          read += c.aligned_len;
        }
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : th) t.join();
  for (const auto& e : errors)
    if (!e.empty()) fail("{}", e);
  const double dt = now_seconds() - t0;
  nlohmann::json j = {{"file", a.in},
                      {"packed", file->get_bool("moeflow.packed", false)},
                      {"direct_io", store->direct_io()},
                      {"threads", a.threads},
                      {"slices", keys.size()},
                      {"slices_exactly_aligned", aligned_slices},
                      {"seconds", dt},
                      {"useful_bytes", useful.load()},
                      {"read_bytes", read.load()},
                      {"useful_GBps", useful.load() / dt / 1e9},
                      {"read_GBps", read.load() / dt / 1e9}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

const bool registered = register_command(
    "pack", "Repack a GGUF for expert offloading (4 KiB-aligned expert slices)", [](CLI::App& app) {
      auto a = std::make_shared<PackArgs>();
      app.add_option("-m,--model", a->in, "input GGUF")->required();
      app.add_option("-o,--output", a->out, "output GGUF");
      app.add_flag("--measure", a->measure, "measure O_DIRECT expert read bandwidth of -m instead");
      app.add_option("--threads", a->threads, "reader threads for --measure");
      app.add_option("--seconds", a->seconds, "time limit for --measure");
      return CommandMain([a] {
        if (a->measure) return run_measure(*a);
        if (a->out.empty()) fail("pack: -o OUT is required");
        if (a->out == a->in) fail("pack: -o must differ from -m ({})", a->in);
        return run_pack(*a);
      });
    });

}  // namespace
}  // namespace moeflow::cli
