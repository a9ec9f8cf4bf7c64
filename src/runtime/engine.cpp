#include "runtime/engine.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "core/timer.h"
#include "core/watchdog.h"
#include "experts/device_provider.h"
#include "experts/resident_provider.h"
#include "gguf/gguf_file.h"
#include "runtime/cpu_repack.h"
#include "runtime/memory_facts.h"

namespace moeflow {

namespace {

std::string human_bytes(double b) {
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.1f} GiB", b / (1024.0 * 1024 * 1024));
  return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
}

}  // namespace

std::string GenerationStats::to_json() const {
  return fmt::format(
      "{{\"n_prompt\":{},\"n_generated\":{},\"ttft_ms\":{:.3f},\"tpot_ms\":{:.3f},"
      "\"prefill_tps\":{:.3f},\"decode_tps\":{:.3f}}}",
      n_prompt, n_generated, ttft_s * 1e3, tpot_s() * 1e3, prefill_tps(), decode_tps());
}

int64_t resolve_n_ctx(int64_t requested, int64_t n_ctx_train) {
  if (requested < 0) fail("context size (-c) must be positive, got {}", requested);
  if (requested > 0) return requested;
  return std::min<int64_t>(4096, std::max<int64_t>(1, n_ctx_train));
}

Engine::Engine(const std::string& model_path, const EngineOptions& opt,
               std::shared_ptr<ExpertProvider> provider)
    : file_(GgufFile::open(model_path)), provider_(std::move(provider)) {
  init(opt);
}

Engine::Engine(std::shared_ptr<const GgufFile> file, const EngineOptions& opt,
               std::shared_ptr<ExpertProvider> provider)
    : file_(std::move(file)), provider_(std::move(provider)) {
  init(opt);
}

Engine::~Engine() = default;

void Engine::init(const EngineOptions& opt) {
  phase("reading the model's tensors");
  model_ = std::make_unique<Model>(*file_);
  const bool device = opt.backend != BackendKind::Cpu;
  if (device && provider_ && provider_->memory_space() == MemSpace::Host)
    fail(
        "--backend {} computes from device memory: a RAM expert cache (--expert-cache, "
        "--cache-rate) belongs to the CPU backend; give --vram-budget or --vram-free for a VRAM "
        "expert cache",
        backend_kind_name(opt.backend));
  if (!provider_ && !device) provider_ = std::make_shared<ResidentExpertProvider>(*file_);
  if (opt.n_threads < 0) fail("thread count (-t) must be positive, got {}", opt.n_threads);
  pool_ = std::make_unique<ThreadPool>(opt.n_threads == 0 ? default_thread_count() : opt.n_threads);
  const int64_t n_ctx = resolve_n_ctx(opt.n_ctx, model_->hparams().n_ctx_train);
  if (opt.batch <= 0) fail("batch size must be positive, got {}", opt.batch);
  const int batch = (int)std::min<int64_t>(opt.batch, n_ctx);
  // The KV cache (and a row of attention scores per thread) grows with the context: a context
  // too large for the machine is named with its size instead of a bare "out of memory".
  const HParams& hp = model_->hparams();
  if (opt.state_snapshots < 0) fail("--state-snapshots must be >= 0, got {}", opt.state_snapshots);
  if (opt.snapshot_interval <= 0)
    fail("--snapshot-interval must be positive, got {}", opt.snapshot_interval);
  const double kv_bytes = (double)n_ctx * (double)model_->kv_bytes_per_token() +
                          (double)pool_->size() * (double)n_ctx * sizeof(float) +
                          (1.0 + opt.state_snapshots) * (double)model_->recurrent_state_bytes();
  const MemoryFacts mem = read_memory_facts();
  const double avail = (double)mem.available();
  if (avail > 0 && kv_bytes > avail)
    fail(
        "context size {} (-c) needs {} for its KV cache, more than the {} of memory available "
        "({}); "
        "pass a smaller -c (the model was trained with {})",
        n_ctx, human_bytes(kv_bytes), human_bytes(avail), mem.source(), hp.n_ctx_train);
  try {
    if (device) {
      phase(fmt::format("loading weights and experts into the {} backend's memory",
                        backend_kind_name(opt.backend))
                .c_str());
      backend_ = make_backend(opt.backend, pool_.get());
      if (!provider_) provider_ = std::make_shared<DeviceExpertProvider>(*file_, *backend_);
      ctx_ = std::make_unique<ForwardContext>(*model_, *provider_, n_ctx, batch, *backend_);
      host_backend_ = std::make_unique<CpuBackend>(pool_.get());
      ctx_->moe().set_host_backend(host_backend_.get());
      init_snapshots(opt);
      phase("model loaded");
      return;
    }
    if (!opt.resident_weights) {
      ctx_ = std::make_unique<ForwardContext>(*model_, *provider_, n_ctx, batch, pool_.get());
      init_snapshots(opt);
      return;
    }
    auto cpu = std::make_unique<CpuBackend>(pool_.get());
    // Each weight's file pages go as soon as its copy holds the bytes.
    const GgufFile& file = *file_;
    cpu->set_copy_weights(
        true, [&file](const void* p, uint64_t n) { file.drop_mapped(p, n); },
        opt.repack_weights ? matmul_only_views(file) : std::function<bool(const TensorView&)>{});
    CpuBackend* copies = cpu.get();
    backend_ = std::move(cpu);
    ctx_ = std::make_unique<ForwardContext>(*model_, *provider_, n_ctx, batch, *backend_);
    repacked_weight_bytes_ = copies->repacked_weight_bytes();  // the context adopted them
    ctx_->prefault_kv();
    init_snapshots(opt);
  } catch (const std::bad_alloc&) {
    fail("context size {} (-c): out of memory allocating its {} KV cache; pass a smaller -c", n_ctx,
         human_bytes(kv_bytes));
  }
}

void Engine::init_snapshots(const EngineOptions& opt) {
  ctx_->set_snapshot_limit(opt.state_snapshots);
  snapshot_interval_ = opt.snapshot_interval;
}

void Engine::prefill(std::span<const int32_t> tokens, bool all_logits, std::vector<float>* out) {
  phase(fmt::format("prefill: {} tokens", tokens.size()).c_str());
  decoding_ = false;
  const int64_t V = n_vocab();
  if (out) out->resize(all_logits ? tokens.size() * V : (tokens.empty() ? 0 : V));
  const size_t B = ctx_->max_batch();
  const bool snapshots = ctx_->takes_snapshots() && !tokens.empty();
  // The end-of-prompt snapshot is taken before the prompt's last token: the prefix cache always
  // leaves a prompt's last token to feed (its logits are needed), so the same prompt again (a
  // regenerated reply) goes back to it, and a next turn that extends the prompt recomputes one
  // token more than from the end. A 1-token prefill starts where that position already is.
  const size_t end_mark = tokens.empty() ? 0 : tokens.size() - 1;
  for (size_t i = 0, n = 0; i < tokens.size(); i += n) {
    n = std::min(B, tokens.size() - i);
    // A chunk ends at the next multiple of the interval and at end_mark (the rows of a chunk
    // are the same bits whichever chunk they run in), where the state is copied.
    const int64_t to_mark = snapshot_interval_ - ctx_->pos() % snapshot_interval_;
    if (snapshots && (int64_t)n > to_mark) n = (size_t)to_mark;
    if (snapshots && i < end_mark && i + n > end_mark) n = end_mark - i;
    const bool last = i + n == tokens.size();
    LogitsMode mode = all_logits ? LogitsMode::All : (last ? LogitsMode::Last : LogitsMode::None);
    if (!out) mode = LogitsMode::None;
    ctx_->forward(tokens.subspan(i, n), mode);
    if (snapshots && (i + n == end_mark || ctx_->pos() % snapshot_interval_ == 0))
      ctx_->snapshot_state();
    if (!out) continue;
    if (all_logits)
      std::memcpy(out->data() + i * V, ctx_->logits(), n * V * sizeof(float));
    else if (last)
      std::memcpy(out->data(), ctx_->logits(), V * sizeof(float));
  }
}

void Engine::prefill_sequential(std::span<const int32_t> tokens, bool all_logits,
                                std::vector<float>* out) {
  const int64_t V = n_vocab();
  if (out) out->resize(all_logits ? tokens.size() * V : (tokens.empty() ? 0 : V));
  for (size_t i = 0; i < tokens.size(); ++i) {
    ctx_->forward(tokens.subspan(i, 1), out ? LogitsMode::Last : LogitsMode::None);
    if (!out) continue;
    if (all_logits)
      std::memcpy(out->data() + i * V, ctx_->logits(), V * sizeof(float));
    else if (i + 1 == tokens.size())
      std::memcpy(out->data(), ctx_->logits(), V * sizeof(float));
  }
}

std::span<const float> Engine::decode(int32_t token) {
  if (!decoding_) phase("decode");
  decoding_ = true;
  ctx_->forward({&token, 1}, LogitsMode::Last);
  return {ctx_->logits(), (size_t)n_vocab()};
}

std::vector<int32_t> Engine::generate(std::span<const int32_t> prompt, int n_predict,
                                      Sampler& sampler,
                                      const std::function<bool(int32_t)>& on_token,
                                      std::span<const int32_t> stop) {
  if (prompt.empty()) fail("the prompt is empty: at least one token is needed");
  stats_ = {};
  stats_.n_prompt = (int)prompt.size();
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  history.reserve(prompt.size() + std::max(0, n_predict));
  std::vector<int32_t> generated;
  generated.reserve(std::max(0, n_predict));
  if (n_predict <= 0) return generated;
  if (pos() + (int64_t)prompt.size() + n_predict - 1 > ctx_->n_ctx())
    fail("prompt ({} tokens) plus -n {} does not fit the context size {} (-c)", prompt.size(),
         n_predict, ctx_->n_ctx());
  const double t0 = now_seconds();
  std::vector<float> logits;
  prefill(prompt, false, &logits);
  stats_.prefill_s = now_seconds() - t0;
  std::span<const float> row(logits);
  double decode_start = 0;
  for (int i = 0; i < n_predict; ++i) {
    const int32_t tok = sampler.sample(row, history);
    if (i == 0) {
      stats_.ttft_s = now_seconds() - t0;
      decode_start = now_seconds();
    }
    generated.push_back(tok);
    history.push_back(tok);
    stats_.n_generated = (int)generated.size();
    const bool stop_tok = std::find(stop.begin(), stop.end(), tok) != stop.end();
    if ((on_token && !on_token(tok)) || stop_tok || i + 1 == n_predict) break;
    row = decode(tok);
    stats_.decode_s = now_seconds() - decode_start;
  }
  return generated;
}

}  // namespace moeflow
