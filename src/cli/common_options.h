#pragma once
// Pieces shared by the commands that run a model (run, chat, serve, bench, perplexity), so that
// a flag means the same thing, with the same help, everywhere, and loading is done one way.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "core/watchdog.h"
#include "cli/offload_flags.h"
#include "model/hparams.h"
#include "runtime/engine.h"
#include "runtime/offload_plan.h"
#include "runtime/hybrid_costs.h"
#include "runtime/vram_plan.h"
#include "gguf/gguf_file.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace moeflow::cli {

// llama.cpp's sampling flags. `prefix` goes before each description ("default " for serve,
// whose values are defaults that requests override). The seed is left to the caller: its
// meaning differs between commands. Values are checked when parsing ends, with the rules the
// server applies to requests (sampling/sampler.h), so `--temp -1` is a usage error before the
// model is loaded.
inline void add_sampling_options(CLI::App& app, SamplerParams& sp, const std::string& prefix = "") {
  app.add_option("--temp", sp.temperature, prefix + "temperature, 0..100 (0 = greedy)");
  app.add_option("--top-k", sp.top_k, prefix + "top-k (0 = off)");
  app.add_option("--top-p", sp.top_p, prefix + "top-p, 0..1 (1 = off)");
  app.add_option("--min-p", sp.min_p, prefix + "min-p, 0..1 (0 = off)");
  app.add_option("--repeat-penalty", sp.repeat_penalty, prefix + "repetition penalty, > 0 (1 = off)");
  app.add_option("--repeat-last-n", sp.repeat_last_n, "penalty window (-1 = all)");
  app.add_option("--presence-penalty", sp.presence_penalty, prefix + "presence penalty, -2..2 (0 = off)");
  app.add_option("--frequency-penalty", sp.frequency_penalty, prefix + "frequency penalty, -2..2 (0 = off)");
  app.parse_complete_callback([&sp] {
    if (auto e = check_sampler_params(sp))
      throw CLI::ValidationError(e->flag, fmt::format("{}, got {}", e->requirement, e->value));
  });
}

// -t/--threads: 0 means every CPU this process may run on; more than that is capped (with a
// warning): extra threads only time-slice the same cores (-t 1000 ran 400x slower on 2 CPUs).
inline CLI::Option* add_threads_option(CLI::App& app, int& threads, const std::string& help) {
  return app.add_option_function<int>(
      "-t,--threads",
      [&threads](const int& v) {
        if (v < 0) throw CLI::ValidationError("-t,--threads", fmt::format("must be >= 0 (0 = all CPUs), got {}", v));
        const int cpus = default_thread_count();
        if (v > cpus) {
          std::fprintf(stderr, "moeflow: warning: -t %d: this process may run on %d CPUs; using %d threads\n", v,
                       cpus, cpus);
          threads = cpus;
          return;
        }
        threads = v;
      },
      help);
}

// --backend cpu|cuda|standin (EngineOptions::backend): a name outside the list is a usage error
// (exit 2, before the model is opened); a missing CUDA build or device is reported when the
// engine is made.
inline void add_backend_option(CLI::App& app, std::string& backend) {
  app.add_option("--backend", backend,
                 "cpu (default); cuda: weights, KV cache and experts in VRAM (needs a build with "
                 "-DMOEFLOW_CUDA=ON and a CUDA device); standin: the stand-in device, the CPU's "
                 "arithmetic behind a GPU's memory rules, for checking the device path without "
                 "a GPU (VRAM size: MOEFLOW_STANDIN_VRAM, default 16GiB)")
      ->check(CLI::IsMember({"cpu", "cuda", "standin"}));
}

// -v: phase lines with timestamps on stderr (core/watchdog.h).
inline void add_phase_lines_flag(CLI::App& app) {
  app.add_flag_callback("-v,--verbose", [] { set_phase_lines(true); },
                        "phase lines with timestamps on stderr (loading, prefill, decode); "
                        "MOEFLOW_WATCHDOG=SECONDS adds every thread's stack when nothing progresses");
}

// The model's tokenizer for a command that cannot work on token ids alone; warnings about the
// vocabulary go to stderr.
inline std::unique_ptr<Tokenizer> require_tokenizer(const GgufFile& file, const char* command) {
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = Tokenizer::from_gguf(file);
  } catch (const Error& e) {
    fail("{} needs the model's tokenizer: {}", command, e.what());
  }
  if (!tok->warning().empty()) std::fprintf(stderr, "moeflow: warning: %s\n", tok->warning().c_str());
  return tok;
}

// An engine over `file` with the offloading options applied: the memory plan first (auto-fit
// unless --expert-cache / --cache-rate / --no-offload say otherwise; an automatic choice of
// offloading is announced on stderr), then the cached expert provider when the plan offloads,
// with its predictor plugged into the forward pass and the non-expert weights and KV cache held
// in the process's own memory. Members are destroyed engine first, so the provider outlives
// every forward pass that uses it. `logits_rows`: rows of logits a forward keeps (perplexity
// keeps the whole batch), for the activation estimate.
struct LoadedEngine {
  OffloadPlan plan;
  VramPlan vram;  // --backend cuda
  OffloadSession offload;
  std::unique_ptr<Engine> engine;
};

// --backend cuda: every expert in VRAM, or a VRAM expert cache (runtime/vram_plan.h: the plan
// is announced on stderr when it is a cache), with the predictor plugged in as on the CPU.
inline LoadedEngine load_device_engine(std::shared_ptr<const GgufFile> file, EngineOptions opt,
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
    o.expert_cache = std::to_string(le.vram.budget);
    DeviceTarget target{link, le.vram.source};
    target.hybrid = offload.cpu_experts == "auto";
    target.cpu_threads = opt.n_threads;
    le.offload = make_offload(o, *file, &target);
    if (target.hybrid)
      std::fprintf(stderr, "moeflow: CPU/GPU hybrid: %s; a miss the CPU finishes first is computed there\n",
                   describe(le.offload.hybrid).c_str());
    if (!le.offload.device_transfer->pin_refusal().empty())
      std::fprintf(stderr, "moeflow: note: %s; copying experts through pinned staging buffers instead\n",
                   le.offload.device_transfer->pin_refusal().c_str());
  } else {
    if (offload.cpu_experts != "off")
      std::fprintf(stderr, "moeflow: note: --cpu-experts: every expert fits in VRAM, none runs on the CPU\n");
    le.offload = make_offload(o, *file);
  }
  le.plan.options = le.offload.options;
  le.engine = std::make_unique<Engine>(std::move(file), opt, le.offload.provider);
  le.offload.attach(le.engine->context(), le.engine->model());
  return le;
}

inline LoadedEngine load_engine(std::shared_ptr<const GgufFile> file, EngineOptions opt,
                                const OffloadOptions& offload, int logits_rows = 1) {
  LoadedEngine le;
  FitContext fc;
  fc.n_ctx = resolve_n_ctx(opt.n_ctx, load_hparams(*file).n_ctx_train);
  fc.batch = (int)std::min<int64_t>(std::max(1, opt.batch), fc.n_ctx);
  fc.threads = opt.n_threads > 0 ? opt.n_threads : default_thread_count();
  fc.logits_rows = logits_rows;
  fc.per_layer = offload.per_layer;
  if (opt.backend != BackendKind::Cpu) return load_device_engine(std::move(file), opt, offload, fc);
  if (!offload.vram_budget.empty() || !offload.vram_free.empty() || !offload.vram_limit.empty() ||
      offload.expert_source != "auto" || offload.cpu_experts != "off")
    fail("--vram-budget, --vram-free, --vram-limit, --expert-source and --cpu-experts shape the VRAM expert cache of --backend "
         "cuda; the CPU backend's RAM cache takes --expert-cache or --cache-rate");
  le.plan = plan_offload(offload, *file, fc, read_memory_facts());
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
  le.engine = std::make_unique<Engine>(std::move(file), opt, le.offload.provider);
  le.offload.attach(le.engine->context(), le.engine->model());
  return le;
}

inline LoadedEngine load_engine(const std::string& path, const EngineOptions& opt,
                                const OffloadOptions& offload, int logits_rows = 1) {
  return load_engine(std::shared_ptr<const GgufFile>(GgufFile::open(path)), opt, offload, logits_rows);
}

}  // namespace moeflow::cli
