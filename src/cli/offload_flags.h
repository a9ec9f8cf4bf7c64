#pragma once
// The offloading flags (--expert-cache, --cache-rate, --prefetch, --mode ...), registered the
// same way by every command that runs a model (run, chat, serve, bench, perplexity), parsed
// into typed OffloadOptions (runtime/offload_options.h) as the command line is read.
#include <CLI/CLI.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/moe/precision_mode.h"
#include "policy/eviction_policy.h"
#include "policy/predictor.h"
#include "runtime/backend_choice.h"
#include "runtime/offload_options.h"
#include "trace/presets.h"

namespace moeflow::cli {

// Names, sizes and ranges are checked when the command line is parsed, and the rules between
// options (check_offload_options) when parsing ends, so any of them is a usage error (exit 2)
// before any file is opened, whether or not the model turns out to need offloading.
inline std::vector<std::string> with(std::vector<std::string> first,
                                     const std::vector<std::string>& rest) {
  first.insert(first.end(), rest.begin(), rest.end());
  return first;
}

// A byte size ("3GiB", "512MiB", "4096"); with `auto_word`, "auto" leaves it unset.
inline CLI::Option* add_size_option(CLI::App& app, const std::string& flag,
                                    std::optional<uint64_t>& dst, const std::string& help,
                                    bool auto_word = false) {
  return app
      .add_option_function<std::string>(
          flag,
          [&dst, flag, auto_word](const std::string& v) {
            if (auto_word && v == "auto") {
              dst.reset();
              return;
            }
            try {
              dst = parse_byte_size(v, flag);
            } catch (const Error& e) {
              throw CLI::ValidationError(e.what());
            }
          },
          help)
      ->type_name("SIZE");
}

// `backend`: the command's --backend value (nullptr: the command runs on the CPU only).
inline void add_offload_options(CLI::App& app, OffloadOptions& o,
                                const BackendKind* backend = nullptr) {
  CLI::Option* expert_cache =
      add_size_option(app, "--expert-cache", o.expert_cache,
                      "offload experts: RAM budget for cached experts (e.g. 3GiB), or auto (the "
                      "default): offload only when the model does not fit the free memory (and the "
                      "cgroup limit), with the budget that fits",
                      /*auto_word=*/true);
  app.add_option("--cache-rate", o.cache_rate,
                 "offload experts: budget as a fraction of all expert bytes (e.g. 0.3)")
      ->check(CLI::Range(0.0, 1.0))
      ->excludes(expert_cache);  // also `--expert-cache auto`, which leaves no trace in `o`
  app.add_flag(
      "--no-offload", o.no_offload,
      "keep every expert resident (mmap) even when the model does not fit the free memory");
  app.add_flag("--mmap", o.mmap,
               "a model that fits the free memory: read its weights from the file's mapping (the "
               "page cache, shared with other processes) instead of a copy in this process's "
               "memory with 2 MiB pages (the default; faster decode, a read of the file at load)");
  app.add_flag(
      "--no-repack", o.no_repack,
      "a model read into memory: keep its weights in the file's layout instead of the one "
      "the CPU kernels read fastest (Q4_K, MXFP4 and Q8_0 rows interleaved by 8; the same results; "
      "for comparisons)");
  app.add_flag("--repack-offloaded", o.repack_offloaded,
               "an offloaded model: the CPU kernels' layouts for it too, its non-expert weights "
               "rewritten at load and every expert as it arrives in its cache slot (the same "
               "results; measured no faster, for comparisons)");
  add_size_option(app, "--mem-limit", o.mem_limit,
                  "auto budget: plan for at most this much memory (e.g. 8GiB) when the machine "
                  "has more free");
  add_size_option(app, "--vram-budget", o.vram_budget,
                  "--backend cuda: a VRAM expert cache of this size (e.g. 16GiB); experts are "
                  "copied in from RAM or the file on demand and ahead of need");
  add_size_option(
      app, "--vram-free", o.vram_free,
      "--backend cuda: a VRAM expert cache of whatever leaves this much VRAM free "
      "(default: every expert in VRAM when they fit, else a cache leaving 768 MiB + 5%)");
  add_size_option(app, "--vram-limit", o.vram_limit,
                  "--backend cuda: plan VRAM as if the device had at most this much (e.g. 16GiB)");
  app.add_option_function<std::string>(
         "--expert-source",
         [&o](const std::string& v) { o.expert_source = parse_expert_source(v); },
         "--backend cuda with a VRAM cache: where experts are copied from: auto (the "
         "default), ram (the mapped file, page-locked), file (O_DIRECT via pinned staging)")
      ->check(CLI::IsMember({"auto", "ram", "file"}));
  app.add_option_function<std::string>(
         "--cpu-experts", [&o](const std::string& v) { o.cpu_experts = v == "auto"; },
         "--backend cuda with a VRAM cache: off (the default: a miss waits for its copy) "
         "| auto (the CPU computes a miss from RAM when a measured cost model says it "
         "finishes before the copy)")
      ->check(CLI::IsMember({"off", "auto"}));
  CLI::Option* policy =
      app.add_option(
             "--cache-policy", o.policy,
             "eviction policy: auto (the default: lfu, split per layer when every layer gets "
             "its top-k slots, else lfu-cycle over one budget), lru, lfu, lfu-cycle, "
             "moe-infinity, hobbit, static, daop (the last two need --policy-calib)")
          ->check(CLI::IsMember(with({"auto"}, eviction_policy_names())));
  app.add_option(
         "--policy-calib", o.policy_calib,
         "routing trace (moeflow trace) whose expert counts calibrate --cache-policy static "
         "or daop")
      ->check(CLI::ExistingFile);
  app.add_flag("--cache-per-layer", o.per_layer, "split the expert budget evenly per layer");
  app.add_option(
         "--io-threads", o.io_threads,
         "expert I/O worker threads (0 = auto: enough to keep ~8 MiB of reads in flight, 2..16)")
      ->check(CLI::Range(0, 256));
  CLI::Option* prefetch =
      app.add_option(
             "--prefetch", o.prefetch,
             "expert prefetch predictor: none | lookahead | promoe | token | gate | stacked | "
             "duoserve | eamc")
          ->check(CLI::IsMember(with({"none"}, predictor_names())));
  app.add_option("--preset", o.preset,
                 "a paper's configuration by name, as `moeflow sim --preset` names them: promoe "
                 "(lru + ProMoE's predictor, or the token predictor without --predictor-model), "
                 "hobbit (hobbit policy + stacked gates; lossless: --mode hobbit adds the mixed "
                 "precision), duoserve (lru + DuoServe's predictor), moe-infinity (its policy + "
                 "EAM predictor), daop (its placement, needs --policy-calib), lru (plain LRU, no "
                 "prefetch)")
      ->check(CLI::IsMember(trace::live_preset_names()))
      ->excludes(policy)
      ->excludes(prefetch);
  app.add_option("--predictor-model", o.predictor_model,
                 "trained predictor weights for --prefetch promoe (moeflow train-predictor)");
  app.add_option("--lookahead", o.lookahead, "layers ahead for the lookahead and gate predictors")
      ->check(CLI::Range(1, 1024));
  app.add_flag("--no-early-preemption", o.no_early_preemption,
               "on-demand loads only: do not raise routed experts to HIGH before acquire");
  app.add_option("--prefill-slots", o.prefill_slots,
                 "DuoServe's prefill pipeline (lossless): in a prompt, a miss that would evict a "
                 "cached expert is streamed through one of K slots of its own instead, the next "
                 "ones read while the current expert computes, so the prompt leaves the decode "
                 "cache as it was (K slots out of the budget; default 0: off)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--prefetch-always", o.prefetch_always,
               "issue every predicted prefetch, also those the measured layer time, read speed "
               "and disk load say cannot be half done before their layer runs, and those the "
               "gate holds back while demand reads saturate the disk and few prefetches are used, "
               "or while the misses their victims cause cancel the misses they avoid");
  app.add_flag("--prefetch-wait", o.prefetch_wait,
               "wait for every prefetch's read before the forward pass goes on (implies "
               "--prefetch-always): prefetches always arrive in time, the logical model that "
               "`moeflow sim --hw instant` replays; for comparing the two, not for speed");
  app.add_flag("--buffered-io", o.buffered_io, "read experts through the page cache (no O_DIRECT)");
  std::map<std::string, ExpertMode> modes;
  for (const std::string& n : expert_mode_names()) modes[n] = parse_expert_mode(n);
  app.add_option("--mode", o.mode,
                 "expert mode: exact (default, lossless) | hobbit (cache misses of less critical "
                 "experts load low-precision copies, needs moeflow pack --low) | hobbit-all (the "
                 "same rule for every expert) | skip (drop low-weight experts) | daop (replace a "
                 "token's second miss by a cached expert); lossy modes change output")
      ->transform(CLI::CheckedTransformer(modes))
      ->option_text("exact|hobbit|hobbit-all|skip|daop");
  app.add_option("--hobbit-t1", o.hobbit_t1,
                 "hobbit: high precision while the weight ranked above is <= T1 (default 0.6)");
  app.add_option(
      "--hobbit-t2", o.hobbit_t2,
      "hobbit: low precision while the weight ranked above is <= T2, else skip (default 0.9)");
  app.add_option(
      "--low-share", o.low_share,
      "hobbit + offload: share of the expert budget for low-precision copies (default 0.1)");
  app.add_option("--skip-threshold", o.skip_threshold,
                 "skip: drop experts whose normalised gate weight is below this (default 0.1; "
                 "the top-1 expert is always kept)");
  app.add_flag("--precalc", o.precalc,
               "DAOP stale-input pre-calculation (lossy, needs offloading): while a layer waits "
               "for an expert read, compute the next layer's predicted resident experts on this "
               "layer's input; the next layer uses those outputs for the experts it routes to. "
               "With --backend cuda and a VRAM cache over RAM, also the next layer's predicted "
               "experts not in VRAM, on the CPU, every decode step (DAOP's CPU pre-calculation)");
  add_size_option(
      app, "--low-cache", o.low_cache,
      "hobbit + offload: part of the expert budget for low-precision copies (e.g. 256MiB)");
  app.add_option("--low-cache-rate", o.low_cache_rate,
                 "hobbit + offload: low-precision part as a fraction of all low-copy bytes");
  // The rules between options, once every flag is read (still before any file is opened); a
  // preset first becomes the policy and predictor it names.
  app.callback([&o, backend, prefetch] {
    if (!o.preset.empty()) {
      // Under a routing replay the hidden states do not follow the routing: a preset then
      // falls back to its routing-history predictor, as on a trace without hidden states.
      const bool hidden = o.routing_trace.empty();
      const trace::Preset p = trace::resolve_preset(
          o.preset, trace::PresetInputs{hidden, /*router=*/hidden, !o.predictor_model.empty()});
      o.policy = p.policy;
      o.prefetch = p.predictor;
    }
    // The default predictor (lookahead) reads hidden states; under a replay the default is none.
    if (!o.routing_trace.empty() && o.preset.empty() && prefetch->count() == 0) o.prefetch = "none";
    if (auto e = check_offload_options(o, backend ? *backend : BackendKind::Cpu))
      throw CLI::ValidationError(*e);
  });
}

// --routing-trace / --routing-request (run, bench, perplexity: one sequence at a time, whose
// positions the replay maps onto the trace's rows; trace/routing_replay.h).
inline void add_routing_replay_options(CLI::App& app, OffloadOptions& o) {
  app.add_option("--routing-trace", o.routing_trace,
                 "replay recorded routing (a moeflow trace, or speculative-moe / vLLM-logger "
                 "JSONL; comma-separated for one file per layer): the routers' choices come from "
                 "it, the experts, cache, prefetcher and reads run for real. The model must have "
                 "the trace's shape; the default --prefetch becomes none (lookahead reads hidden "
                 "states, which do not follow a replay)")
      ->delimiter(',')
      ->check(CLI::ExistingFile);
  app.add_option("--routing-request", o.routing_request,
                 "which request of --routing-trace to replay (0-based, default 0)");
}

}  // namespace moeflow::cli
