// `moeflow pack -m IN -o OUT`: rewrite a GGUF for offloading. Tensor data is aligned to 4 KiB
// and each layer's expert tensors are stored together after all non-expert tensors, so every
// expert slice whose size is a multiple of 4 KiB (true for real Mixtral/Qwen shapes in K-quants)
// starts on a 4 KiB boundary: O_DIRECT reads it exactly, with no superset bytes.
// `moeflow pack --measure -m FILE` measures O_DIRECT read bandwidth of the expert slices.
// `--low TYPE` adds a low-precision copy of every expert tensor (HOBBIT's mixed precision,
// docs/lossy-modes.md): "blk.N.ffn_X_exps.low" beside "blk.N.ffn_X_exps.weight", same shape,
// quantized to TYPE from the dequantized expert, stored right after the layer's experts; the
// metadata key moeflow.low.type names TYPE. Rows whose length TYPE's blocks do not divide get
// the same fallback type `moeflow quantize` would use (the tensor's own type says which).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/aligned_buffer.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "experts/expert_store.h"
#include "experts/read_bench.h"
#include "gguf/expert_index.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf/tensor_names.h"
#include "model/gen/model_generator.h"
#include "quant/quant.h"
#include "runtime/offload_session.h"

namespace moeflow::cli {
namespace {

struct PackArgs {
  std::string in, out;
  bool measure = false;
  int threads = 4;
  double seconds = 3.0;
  std::string low;     // type of the low-precision expert copies; empty: none
  bool sweep = false;  // --measure by request size x queue depth x engine
  std::vector<std::string> sizes = {"64KiB", "256KiB", "1MiB", "4MiB", "16MiB"};
  std::vector<int> depths = {1, 2, 4, 8, 16, 32};
  std::vector<std::string> engines = {"pread", "uring"};
};

bool is_expert_tensor(const std::string& name, int& layer) {
  const auto parsed = parse_expert_tensor_name(name);
  if (!parsed) return false;
  layer = parsed->layer;
  return true;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

GgmlType parse_low_type(const std::string& name) {
  const auto t = type_from_name(name);
  if (!t || !can_quantize(*t))
    fail(
        "pack --low: '{}' is not a type moeflow can write (use one of Q2_K, Q3_K, Q4_0, Q4_1, "
        "Q4_K, Q5_0, Q5_K, Q6_K, Q8_0, IQ4_NL)",
        name);
  return *t;
}

// Dequantizes each row of the expert tensor and re-encodes it in `to`, rows split over the pool.
void make_low_copy(ThreadPool& pool, const uint8_t* src, GgmlType from, uint8_t* dst, GgmlType to,
                   int64_t row_len, int64_t rows) {
  const size_t in_rb = row_bytes(from, row_len), out_rb = row_bytes(to, row_len);
  pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
    std::vector<float> buf(static_cast<size_t>(row_len));
    for (int64_t r = b; r < e; ++r) {
      dequantize_row(from, src + r * in_rb, buf.data(), row_len);
      quantize_row(to, buf.data(), dst + r * out_rb, row_len);
    }
  });
}

int run_pack(const PackArgs& a) {
  auto in = GgufFile::open(a.in);
  const ExpertIndex idx = build_expert_index(*in);
  const bool low = !a.low.empty();
  const GgmlType low_type = low ? parse_low_type(a.low) : GgmlType::F32;
  if (low && idx.total_expert_bytes() == 0)
    fail("pack --low: {} has no expert tensors (blk.N.ffn_*_exps.weight) to copy", a.in);
  GgufWriter w(kDirectAlign);
  for (const GgufKV& kv : in->metadata()) {
    if (kv.key == "general.alignment") continue;
    if (low && kv.key.rfind("moeflow.low.", 0) == 0) continue;  // replaced below
    w.set(kv.key, kv.value);
  }
  if (low) w.set_string("moeflow.low.type", type_name(low_type));
  w.set_u32("general.alignment", static_cast<uint32_t>(kDirectAlign));
  w.set_bool("moeflow.packed", true);
  w.set_u32("moeflow.packed.alignment", static_cast<uint32_t>(kDirectAlign));

  std::vector<const GgufTensorInfo*> dense, experts;
  for (const auto& t : in->tensors()) {
    int layer = 0;
    // --low rebuilds the copies of a file that already has some.
    if (low && is_expert_tensor(t.name, layer) && ends_with(t.name, ".low")) continue;
    (is_expert_tensor(t.name, layer) ? experts : dense).push_back(&t);
  }
  // Expert tensors grouped by layer (gate, up, down of a layer adjacent; low copies after the
  // layer's own experts), after the rest.
  std::stable_sort(experts.begin(), experts.end(),
                   [](const GgufTensorInfo* x, const GgufTensorInfo* y) {
                     int lx = 0, ly = 0;
                     is_expert_tensor(x->name, lx);
                     is_expert_tensor(y->name, ly);
                     const bool xl = ends_with(x->name, ".low"), yl = ends_with(y->name, ".low");
                     return lx != ly ? lx < ly : xl < yl;
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
  auto pool = std::make_shared<ThreadPool>(
      a.threads > 0 ? a.threads
                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  int n_low = 0, n_fallback = 0;
  const auto add_copy = [&](const GgufTensorInfo* t) {
    w.add_tensor(t->name, t->type, t->dims, [&f, t](uint8_t* dst, uint64_t n) {
      std::memcpy(dst, f.data(*t), std::min<uint64_t>(n, t->nbytes));
    });
  };
  for (const GgufTensorInfo* t : dense) add_copy(t);
  for (size_t i = 0; i < experts.size(); ++i) {
    const GgufTensorInfo* t = experts[i];
    add_copy(t);
    // After the last tensor of a layer's experts: that layer's low copies.
    int l = 0, next = -1;
    is_expert_tensor(t->name, l);
    if (i + 1 < experts.size()) is_expert_tensor(experts[i + 1]->name, next);
    if (!low || next == l) continue;
    for (size_t j = 0; j <= i; ++j) {
      const GgufTensorInfo* src = experts[j];
      int lj = 0;
      is_expert_tensor(src->name, lj);
      if (lj != l || !ends_with(src->name, ".weight")) continue;
      if (!can_dequantize(src->type))
        fail("pack --low: tensor '{}' is {}, which moeflow cannot decode", src->name,
             type_name(src->type));
      const GgmlType to = gen::resolve_type(low_type, src->dims[0]);
      n_fallback += to != low_type;
      ++n_low;
      if (row_bytes(to, src->dims[0]) >= row_bytes(src->type, src->dims[0]))
        std::fprintf(stderr,
                     "pack: warning: the %s copy of %s is not smaller than its %s original\n",
                     type_name(to), src->name.c_str(), type_name(src->type));
      const std::string name = src->name.substr(0, src->name.size() - 6) + "low";
      const GgmlType from = src->type;
      const int64_t row_len = src->dims[0], rows = src->rows();
      const uint8_t* data = f.data(*src);
      w.add_tensor(name, to, src->dims,
                   [pool, data, from, to, row_len, rows](uint8_t* dst, uint64_t) {
                     make_low_copy(*pool, data, from, dst, to, row_len, rows);
                   });
    }
  }
  w.write(a.out);
  if (low)
    std::fprintf(stderr,
                 "pack: %d low-precision expert copies in %s (%d in a fallback type: row "
                 "length not a multiple of its block)\n",
                 n_low, type_name(low_type), n_fallback);
  std::fprintf(
      stderr, "packed %s -> %s: %zu tensors, %llu expert slices, %llu not 4 KiB-aligned%s\n",
      a.in.c_str(), a.out.c_str(), in->tensors().size(), (unsigned long long)slices,
      (unsigned long long)unaligned, unaligned ? " (slice sizes are not multiples of 4 KiB)" : "");
  return 0;
}

// Reads random expert chunks with O_DIRECT from `threads` threads for about `seconds`.
int run_measure(const PackArgs& a) {
  auto file = GgufFile::open(a.in);
  auto store = ExpertStore::open(*file);
  struct Key {
    int l, e, p;
  };
  std::vector<Key> keys;
  uint64_t aligned_slices = 0;
  for (int l = 0; l < store->n_layers(); ++l) {
    for (int e = 0; e < store->n_experts(l); ++e) {
      for (int p = 0; p < kNumExpertProj; ++p) {
        const ChunkLoc& c = store->chunk(l, e, p);
        if (c.nbytes == 0) continue;
        keys.push_back({l, e, p});
        aligned_slices += c.exact();
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

// O_DIRECT bandwidth over the expert bytes of the file by request size, queue depth and engine
// (experts/read_bench.h): one JSON object with a row per point and the best point.
int run_sweep(const PackArgs& a) {
  auto file = GgufFile::open(a.in);
  const ExpertIndex idx = build_expert_index(*file);
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const auto& li : idx.layers)
    for (const auto& e : li.slices)
      for (const auto& s : e)
        if (s.nbytes > 0)
          lo = std::min(lo, s.file_offset), hi = std::max(hi, s.file_offset + s.nbytes);
  if (hi == 0) fail("{}: no expert tensors to measure", a.in);
  ReadBenchConfig c;
  c.path = a.in;
  c.region_begin = lo;
  c.region_end = hi;
  for (const std::string& s : a.sizes) c.sizes.push_back(parse_byte_size(s, "--sizes"));
  c.depths = a.depths;
  c.engines = a.engines;
  c.seconds = a.seconds;
  nlohmann::json rows = nlohmann::json::array();
  ReadBenchPoint best;
  for (const ReadBenchPoint& p : run_read_bench(c)) {
    rows.push_back({{"engine", p.engine},
                    {"request_bytes", p.request_bytes},
                    {"depth", p.depth},
                    {"GBps", p.gbps()}});
    if (p.gbps() > best.gbps()) best = p;
  }
  nlohmann::json j = {{"file", a.in},
                      {"seconds_per_point", a.seconds},
                      {"points", rows},
                      {"best",
                       {{"engine", best.engine},
                        {"request_bytes", best.request_bytes},
                        {"depth", best.depth},
                        {"GBps", best.gbps()}}}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

const bool registered_pack = register_command(
    "pack", "Repack a GGUF for expert offloading (4 KiB-aligned expert slices)", [](CLI::App& app) {
      auto a = std::make_shared<PackArgs>();
      app.add_option("-m,--model", a->in, "input GGUF")->required();
      app.add_option("-o,--output", a->out, "output GGUF");
      app.add_flag("--measure", a->measure, "measure O_DIRECT expert read bandwidth of -m instead");
      app.add_option("--threads", a->threads,
                     "reader threads for --measure, quantizer threads for --low");
      app.add_option("--low", a->low,
                     "also store a low-precision copy of every expert in this type (Q2_K, Q3_K, "
                     "Q4_0, ...) for --mode hobbit");
      app.add_option("--seconds", a->seconds, "time limit for --measure (per point with --sweep)");
      app.add_flag(
          "--sweep", a->sweep,
          "--measure: bandwidth by request size x queue depth x engine (pread threads, io_uring)");
      app.add_option("--sizes", a->sizes, "--sweep: request sizes")->delimiter(',');
      app.add_option("--depths", a->depths, "--sweep: queue depths (reads in flight)")
          ->delimiter(',');
      app.add_option("--engines", a->engines, "--sweep: pread, uring")->delimiter(',');
      return CommandMain([a] {
        if (a->sweep && !a->measure)
          fail("pack: --sweep is a kind of --measure: give --measure too");
        if (a->measure) return a->sweep ? run_sweep(*a) : run_measure(*a);
        if (a->out.empty()) fail("pack: -o OUT is required");
        if (a->out == a->in) fail("pack: -o must differ from -m ({})", a->in);
        return run_pack(*a);
      });
    });

}  // namespace
}  // namespace moeflow::cli
