// `moeflow run`: generate from a prompt with llama.cpp-style flags, streaming to stdout.
// Prompts are text (through the model's tokenizer) or "ids:1,2,3"; without a tokenizer the
// generated token ids are printed instead of text. --json-schema / --grammar constrain the output
// (src/grammar): it stops as soon as the grammar is complete.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/common_options.h"
#include "cli/offload_flags.h"
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "grammar/gbnf.h"
#include "grammar/grammar_constraint.h"
#include "grammar/json_schema.h"
#include "runtime/engine.h"
#include "runtime/token_list.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"
#include "trace/routing_replay.h"

namespace moeflow::cli {
namespace {

struct RunArgs {
  std::string model, prompt;
  int n_predict = 128;
  int threads = 0;
  int64_t ctx = 0;
  int batch = 256;
  SamplerParams sp;
  bool stats_json = false;
  std::string stats = "text";        // text | json | none
  std::string json_schema, grammar;  // files
  BackendKind backend = BackendKind::Cpu;
  OffloadOptions offload;
};

// One human-readable line of the offloading counters (the JSON form has them per layer).
void print_offload_summary(const OffloadSession& s) {
  const OffloadStats& st = s.provider->stats();
  const LayerOffloadStats t = st.total();
  const uint64_t uses = t.hits + t.misses + t.late;
  std::fprintf(stderr,
               "offload: budget %.1f of %.1f MiB experts (%d slots, %s, %s%s) | hit rate %.1f%% "
               "(%llu hits, %llu late, %llu misses) | prefetch %llu issued, %llu used | read "
               "%.1f MiB | stall %.1f ms\n",
               st.budget_bytes / 1048576.0, st.total_expert_bytes / 1048576.0, st.n_slots,
               st.policy.c_str(), st.io_backend.c_str(), st.direct_io ? ", O_DIRECT" : "",
               uses ? 100.0 * t.hits / uses : 0.0, (unsigned long long)t.hits,
               (unsigned long long)t.late, (unsigned long long)t.misses,
               (unsigned long long)t.prefetch_issued, (unsigned long long)t.prefetch_used,
               t.bytes_read / 1048576.0, t.stall_s * 1e3);
}

std::string read_text_file(const std::string& path, const char* flag) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot read '{}'", flag, path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The grammar of --json-schema or --grammar, or nullptr.
std::shared_ptr<const Grammar> output_grammar(const RunArgs& a) {
  if (!a.json_schema.empty() && !a.grammar.empty())
    usage_fail("--json-schema and --grammar do not go together");
  if (!a.grammar.empty()) return parse_gbnf(read_text_file(a.grammar, "--grammar"));
  if (a.json_schema.empty()) return nullptr;
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(read_text_file(a.json_schema, "--json-schema"));
  } catch (const nlohmann::json::exception& e) {
    fail("--json-schema: '{}' is not JSON: {}", a.json_schema, e.what());
  }
  return json_schema_grammar(schema);
}

int run_run(RunArgs& a) {
  if (a.n_predict < 0) usage_fail("-n must be >= 0, got {}", a.n_predict);
  if (a.stats_json) a.stats = "json";
  if (a.stats != "text" && a.stats != "json" && a.stats != "none")
    usage_fail("--stats must be text, json or none, not '{}'", a.stats);
  EngineOptions opt;
  opt.n_threads = a.threads;
  opt.n_ctx = a.ctx;
  opt.batch = a.batch;
  opt.backend = a.backend;
  LoadedEngine loaded = load_engine(a.model, opt, a.offload);
  Engine& eng = *loaded.engine;
  const OffloadSession& offload = loaded.offload;
  // A model without a usable vocabulary still runs on token ids; only text needs it.
  std::unique_ptr<Tokenizer> tok;
  std::string tok_error;
  try {
    tok = Tokenizer::from_gguf(eng.file());
  } catch (const Error& e) {
    tok_error = e.what();
  }
  std::vector<int32_t> prompt;
  if (is_id_prompt(a.prompt)) {
    prompt = parse_token_list(a.prompt, "-p");
  } else {
    if (!tok)
      fail("-p: text prompts need the model's tokenizer ({}); pass token ids as -p \"ids:1,2,3\"",
           tok_error);
    prompt = tok->encode(a.prompt, true, true);
    if (prompt.empty()) fail("-p: the prompt encodes to no tokens");
  }
  if (tok && !tok->warning().empty())
    std::fprintf(stderr, "moeflow: warning: %s\n", tok->warning().c_str());
  if (loaded.replay) loaded.replay->begin_generation((int64_t)prompt.size(), a.n_predict);
  Sampler sampler(a.sp);
  std::unique_ptr<GrammarConstraint> constraint;
  if (auto g = output_grammar(a)) {
    if (!tok) fail("--json-schema / --grammar need the model's tokenizer ({})", tok_error);
    constraint = std::make_unique<GrammarConstraint>(g, TokenVocab::from_tokenizer(*tok));
    sampler.set_constraint(constraint.get());
  }
  std::unique_ptr<StreamDecoder> dec;
  if (tok) dec = std::make_unique<StreamDecoder>(*tok);
  std::vector<int32_t> stop;
  if (tok) stop = tok->eog_ids();
  bool first = true;
  eng.generate(
      prompt, a.n_predict, sampler,
      [&](int32_t id) {
        if (dec) {
          if (tok->is_eog(id)) return false;
          std::fputs(dec->push(id).c_str(), stdout);
        } else {
          std::printf(first ? "%d" : " %d", id);
        }
        first = false;
        std::fflush(stdout);
        return !(constraint && constraint->done());
      },
      stop);
  if (dec) std::fputs(dec->flush().c_str(), stdout);
  std::printf("\n");
  std::fflush(stdout);  // keep statistics on stderr after the text when both go to one pipe
  const GenerationStats& s = eng.stats();
  if (a.stats == "json") {
    nlohmann::json j = nlohmann::json::parse(s.to_json());
    if (offload.provider) j["offload"] = offload_stats_json(offload);
    j["memory"] = memory_json(loaded.plan);
    if (loaded.replay) j["routing_replay"] = trace::replay_json(*loaded.replay);
    std::fprintf(stderr, "%s\n", j.dump().c_str());
  } else if (a.stats == "text") {
    if (loaded.replay) std::fprintf(stderr, "%s\n", loaded.replay->describe().c_str());
    if (offload.provider) print_offload_summary(offload);
    const ProcessMemory pm = read_process_memory();
    std::fprintf(stderr, "memory: %s | RSS %s, peak %s\n", loaded.plan.fit.reason.c_str(),
                 format_bytes(pm.vm_rss).c_str(), format_bytes(pm.vm_hwm).c_str());
    std::fprintf(stderr,
                 "prompt %d tokens, %.2f tok/s | generated %d tokens, TTFT %.1f ms, TPOT %.1f ms, "
                 "%.2f tok/s | %d threads\n",
                 s.n_prompt, s.prefill_tps(), s.n_generated, s.ttft_s * 1e3, s.tpot_s() * 1e3,
                 s.decode_tps(), eng.pool().size());
  }
  return 0;
}

const bool registered_run =
    register_command("run", "Generate text from a prompt", [](CLI::App& app) {
      auto a = std::make_shared<RunArgs>();
      app.add_option("-m,--model", a->model, "GGUF model")->required();
      app.add_option("-p,--prompt", a->prompt, "prompt text, or ids:1,2,3")->required();
      app.add_option("-n,--n-predict", a->n_predict, "tokens to generate");
      add_threads_option(app, a->threads, "threads (0 = all cores)");
      app.add_option("-c,--ctx-size", a->ctx, "context size (0 = min(4096, trained))");
      app.add_option("-b,--batch-size", a->batch, "prefill chunk size");
      app.add_option("--seed", a->sp.seed, "sampling seed");
      add_sampling_options(app, a->sp);
      app.add_option(
          "--stats", a->stats,
          "statistics on stderr after the text: text | json (one object, the last line) | none");
      app.add_flag("--stats-json", a->stats_json, "same as --stats json");
      app.add_option("--json-schema", a->json_schema,
                     "constrain the output to JSON valid against the schema in this file");
      app.add_option("--grammar", a->grammar, "constrain the output to this GBNF grammar file");
      add_phase_lines_flag(app);
      add_offload_options(app, a->offload, &a->backend);
      add_routing_replay_options(app, a->offload);
      add_backend_option(app, a->backend);
      return CommandMain([a] { return run_run(*a); });
    });

}  // namespace
}  // namespace moeflow::cli
