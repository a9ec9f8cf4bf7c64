// `moeflow bench`: prefill and decode throughput on fixed token ids, median of --reps.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/matmul.h"
#include "backend/cuda/cuda_backend.h"  // CudaGraphCounts (plain C++; defined in CUDA builds)
#include "backend/standin/standin_device.h"
#include "cli/command.h"
#include "cli/common_options.h"
#include "cli/offload_flags.h"
#include "core/error.h"
#include "core/median.h"
#include "core/timer.h"
#include "gguf/gguf_file.h"
#include "runtime/engine.h"
#include "trace/recorder.h"
#include "trace/routing_replay.h"
#include "trace/trace.h"

namespace moeflow::cli {
namespace {

struct BenchArgs {
  std::string model;
  int n_prompt = 512;
  int n_gen = 64;
  int threads = 0;
  int reps = 3;
  int batch = 512;
  bool json = false;
  std::string trace_out;  // routing of the timed passes, for the simulator's bounds
  BackendKind backend = BackendKind::Cpu;
  OffloadOptions offload;
};

// --backend cuda: where the experts went, VRAM in use, and the bus: the pinned H2D bandwidth
// measured here against what the cache's copies achieved (bytes copied / time copying, per
// copy lane), and the CPU/GPU expert split (--cpu-experts auto: the hybrid's uses and costs).
nlohmann::json vram_json(const LoadedEngine& le, BackendKind kind) {
  nlohmann::json v;
  const VramPlan& p = le.vram;
  v["expert_cache"] = p.cache;
  v["budget_bytes"] = p.budget;
  v["free_before_bytes"] = p.free_vram;
  v["total_bytes"] = p.total_vram;
  v["plan"] = p.reason;
  std::shared_ptr<DeviceLink> link = le.offload.link ? le.offload.link : make_device_link(kind);
  uint64_t free_now = 0, total = 0;
  link->memory_info(free_now, total);
  v["used_bytes"] = total - free_now;
  v["pinned_h2d_gbps"] = measure_pinned_h2d(*link) / 1e9;
  if (le.offload.device_transfer) {
    const LayerOffloadStats st = le.offload.provider->stats().total();
    v["source"] = le.offload.device_transfer->name();
    v["pinned_source_bytes"] = le.offload.device_transfer->pinned_bytes();
    v["copy_gbps"] = st.read_s > 0 ? double(st.bytes_read) / st.read_s / 1e9 : 0.0;
    v["cpu_experts"] = st.cpu_computed;  // expert uses computed by the CPU (hybrid)
    v["gpu_experts"] = st.acquires - st.cpu_computed;
    if (le.offload.hybrid.valid()) {
      v["hybrid_cpu_expert_ms"] = le.offload.hybrid.cpu_expert_s * 1e3;
      v["hybrid_cpu_token_ms"] = le.offload.hybrid.cpu_token_s * 1e3;
    }
    return v;
  }
  v["cpu_experts"] = 0;
  return v;
}

int run_bench(const BenchArgs& a) {
  if (a.n_prompt < 0 || a.n_gen < 0 || a.reps <= 0)
    fail("bench: -p and -n must be >= 0 and --reps > 0");
  EngineOptions opt;
  opt.n_threads = a.threads;
  opt.n_ctx = std::max(1, a.n_prompt + a.n_gen);
  opt.batch = std::max(1, std::min(a.batch, std::max(1, a.n_prompt)));
  opt.backend = a.backend;
  LoadedEngine loaded = load_engine(a.model, opt, a.offload);
  Engine& eng = *loaded.engine;
  const OffloadSession& offload = loaded.offload;
  // The recorder is chained behind the offloading predictor (or alone without one).
  trace::Trace routing;
  std::unique_ptr<trace::TraceRecorder> rec;
  if (!a.trace_out.empty()) {
    const HParams& hp = eng.model().hparams();
    routing.model =
        eng.file().has("general.name") ? eng.file().get_string("general.name") : a.model;
    routing.source = "moeflow bench -m " + a.model;
    routing.n_layers = hp.n_layer;
    routing.n_experts = hp.n_expert;
    routing.top_k = hp.n_expert_used;
    rec = std::make_unique<trace::TraceRecorder>(routing, 0);
    loaded.offload.attach(eng.context(), eng.model(), rec.get());
    if (!offload.provider || loaded.offload.options.prefetch == "none")
      eng.context().set_observer(rec.get());
  }
  const int64_t V = eng.n_vocab();
  // Fixed pseudo-random ids (an LCG) so every run and every engine sees the same tokens.
  std::vector<int32_t> toks(std::max(a.n_prompt, a.n_gen));
  uint64_t s = 12345;
  for (auto& t : toks) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t = (int32_t)((s >> 33) % (uint64_t)V);
  }
  // A replay maps bench's prompt onto the request's rows in recorded order and its decode steps
  // (from position 0, as llama-bench's tg) onto the decode rows; both checked before any rep.
  auto replay_prefill = [&] {
    if (loaded.replay) loaded.replay->begin_sequence(a.n_prompt, fmt::format("-p {}", a.n_prompt));
  };
  auto replay_decode = [&] {
    if (loaded.replay) loaded.replay->begin_decode(a.n_gen, fmt::format("-n {}", a.n_gen));
  };
  if (a.n_prompt > 0) replay_prefill();
  if (a.n_gen > 0) replay_decode();
  // A placement policy's initial residents (static, daop) are read in the background from the
  // start; bench counts that as loading, like the weights, and measures from a placed cache (as
  // the simulator starts), instead of timing their reads as the first tokens' misses.
  if (offload.provider) offload.provider->drain();
  std::vector<double> pp, tg;
  StandInCounts decode_counts;  // the stand-in device's work over the last decode rep
  CudaGraphCounts cuda_decode;  // the CUDA backend's, likewise
  for (int r = 0; r < a.reps; ++r) {
    if (a.n_prompt > 0) {
      eng.reset();
      replay_prefill();
      if (rec) rec->begin_request(trace::Phase::prefill);
      const double t0 = now_seconds();
      eng.prefill(std::span<const int32_t>(toks.data(), a.n_prompt), false, nullptr);
      // A device runs behind the host: the prefill is done when its last op is (without this
      // the first decode step paid for the prefill's tail).
      eng.backend().synchronize();
      pp.push_back(a.n_prompt / (now_seconds() - t0));
    }
    if (a.n_gen > 0) {
      eng.reset();
      replay_decode();
      if (offload.provider) offload.provider->reset_stats();  // report decode only
      if (rec) rec->begin_request(trace::Phase::decode);
      const StandInCounts c0 = standin_counts();
#if MOEFLOW_HAVE_CUDA
      const CudaGraphCounts g0 = cuda_graph_counts(eng.backend());
#endif
      const double t0 = now_seconds();
      for (int i = 0; i < a.n_gen; ++i) eng.decode(toks[i]);
      tg.push_back(a.n_gen / (now_seconds() - t0));
      // --prefetch-wait counts logically (the simulator's terms): the prefetches the last token
      // issued are read before the statistics are taken, as a simulated one counts at issue
      // (after the timing, so the rate is unchanged).
      if (offload.provider && a.offload.prefetch_wait) offload.provider->drain();
      decode_counts = standin_counts() - c0;
#if MOEFLOW_HAVE_CUDA
      cuda_decode = cuda_graph_counts(eng.backend()) - g0;
#endif
    }
  }
  if (rec) {
    eng.context().set_observer(nullptr);
    routing.validate(a.trace_out);
    trace::write_trace(routing, a.trace_out);
  }
  const double prefill_tps = median(pp);
  const double decode_tps = median(tg);
  uint64_t model_bytes = 0;
  for (const auto& t : eng.file().tensors()) model_bytes += t.nbytes;
  const HParams& hp = eng.model().hparams();
  if (a.json) {
    nlohmann::json j;
    j["model"] = a.model;
    j["arch"] = hp.arch_name;
    j["n_prompt"] = a.n_prompt;
    j["n_gen"] = a.n_gen;
    j["reps"] = a.reps;
    j["threads"] = eng.pool().size();
    j["simd"] = simd_level();
    j["backend"] = eng.backend().name();
    j["prefill_tps"] = prefill_tps;
    j["decode_tps"] = decode_tps;
    j["model_bytes"] = model_bytes;
    j["expert_bytes"] = eng.model().total_expert_bytes();
    j["active_expert_bytes_per_token"] = eng.model().active_expert_bytes_per_token();
    j["non_expert_bytes"] = eng.model().weights().non_expert_bytes;
    j["kv_bytes_per_token"] = eng.model().kv_bytes_per_token();
    j["kv_bytes_per_token_per_head"] = eng.model().kv_bytes_per_token_per_head();
    if (offload.provider) j["offload"] = offload_stats_json(offload, false);
    if (eng.backend().space() == MemSpace::Device) j["vram"] = vram_json(loaded, opt.backend);
    if (opt.backend == BackendKind::Cuda && a.n_gen > 0) {
      // Per decode token: graphs launched / built / updated, host waits, host registrations.
      const double n = a.n_gen;
      const CudaGraphCounts& c = cuda_decode;
      j["cuda"] = {{"graph_launches_per_token", c.launches / n},
                   {"graph_instantiations_per_token", c.instantiations / n},
                   {"graph_updates_per_token", c.updates / n},
                   {"sync_points_per_token", c.sync_points / n},
                   {"host_registrations_per_token", c.registrations / n}};
    }
    if (opt.backend == BackendKind::StandIn && a.n_gen > 0) {
      // What a device would be asked per decode token: ops on its stream, host waits for it,
      // host -> device copies (docs/gpu.md, "The stand-in device").
      const double n = a.n_gen;
      const StandInCounts& c = decode_counts;
      j["standin"] = {{"ops_per_token", c.ops / n},
                      {"syncs_per_token", c.syncs / n},
                      {"uploads_per_token", c.uploads / n},
                      {"upload_bytes_per_token", c.upload_bytes / n},
                      {"lane_copies_per_token", c.lane_copies / n},
                      {"lane_bytes_per_token", c.lane_bytes / n},
                      {"pins_per_token", c.pins / n},
                      {"pins_refused_per_token", c.pins_refused / n}};
    }
    j["memory"] = memory_json(loaded.plan);
    if (loaded.replay) j["routing_replay"] = trace::replay_json(*loaded.replay);
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("model %s (%s, %.1f MiB), %d threads, %s, backend %s\n", a.model.c_str(),
                hp.arch_name.c_str(), model_bytes / 1048576.0, eng.pool().size(), simd_level(),
                eng.backend().name().c_str());
    std::printf("prefill pp%d: %.2f tok/s\n", a.n_prompt, prefill_tps);
    std::printf("decode  tg%d: %.2f tok/s\n", a.n_gen, decode_tps);
    if (loaded.replay) std::printf("%s\n", loaded.replay->describe().c_str());
  }
  return 0;
}

const bool registered_bench =
    register_command("bench", "Measure prefill and decode speed", [](CLI::App& app) {
      auto a = std::make_shared<BenchArgs>();
      app.add_option("-m,--model", a->model, "GGUF model")->required();
      app.add_option("-p,--n-prompt", a->n_prompt, "prompt tokens");
      app.add_option("-n,--n-gen", a->n_gen, "generated tokens");
      add_threads_option(app, a->threads, "threads (0 = all cores)");
      app.add_option("-b,--batch-size", a->batch, "prefill chunk size");
      app.add_option("--reps", a->reps, "repetitions (median is reported)");
      app.add_flag("--json", a->json, "print one JSON object");
      add_phase_lines_flag(app);
      app.add_option(
          "--trace-out", a->trace_out,
          "record the routing of the timed passes to this trace file (moeflow sim replays "
          "it, e.g. for Belady's bytes on the same routing)");
      add_offload_options(app, a->offload, &a->backend);
      add_routing_replay_options(app, a->offload);
      add_backend_option(app, a->backend);
      return CommandMain([a] { return run_bench(*a); });
    });

}  // namespace
}  // namespace moeflow::cli
