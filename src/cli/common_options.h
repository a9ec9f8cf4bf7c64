#pragma once
// Pieces shared by the commands that run a model (run, chat, serve, bench, perplexity), so that
// a flag means the same thing, with the same help, everywhere, and loading is done one way.
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/offload_flags.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "core/watchdog.h"
#include "gguf/gguf_file.h"
#include "model/hparams.h"
#include "runtime/backend_choice.h"
#include "runtime/engine.h"
#include "runtime/engine_assembly.h"
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
  app.add_option("--repeat-penalty", sp.repeat_penalty,
                 prefix + "repetition penalty, > 0 (1 = off)");
  app.add_option("--repeat-last-n", sp.repeat_last_n, "penalty window (-1 = all)");
  app.add_option("--presence-penalty", sp.presence_penalty,
                 prefix + "presence penalty, -2..2 (0 = off)");
  app.add_option("--frequency-penalty", sp.frequency_penalty,
                 prefix + "frequency penalty, -2..2 (0 = off)");
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
        if (v < 0)
          throw CLI::ValidationError("-t,--threads",
                                     fmt::format("must be >= 0 (0 = all CPUs), got {}", v));
        const int cpus = default_thread_count();
        if (v > cpus) {
          std::fprintf(
              stderr,
              "moeflow: warning: -t %d: this process may run on %d CPUs; using %d threads\n", v,
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
inline void add_backend_option(CLI::App& app, BackendKind& backend) {
  const std::map<std::string, BackendKind> kinds{
      {"cpu", BackendKind::Cpu}, {"cuda", BackendKind::Cuda}, {"standin", BackendKind::StandIn}};
  app.add_option("--backend", backend,
                 "cpu (default); cuda: weights, KV cache and experts in VRAM (needs a build with "
                 "-DMOEFLOW_CUDA=ON and a CUDA device); standin: the stand-in device, the CPU's "
                 "arithmetic behind a GPU's memory rules, for checking the device path without "
                 "a GPU (VRAM size: MOEFLOW_STANDIN_VRAM, default 16GiB)")
      ->transform(CLI::CheckedTransformer(kinds))
      ->option_text("cpu|cuda|standin");
}

// The prefix cache's state snapshots for models with recurrent layers (chat, serve;
// EngineOptions::state_snapshots / snapshot_interval): checked when parsing ends.
struct SnapshotFlags {
  int count = 8;
  int interval = 1024;
};
inline void add_snapshot_options(CLI::App& app, SnapshotFlags& f) {
  app.add_option("--state-snapshots", f.count,
                 "recurrent models (qwen3next, qwen35moe): copies of the recurrent state kept for "
                 "the prefix cache to go back to, taken at the end of each prompt and every "
                 "--snapshot-interval tokens of a prefill (0 = none: a prompt that diverges from "
                 "the cached one starts over)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--snapshot-interval", f.interval,
                 "tokens between state snapshots inside a prefill")
      ->check(CLI::PositiveNumber);
}

// -v: phase lines with timestamps on stderr (core/watchdog.h).
inline void add_phase_lines_flag(CLI::App& app) {
  app.add_flag_callback(
      "-v,--verbose", [] { set_phase_lines(true); },
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
  if (!tok->warning().empty())
    std::fprintf(stderr, "moeflow: warning: %s\n", tok->warning().c_str());
  return tok;
}

// The engine for a command: the offload options were checked when the command line was parsed
// (cli/offload_flags.h), so a bad combination never reaches here; runtime/engine_assembly.h
// checks them again for library callers.
using moeflow::load_engine;

}  // namespace moeflow::cli
