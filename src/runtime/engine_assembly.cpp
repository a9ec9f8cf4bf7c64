#include "runtime/engine_assembly.h"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "core/thread_pool.h"
#include "core/watchdog.h"
#include "model/hparams.h"
#include "runtime/backend_choice.h"
#include "runtime/cpu_repack.h"
#include "runtime/hybrid_costs.h"
#include "runtime/memory_facts.h"
#include "trace/importers.h"

namespace moeflow {

namespace {

// --backend cuda: every expert in VRAM, or a VRAM expert cache (runtime/vram_plan.h: the plan
// is announced on stderr when it is a cache), with the predictor plugged in as on the CPU.
LoadedEngine load_device_engine(std::shared_ptr<const GgufFile> file, EngineOptions opt,
                                const OffloadOptions& offload, const FitContext& fc) {
  LoadedEngine le;
  le.plan.how = "device";
  const ModelMemory mem = model_memory(*file, fc);
  const MemoryFacts facts = read_memory_facts();
  std::shared_ptr<DeviceLink> link = make_device_link(opt.backend);
  uint64_t free_vram = 0, total_vram = 0;
  link->memory_info(free_vram, total_vram);
  le.vram = plan_vram(offload, mem, free_vram, total_vram, facts.available());
  OffloadOptions o = offload;
  if (le.vram.cache) {
    std::fprintf(stderr, "moeflow: %s\n", le.vram.reason.c_str());
    o.expert_cache = le.vram.budget;
    DeviceTarget target{link, le.vram.source};
    target.hybrid = offload.cpu_experts;
    target.cpu_threads = opt.n_threads;
    le.offload = make_offload(o, *file, &target);
    if (target.hybrid)
      std::fprintf(stderr,
                   "moeflow: CPU/GPU hybrid: %s; a miss the CPU finishes first is computed there\n",
                   describe(le.offload.hybrid).c_str());
    if (!le.offload.device_transfer->pin_refusal().empty())
      std::fprintf(stderr,
                   "moeflow: note: %s; copying experts through pinned staging buffers instead\n",
                   le.offload.device_transfer->pin_refusal().c_str());
  } else {
    if (offload.cpu_experts)
      std::fprintf(
          stderr,
          "moeflow: note: --cpu-experts: every expert fits in VRAM, none runs on the CPU\n");
    le.offload = make_offload(o, *file);
  }
  le.plan.options = le.offload.options;
  le.engine = std::make_unique<Engine>(std::move(file), opt, le.offload.provider);
  le.offload.attach(le.engine->context(), le.engine->model());
  return le;
}

// The trace of --routing-trace, matched to the model's routing shape (an Error naming both
// shapes otherwise), or null.
std::unique_ptr<trace::RoutingReplay> load_replay(const GgufFile& file, const OffloadOptions& o) {
  if (o.routing_trace.empty()) return nullptr;
  const HParams hp = load_hparams(file);
  std::string name;
  for (const std::string& p : o.routing_trace) name += (name.empty() ? "" : ",") + p;
  return std::make_unique<trace::RoutingReplay>(
      trace::load_any(o.routing_trace), name,
      trace::ReplayShape{hp.n_layer, hp.n_expert, hp.n_expert_used}, o.routing_request);
}

void attach_replay(LoadedEngine& le) {
  if (le.replay) le.engine->context().moe().set_routing_override(le.replay.get());
}

}  // namespace

LoadedEngine load_engine(std::shared_ptr<const GgufFile> file, EngineOptions opt,
                         const OffloadOptions& offload, int logits_rows) {
  validate(offload, opt.backend);
  LoadedEngine le;
  FitContext fc;
  fc.n_ctx = resolve_n_ctx(opt.n_ctx, load_hparams(*file).n_ctx_train);
  fc.batch = (int)std::min<int64_t>(std::max(1, opt.batch), fc.n_ctx);
  fc.threads = opt.n_threads > 0 ? opt.n_threads : default_thread_count();
  fc.logits_rows = logits_rows;
  fc.per_layer = offload.per_layer;
  fc.state_snapshots = opt.state_snapshots;
  std::unique_ptr<trace::RoutingReplay> replay = load_replay(*file, offload);
  if (opt.backend != BackendKind::Cpu) {
    LoadedEngine dev = load_device_engine(std::move(file), opt, offload, fc);
    dev.replay = std::move(replay);
    attach_replay(dev);
    return dev;
  }
  le.plan = plan_offload(offload, *file, fc, read_memory_facts());
  // A model that fits is read into the process's memory, where it gets 2 MiB pages; the page
  // cache maps a file in 4 KiB pages. Measured on a Zen 4 EPYC (2026-11-28, Mixtral shape, 4
  // layers Q4_K, 2 threads, 8 interleaved runs): decode median 24.1 -> 26.6 tok/s; a streaming
  // read of 640 MiB 28-38 GB/s in 4 KiB pages, 34-56 in huge pages. Not when offloading (the
  // file is the experts' slow tier; the non-expert weights are copied out anyway, CpuBackend)
  // nor with --no-offload (a model that may not fit stays evictable).
  if (le.plan.how == "auto" && !le.plan.offload() && !offload.mmap) {
    phase("reading the model into memory");
    // The matrices with a CPU layout of their own are rewritten on the way (in place, the same
    // bytes; runtime/cpu_repack.h). Measured on a Zen 4 EPYC (2026-11-28, Mixtral shape, 4
    // layers Q4_K, 2 threads): see docs/kernels.md, "Q4_K_R8".
    std::atomic<uint64_t> repacked{0};
    file = file->read_into_memory(offload.no_repack ? GgufFile::TensorTransform{}
                                                    : cpu_repack_transform(&repacked));
    le.plan.read_into_memory = true;
    le.plan.repacked_bytes = repacked;
  }
  if (le.plan.how == "auto" && le.plan.offload())
    std::fprintf(stderr, "moeflow: %s\n", le.plan.fit.reason.c_str());
  le.offload = make_offload(le.plan.options, *file);
  // Where auto-fit found the model too big for RAM, reads set the speed. Measured on the
  // Qwen3-30B-A3B shape at 1/4 of its size in RAM (docs/bigger-than-ram.md): the packed copy
  // decoded 1.13-1.32x faster in three interleaved series, same bytes read; on Mixtral's 33 MB
  // slices, no change.
  if (le.plan.how == "auto" && le.offload.provider) {
    const ExpertStore& store = le.offload.provider->store();
    if (store.direct_io() && !store.slices_aligned())
      std::fprintf(stderr,
                   "moeflow: note: the expert slices of %s are not 4 KiB-aligned, so every read "
                   "covers a larger aligned range; `moeflow pack -m %s -o PACKED.gguf` aligns them "
                   "(small experts read faster from a packed file)\n",
                   store.path().c_str(), store.path().c_str());
  }
  opt.resident_weights = le.offload.provider != nullptr;
  opt.repack_weights = offload.repack_offloaded;
  le.engine = std::make_unique<Engine>(std::move(file), opt, le.offload.provider);
  if (opt.resident_weights) le.plan.repacked_bytes = le.engine->repacked_weight_bytes();
  le.offload.attach(le.engine->context(), le.engine->model());
  le.replay = std::move(replay);
  attach_replay(le);
  return le;
}

LoadedEngine load_engine(const std::string& path, const EngineOptions& opt,
                         const OffloadOptions& offload, int logits_rows) {
  validate(offload, opt.backend);  // before the file is opened
  return load_engine(std::shared_ptr<const GgufFile>(GgufFile::open(path)), opt, offload,
                     logits_rows);
}

}  // namespace moeflow
