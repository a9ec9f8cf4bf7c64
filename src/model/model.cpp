#include "model/model.h"

#include <algorithm>

#include "core/error.h"
#include "core/watchdog.h"
#include "gguf/gguf_file.h"
#include "gguf/tensor_names.h"
#include "model/arch/arch.h"

namespace moeflow {

Model::Model(const GgufFile& file) : file_(file), hp_(load_hparams(file)) {
  w_ = load_weights(file, hp_, specs_);
  hp_.n_vocab = w_.token_embd.rows();
  for (int il = 0; il < hp_.n_layer; ++il)
    for (int k = 0; k < kNumExpertTensors; ++k)
      if (const auto* t = file_.find_tensor(expert_tensor_name(il, (ExpertTensor)k)))
        total_expert_bytes_ += t->nbytes;
}

bool Model::is_moe_layer(int layer) const {
  return layer >= 0 && layer < hp_.n_layer && w_.layers[layer].moe;
}

void Model::router_logits(int layer, std::span<const float> hidden,
                          std::vector<float>& logits) const {
  if (!is_moe_layer(layer)) fail("router_logits: layer {} has no router", layer);
  if ((int64_t)hidden.size() != hp_.n_embd)
    fail("router_logits: hidden state has {} values, expected n_embd {}", hidden.size(),
         hp_.n_embd);
  logits.resize(hp_.n_expert);
  // Predictors run on the host whatever backend the forward pass uses.
  static thread_local CpuBackend host;
  host.matmul(w_.layers[layer].gate_inp, f32_view(hidden.data(), hp_.n_embd, 1),
              f32_view(logits.data(), hp_.n_expert, 1));
}

RouterFn Model::router_fn() const {
  return [this](int layer, std::span<const float> hidden, std::vector<float>& logits) {
    router_logits(layer, hidden, logits);
  };
}

uint64_t Model::total_expert_bytes() const { return total_expert_bytes_; }

KvWidths Model::kv_widths() const {
  KvWidths w;
  for (const LayerSpec& s : specs_) {
    const KvWidths l = moeflow::kv_widths(s.attn);
    w.k = std::max(w.k, l.k);
    w.v = std::max(w.v, l.v);
  }
  return w;
}

std::vector<KvWidths> Model::kv_layer_widths() const {
  std::vector<KvWidths> w;
  w.reserve(specs_.size());
  for (const LayerSpec& s : specs_) w.push_back(moeflow::kv_widths(s.attn));
  return w;
}

uint64_t Model::kv_bytes_per_token() const { return KvCache::bytes_for(kv_layer_widths(), 1); }

uint64_t Model::kv_bytes_per_token_per_head() const {
  uint64_t floats = 0;
  for (const LayerSpec& s : specs_) {
    const AttentionSpec& a = s.attn;
    if (a.kind == AttentionKind::Mla)
      floats += (uint64_t)a.params.n_head * (a.mla.nope + a.mla.rope + a.mla.head_dim_v);
    else
      floats += (uint64_t)(moeflow::kv_widths(a).k + moeflow::kv_widths(a).v);
  }
  return floats * sizeof(float);
}

uint64_t Model::active_expert_bytes_per_token() const {
  if (hp_.n_expert == 0) return 0;
  return total_expert_bytes() / hp_.n_expert * hp_.n_expert_used;
}

bool Model::has_recurrent_layers() const {
  return std::any_of(specs_.begin(), specs_.end(), [](const LayerSpec& s) {
    return s.attn.kind == AttentionKind::GatedDeltaNet;
  });
}

uint64_t Model::recurrent_state_bytes() const {
  uint64_t floats = 0;
  for (const LayerSpec& s : specs_)
    if (s.attn.kind == AttentionKind::GatedDeltaNet)
      floats += (uint64_t)((s.attn.delta.d_conv - 1) * s.attn.delta.conv_channels() +
                           s.attn.delta.state_floats());
  return floats * sizeof(float);
}

namespace {

// The recurrent state, on a backend that has the ops of recurrent layers: refused up front,
// naming the architecture, rather than failing at the first token.
RecurrentState make_recurrent_state(const Model& m, Backend& be) {
  if (!m.has_recurrent_layers()) return {};
  if (!be.has_recurrent_ops())
    fail(
        "the {} backend does not implement the gated DeltaNet (linear attention) layers of {} "
        "({}): run it on the CPU backend",
        be.name(), m.hparams().arch_name, m.hparams().arch ? m.hparams().arch->models : "");
  return RecurrentState(m.specs(), be.allocator());
}

}  // namespace

ForwardContext::ForwardContext(const Model& model, ExpertProvider& provider, int64_t n_ctx,
                               int max_batch, ThreadPool* pool)
    : ForwardContext(model, provider, n_ctx, max_batch, std::make_unique<CpuBackend>(pool),
                     nullptr) {}

ForwardContext::ForwardContext(const Model& model, ExpertProvider& provider, int64_t n_ctx,
                               int max_batch, Backend& backend)
    : ForwardContext(model, provider, n_ctx, max_batch, nullptr, &backend) {}

ForwardContext::ForwardContext(const Model& model, ExpertProvider& provider, int64_t n_ctx,
                               int max_batch, std::unique_ptr<CpuBackend> own, Backend* backend)
    : model_(model),
      hp_(model.hparams()),
      provider_(provider),
      own_backend_(std::move(own)),
      be_(backend ? *backend : *own_backend_),
      w_(model.weights()),
      max_batch_(std::max(1, max_batch)),
      kv_(model.kv_layer_widths(), n_ctx, be_.allocator()),
      rs_(make_recurrent_state(model, be_)),
      snapshots_(model.specs(), HostAllocator::instance(), 0),
      moe_(be_, hp_, hp_.n_expert > 0 ? max_batch_ : 1),
      attn_scratch_(be_),
      mla_scratch_(be_),
      delta_scratch_(be_),
      ffn_scratch_(be_),
      x_(be_),
      xn_(be_),
      tmp_(be_),
      router_in_(be_),
      moe_out_(be_),
      logits_(be_) {
  if (!be_.can_read(provider_.memory_space()))
    fail(
        "the {} backend cannot read the expert provider's memory ({}): keep the experts where "
        "the backend computes",
        be_.name(), mem_space_name(provider_.memory_space()));
  provider_.attach_backend(be_);
  // An embedding the output head shares is a weight (copied with it); one of its own is only
  // looked up.
  const bool own_table = w_.token_embd && w_.token_embd.data != w_.output.data;
  for_each_view(w_, [&](TensorView& v) {
    if (!v) return;
    v = own_table && &v == &w_.token_embd ? be_.adopt_lookup_table(v) : be_.adopt_weight(v);
  });
  // LongRoPE: the long factors when the context is longer than the model was trained on
  // (llama.cpp's rule: the context size decides, once, so the cache holds one rotation).
  long_rope_ = n_ctx > hp_.rope_scaling.n_ctx_orig;
  x_.f32(hp_.n_embd, max_batch_);
  xn_.f32(hp_.n_embd, max_batch_);
  tmp_.f32(hp_.n_embd, max_batch_);
  logits_host_ = be_.read_f32(logits_.f32(model.n_vocab(), 1), logits_staging_);
}

void ForwardContext::reset() {
  pos_ = 0;
  snapshots_.clear();
}

void ForwardContext::truncate(int64_t p) {
  if (p < 0 || p > pos_) fail("cannot rewind to position {} (at {})", p, pos_);
  if (p == pos_) return;
  if (p == 0) return reset();
  if (!can_rewind() && snapshots_.latest_at_or_before(p) != p)
    fail(
        "cannot rewind to position {} (at {}): {} has recurrent (gated DeltaNet) layers whose "
        "state cannot go back to an earlier position without a snapshot there; start the "
        "sequence again from 0",
        p, pos_, hp_.arch_name);
  if (!can_rewind()) snapshots_.restore(p, rs_, be_);
  snapshots_.drop_after(p);
  pos_ = p;
}

int64_t ForwardContext::rewind_to(int64_t p) {
  p = std::clamp<int64_t>(p, 0, pos_);
  if (!can_rewind() && p != pos_) p = std::max<int64_t>(0, snapshots_.latest_at_or_before(p));
  truncate(p);
  return p;
}

void ForwardContext::set_snapshot_limit(int limit) {
  // Host memory on every backend (model/state_snapshots.h): the backend's copy moves the state.
  snapshots_ = StateSnapshots(model_.specs(), HostAllocator::instance(), limit);
}

void ForwardContext::snapshot_state() {
  if (takes_snapshots() && pos_ > 0) snapshots_.take(rs_, pos_, be_);
}

void ForwardContext::norm(const LayerSpec& spec, const TensorView& x, const TensorView& w,
                          const TensorView& b, TensorView out) {
  if (spec.norm == NormKind::Layer)
    be_.layer_norm(x, w.as<float>(), b.as<float>(), out, hp_.rms_eps);
  else
    be_.rms_norm(x, w.as<float>(), out, hp_.rms_eps);
}

void ForwardContext::dense_beside_moe(int il, const LayerWeights& L, const LayerSpec& spec,
                                      const int32_t* tokens, const TensorView& x, TensorView xn,
                                      TensorView out) {
  const int64_t n = x.rows();
  const float eps = hp_.rms_eps;
  FfnMatrices f{L.ffn.gate, L.ffn.up, L.ffn.down, {}, {}, {}};
  be_.rms_norm(x, L.ffn_norm.as<float>(), xn, eps);
  glu_ffn(be_, f, xn, out, spec.dense_act, ffn_scratch_);
  be_.rms_norm(out, L.ffn_post_norm_1.as<float>(), out, eps);
  const TensorView router_in = router_in_.f32(hp_.n_embd, n), moe = moe_out_.f32(hp_.n_embd, n);
  be_.rms_norm(x, L.router_norm.as<float>(), router_in, eps);
  be_.rms_norm(x, L.ffn_pre_norm_2.as<float>(), xn, eps);
  // No stale-input pre-calculation: it would route the next layer on its expert input, and the
  // router here reads an input of its own.
  moe_.set_stale_input(nullptr, nullptr, x);
  moe_.run(il, L, spec, xn, tokens, pos_, provider_, observer_, moe, router_in);
  be_.rms_norm(moe, L.ffn_post_norm_2.as<float>(), moe, eps);
  be_.add(out, moe);
}

void ForwardContext::forward(std::span<const int32_t> tokens, LogitsMode mode) {
  const int n = (int)tokens.size();
  if (n <= 0) fail("forward: no tokens");
  if (n > max_batch_) fail("forward: {} tokens exceed the batch size {}", n, max_batch_);
  if (pos_ + n > kv_.n_ctx())
    fail("context is full: {} tokens at position {} exceed the context size {} (-c)", n, pos_,
         kv_.n_ctx());
  const int64_t d = hp_.n_embd;
  const int64_t n_vocab = model_.n_vocab();
  for (int t = 0; t < n; ++t)
    if (tokens[t] < 0 || tokens[t] >= n_vocab)
      fail("token id {} is out of range (vocabulary has {} tokens)", tokens[t], n_vocab);

  if (observer_) observer_->on_step_begin(pos_, n);
  if (pos_ == 0) {
    provider_.begin_sequence();
    if (!rs_.empty()) rs_.clear(be_);  // a new sequence starts from a zero state
  }

  const std::vector<LayerSpec>& specs = model_.specs();
  const TensorView x = x_.f32(d, n), xn = xn_.f32(d, n), tmp = tmp_.f32(d, n);
  be_.get_rows(w_.token_embd, tokens, x);
  if (hp_.embd_scale != 1.0f) be_.scale(x, hp_.embd_scale);

  for (int il = 0; il < hp_.n_layer; ++il) {
    progress();  // the watchdog's sign of life (core/watchdog.h)
    const LayerWeights& L = w_.layers[il];
    const LayerSpec& spec = specs[il];
    norm(spec, x, L.attn_norm, L.attn_norm_bias, xn);
    if (spec.attn.kind == AttentionKind::GatedDeltaNet) {
      delta_net_attention(be_, L, spec.attn.delta, hp_.rms_eps, xn, rs_, il, tmp, delta_scratch_);
    } else if (spec.attn.kind == AttentionKind::Mla) {
      mla_attention(be_, L, spec.attn, hp_.rms_eps, xn, kv_, il, pos_, tmp, mla_scratch_);
    } else {
      const TensorView& freqs = long_rope_ && L.rope_freqs_long ? L.rope_freqs_long : L.rope_freqs;
      gqa_attention(be_, L, spec.attn, hp_.rms_eps, xn, kv_, il, pos_, freqs, tmp, attn_scratch_);
    }
    if (spec.post_norms) be_.rms_norm(tmp, L.attn_post_norm.as<float>(), tmp, hp_.rms_eps);
    be_.add(x, tmp);

    if (spec.dense_beside_moe) {
      dense_beside_moe(il, L, spec, tokens.data(), x, xn, tmp);
    } else {
      norm(spec, x, L.ffn_norm, L.ffn_norm_bias, xn);
      if (L.moe) {
        const bool next_moe = il + 1 < hp_.n_layer && w_.layers[il + 1].moe;
        moe_.set_stale_input(next_moe ? &w_.layers[il + 1] : nullptr,
                             next_moe ? &specs[il + 1] : nullptr, x);
        moe_.run(il, L, spec, xn, tokens.data(), pos_, provider_, observer_, tmp);
      } else {
        FfnMatrices f{L.ffn.gate,      L.ffn.up,      L.ffn.down,
                      L.ffn.gate_bias, L.ffn.up_bias, L.ffn.down_bias};
        glu_ffn(be_, f, xn, tmp, spec.dense_act, ffn_scratch_);
      }
    }
    if (spec.post_norms) be_.rms_norm(tmp, L.ffn_post_norm.as<float>(), tmp, hp_.rms_eps);
    be_.add(x, tmp);
    if (spec.out_scale != 1.0f) be_.scale(x, spec.out_scale);
  }

  if (mode != LogitsMode::None) {
    const int first = mode == LogitsMode::All ? 0 : n - 1;
    const int rows = n - first;
    const LayerSpec& last = specs.back();
    norm(last, x.slice_rows(first, rows), w_.output_norm, w_.output_norm_bias,
         xn.slice_rows(first, rows));
    const TensorView lg = logits_.f32(n_vocab, rows);
    be_.matmul(w_.output, xn.slice_rows(first, rows), lg);
    if (w_.output_bias) be_.add(lg, w_.output_bias);
    if (hp_.logit_softcap > 0.0f) be_.softcap(lg, hp_.logit_softcap);
    logits_host_ = be_.read_f32(lg, logits_staging_);
  }
  pos_ += n;
  provider_.end_step();
  if (observer_) observer_->on_step_end();
}

}  // namespace moeflow
