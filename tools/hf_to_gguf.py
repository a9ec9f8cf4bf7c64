#!/usr/bin/env python3
"""Convert a transformers MoE model (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-V2/V3,
GLM-4.5, gpt-oss, Phi-3.5-MoE, Qwen3-Next, Qwen3.5/3.6 MoE, MiniMax-M2, Gemma 4 MoE) to GGUF.

An independent converter (written for moeflow, on the `gguf` python package) that lays out
tensors and metadata the way llama.cpp expects them, so the same file can be run by moeflow,
by llama.cpp and compared against transformers itself.

  python tools/hf_to_gguf.py MODEL_DIR OUT.gguf [--outtype f32|f16] [--mla-kv-b] [--mtp N]

As a library: convert_model(model, path, outtype) takes an in-memory *ForCausalLM.

DeepSeek (GGUF arch "deepseek2") is written as current llama.cpp converters write it: one kv
head of kv_lora_rank + rope dims (key_length / value_length), the per-head sizes in
key_length_mla / value_length_mla, and kv_b_proj split into attn_k_b (each head's key block
transposed) and attn_v_b; --mla-kv-b writes the older layout (attn_kv_b, per-head sizes in
key_length / value_length). GLM-4.5 ("glm4moe") files can carry --mtp N next-token-prediction
blocks after the trunk (random weights, as a real checkpoint's would be unused by generation).

Qwen3-Next ("qwen3next") and Qwen3.5/3.6 MoE ("qwen35moe") are written as llama.cpp's converter
writes them: zero-centred RMSNorm weights stored + 1 (not the gated norm of the DeltaNet layers),
A_log stored as ssm_a = -exp(A_log), in_proj_qkvz split into attn_qkv (all q, all k, all v) and
attn_gate (z), in_proj_ba kept as ssm_ba; for Qwen3.5 the value heads reordered from grouped by
key head to tiled (in attn_qkv's v rows, attn_gate, ssm_beta/alpha, ssm_a, ssm_dt, the conv
kernel's v channels and ssm_out's columns). --mtp N appends N random MTP blocks.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import gguf

ARCHS = {
    # HF model_type: (gguf arch, llama.cpp renormalises the top-k weights, q/k need permuting)
    "mixtral": ("llama", True, True),
    "qwen2_moe": ("qwen2moe", False, False),
    "qwen3_moe": ("qwen3moe", True, False),
    "olmoe": ("olmoe", False, False),
    "deepseek_v2": ("deepseek2", False, False),
    "deepseek_v3": ("deepseek2", False, False),
    "glm4_moe": ("glm4moe", False, False),
    "gpt_oss": ("gpt-oss", False, False),
    "phimoe": ("phimoe", False, False),
    "qwen3_next": ("qwen3next", True, False),
    "qwen3_5_moe_text": ("qwen35moe", True, False),
    "minimax_m2": ("minimax-m2", True, False),
    "gemma4_text": ("gemma4", True, False),
}
LLAMA_ARCHS = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe")

# Kept F32 in F16 files, as llama.cpp keeps them: routers decide discrete choices.
F32_ALWAYS = ("ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight", "ssm_conv1d.weight")


# outtype -> (type of the matrices, type of the routed experts). The block types are what the
# released gpt-oss files hold (mxfp4: MXFP4 experts, Q8_0 elsewhere); gguf-py quantizes them.
OUTTYPES = {"f32": ("F32", "F32"), "f16": ("F16", "F16"), "q8_0": ("Q8_0", "Q8_0"),
            "q4_0": ("Q4_0", "Q4_0"), "mxfp4": ("Q8_0", "MXFP4")}


def stored_type(name: str, ndim: int, outtype: str) -> str:
    """The type tensor `name` is written in (shared with tests that round their reference). As
    llama.cpp's converter: matrices only, never biases (even the 2-D expert biases) or routers."""
    if not (ndim >= 2 and name.endswith(".weight") and not name.endswith(F32_ALWAYS)):
        return "F32"
    dense, experts = OUTTYPES[outtype]
    return experts if "_exps." in name else dense


def stored_as_f16(name: str, ndim: int, outtype: str) -> bool:
    return stored_type(name, ndim, outtype) == "F16"


def permute_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF Llama/Mixtral rotate halves of each head; llama.cpp rotates adjacent pairs. Reorder the
    output rows of q/k so that pair (2i, 2i+1) of llama.cpp is (i, i + d/2) of HF."""
    rows = w.shape[0]
    d = rows // n_head
    return (w.reshape(n_head, 2, d // 2, *w.shape[1:])
             .swapaxes(1, 2)
             .reshape(w.shape))


def synth_vocab(n_vocab: int):
    """SentencePiece-style vocab: <unk> <s> </s>, 256 byte tokens, then filler pieces."""
    if n_vocab < 260:
        raise ValueError(f"vocab_size {n_vocab} too small for a byte-fallback vocab (min 260)")
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0] * len(toks)
    i = 0
    while len(toks) < n_vocab:
        toks.append(f"\u2581p{i}")
        types.append(1)
        scores.append(-float(i))
        i += 1
    return toks, scores, types


def _cfg(cfg, *names, default=None):
    for n in names:
        v = getattr(cfg, n, None)
        if v is not None:
            return v
    return default


def _rope_theta(cfg) -> float:
    rp = getattr(cfg, "rope_parameters", None)
    if isinstance(rp, dict) and "rope_theta" in rp:
        return float(rp["rope_theta"])
    return float(_cfg(cfg, "rope_theta", default=10000.0))


def _experts(sd, prefix: str, n_expert: int, n_ff: int):
    """(gate, up, down) stacked as (E, ff, embd), (E, ff, embd), (E, embd, ff), from either the
    fused transformers>=5 layout or the per-expert modules of older releases."""
    fused = prefix + "experts.gate_up_proj"
    if fused in sd:
        gu = sd[fused]
        return gu[:, :n_ff, :], gu[:, n_ff:, :], sd[prefix + "experts.down_proj"]
    gate, up, down = [], [], []
    for e in range(n_expert):
        p = f"{prefix}experts.{e}."
        if p + "w1.weight" in sd:  # Mixtral's original names
            gate.append(sd[p + "w1.weight"]); up.append(sd[p + "w3.weight"]); down.append(sd[p + "w2.weight"])
        else:
            gate.append(sd[p + "gate_proj.weight"]); up.append(sd[p + "up_proj.weight"])
            down.append(sd[p + "down_proj.weight"])
    return np.stack(gate), np.stack(up), np.stack(down)


def _write_synth_vocab(w, n_vocab: int) -> None:
    toks, scores, types = synth_vocab(n_vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


def _putter(w, outtype: str):
    def put(name: str, a: np.ndarray) -> None:
        a = np.ascontiguousarray(a)
        t = stored_type(name, a.ndim, outtype)
        if t == "F32":
            w.add_tensor(name, a.astype(np.float32))
        elif t == "F16":
            w.add_tensor(name, a.astype(np.float16))
        else:
            qt = gguf.GGMLQuantizationType[t]
            w.add_tensor(name, gguf.quants.quantize(a.astype(np.float32), qt), raw_dtype=qt)
    return put


def _finish(w) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _rope_params(cfg) -> dict:
    rp = getattr(cfg, "rope_parameters", None)
    if isinstance(rp, dict):
        return rp
    return dict(getattr(cfg, "rope_scaling", None) or {})


def _write_rope_scaling(w, cfg) -> None:
    """rope.scaling.* as llama.cpp's converter writes them (YaRN only here)."""
    rp = _rope_params(cfg)
    kind = rp.get("rope_type", rp.get("type", "default"))
    if kind in (None, "default"):
        return
    if kind != "yarn":
        raise ValueError(f"rope type '{kind}' is not supported by this converter")
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(float(rp["factor"]))
    w.add_rope_scaling_orig_ctx_len(int(rp["original_max_position_embeddings"]))
    if rp.get("beta_fast") is not None:
        w.add_rope_scaling_yarn_beta_fast(float(rp["beta_fast"]))
    if rp.get("beta_slow") is not None:
        w.add_rope_scaling_yarn_beta_slow(float(rp["beta_slow"]))


def _moe_common(w, cfg, n_ff_exp: int) -> None:
    """The DeepSeek-style MoE keys both deepseek2 and glm4moe have."""
    w.add_expert_count(cfg.n_routed_experts)
    w.add_expert_used_count(cfg.num_experts_per_tok)
    w.add_expert_feed_forward_length(n_ff_exp)
    w.add_expert_shared_count(cfg.n_shared_experts)
    w.add_leading_dense_block_count(cfg.first_k_dense_replace)
    if _cfg(cfg, "routed_scaling_factor") is not None:
        w.add_expert_weights_scale(float(cfg.routed_scaling_factor))
    if _cfg(cfg, "n_group") is not None:
        w.add_expert_group_count(int(cfg.n_group))
    if _cfg(cfg, "topk_group") is not None:
        w.add_expert_group_used_count(int(cfg.topk_group))


def _put_ffn(put, sd, hp: str, b: str, cfg, n_ff_exp: int) -> None:
    """Dense FFN or routed experts (+ selection bias) and shared experts of one layer."""
    mp = hp + "mlp."
    if mp + "gate.weight" not in sd:
        put(b + "ffn_gate.weight", sd[mp + "gate_proj.weight"])
        put(b + "ffn_up.weight", sd[mp + "up_proj.weight"])
        put(b + "ffn_down.weight", sd[mp + "down_proj.weight"])
        return
    put(b + "ffn_gate_inp.weight", sd[mp + "gate.weight"])
    if mp + "gate.e_score_correction_bias" in sd:
        put(b + "exp_probs_b.bias", sd[mp + "gate.e_score_correction_bias"])
    gate, up, down = _experts(sd, mp, cfg.n_routed_experts, n_ff_exp)
    put(b + "ffn_gate_exps.weight", gate)
    put(b + "ffn_up_exps.weight", up)
    put(b + "ffn_down_exps.weight", down)
    if cfg.n_shared_experts:
        put(b + "ffn_gate_shexp.weight", sd[mp + "shared_experts.gate_proj.weight"])
        put(b + "ffn_up_shexp.weight", sd[mp + "shared_experts.up_proj.weight"])
        put(b + "ffn_down_shexp.weight", sd[mp + "shared_experts.down_proj.weight"])


def convert_deepseek(cfg, sd: dict, path: str, outtype: str = "f32", kv_b: bool = False) -> None:
    """DeepSeek-V2/V3 (transformers deepseek_v2 / deepseek_v3) -> GGUF arch "deepseek2"."""
    n_head, n_layer = cfg.num_attention_heads, cfg.num_hidden_layers
    nope, rope, dv, kvr = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
    w = gguf.GGUFWriter(path, "deepseek2")
    w.add_name(f"hf-converted {cfg.model_type}")
    w.add_file_type(1 if outtype == "f16" else 0)
    w.add_vocab_size(cfg.vocab_size)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(n_head)
    if kv_b:  # the layout of files converted before attn_kv_b was split
        w.add_head_count_kv(n_head)
        w.add_key_length(nope + rope)
        w.add_value_length(dv)
    else:  # MLA as MQA: one kv head of the latent + the rotary key
        w.add_head_count_kv(1)
        w.add_key_length(kvr + rope)
        w.add_value_length(kvr)
        w.add_key_length_mla(nope + rope)
        w.add_value_length_mla(dv)
    if cfg.q_lora_rank is not None:
        w.add_q_lora_rank(cfg.q_lora_rank)
    w.add_kv_lora_rank(kvr)
    w.add_rope_dimension_count(rope)
    w.add_rope_freq_base(_rope_theta(cfg))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    _moe_common(w, cfg, cfg.moe_intermediate_size)
    if _cfg(cfg, "norm_topk_prob") and cfg.model_type == "deepseek_v3":
        w.add_expert_weights_norm(True)  # V2's router never renormalises
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID if cfg.model_type == "deepseek_v3"
                             else gguf.ExpertGatingFuncType.SOFTMAX)
    if cfg.model_type == "deepseek_v2" and _cfg(cfg, "topk_method") not in ("greedy", "group_limited_greedy"):
        raise ValueError(f"deepseek_v2: topk_method {cfg.topk_method!r} is not supported")
    if cfg.model_type == "deepseek_v2" and cfg.topk_method == "greedy":
        w.add_expert_group_count(1)  # n_group is only used by group_limited_greedy
        w.add_expert_group_used_count(1)
    _write_rope_scaling(w, cfg)
    rp = _rope_params(cfg)
    if rp.get("mscale_all_dim") is not None:
        # llama.cpp's (legacy) convention: 0.1 * mscale_all_dim under this name.
        w.add_rope_scaling_yarn_log_mul(0.1 * float(rp["mscale_all_dim"]))
    _write_synth_vocab(w, cfg.vocab_size)

    put = _putter(w, outtype)
    put("token_embd.weight", sd["model.embed_tokens.weight"])
    for l in range(n_layer):
        hp, b = f"model.layers.{l}.", f"blk.{l}."
        a = hp + "self_attn."
        put(b + "attn_norm.weight", sd[hp + "input_layernorm.weight"])
        if cfg.q_lora_rank is None:
            put(b + "attn_q.weight", sd[a + "q_proj.weight"])
        else:
            put(b + "attn_q_a.weight", sd[a + "q_a_proj.weight"])
            put(b + "attn_q_a_norm.weight", sd[a + "q_a_layernorm.weight"])
            put(b + "attn_q_b.weight", sd[a + "q_b_proj.weight"])
        put(b + "attn_kv_a_mqa.weight", sd[a + "kv_a_proj_with_mqa.weight"])
        put(b + "attn_kv_a_norm.weight", sd[a + "kv_a_layernorm.weight"])
        kvb = sd[a + "kv_b_proj.weight"]  # [n_head * (nope + dv)][kv_lora]
        if kv_b:
            put(b + "attn_kv_b.weight", kvb)
        else:
            per_head = kvb.reshape(n_head, nope + dv, kvr)
            put(b + "attn_k_b.weight", per_head[:, :nope, :].transpose(0, 2, 1))  # [h][kv_lora][nope]
            put(b + "attn_v_b.weight", per_head[:, nope:, :])                     # [h][dv][kv_lora]
        put(b + "attn_output.weight", sd[a + "o_proj.weight"])
        put(b + "ffn_norm.weight", sd[hp + "post_attention_layernorm.weight"])
        _put_ffn(put, sd, hp, b, cfg, cfg.moe_intermediate_size)
    put("output_norm.weight", sd["model.norm.weight"])
    lm = sd.get("lm_head.weight")
    put("output.weight", lm if lm is not None else sd["model.embed_tokens.weight"])
    _finish(w)


def convert_glm4moe(cfg, sd: dict, path: str, outtype: str = "f32", mtp: int = 0, seed: int = 0) -> None:
    """GLM-4.5 (transformers glm4_moe) -> GGUF arch "glm4moe", with `mtp` random
    next-token-prediction blocks after the trunk as llama.cpp's converter stores real ones."""
    n_head, n_layer = cfg.num_attention_heads, cfg.num_hidden_layers
    n_head_kv = cfg.num_key_value_heads
    head_dim = _cfg(cfg, "head_dim", default=cfg.hidden_size // n_head)
    partial = _rope_params(cfg).get("partial_rotary_factor", _cfg(cfg, "partial_rotary_factor", default=0.5))
    w = gguf.GGUFWriter(path, "glm4moe")
    w.add_name("hf-converted glm4_moe")
    w.add_file_type(1 if outtype == "f16" else 0)
    w.add_vocab_size(cfg.vocab_size)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(n_layer + mtp)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(int(head_dim * partial))
    w.add_rope_freq_base(_rope_theta(cfg))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    _moe_common(w, cfg, cfg.moe_intermediate_size)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if _cfg(cfg, "norm_topk_prob") is not None:
        w.add_expert_weights_norm(bool(cfg.norm_topk_prob))
    if mtp:
        w.add_nextn_predict_layers(mtp)
    _write_rope_scaling(w, cfg)
    _write_synth_vocab(w, cfg.vocab_size)

    put = _putter(w, outtype)
    put("token_embd.weight", sd["model.embed_tokens.weight"])
    for l in range(n_layer):
        for name, a in _glm4moe_layer(sd, cfg, l):
            put(f"blk.{l}." + name, a)
    # MTP blocks: a full MoE layer (the last layer's tensors, redrawn) plus the nextn ones.
    rng = np.random.default_rng(seed + 12345)
    e = cfg.hidden_size
    for k in range(mtp):
        b = f"blk.{n_layer + k}."
        extra = [("nextn.eh_proj.weight", np.zeros((e, 2 * e))), ("nextn.enorm.weight", np.zeros(e)),
                 ("nextn.hnorm.weight", np.zeros(e)), ("nextn.shared_head_norm.weight", np.zeros(e))]
        for name, a in list(_glm4moe_layer(sd, cfg, n_layer - 1)) + extra:
            v = rng.standard_normal(a.shape) / np.sqrt(a.shape[-1]) if a.ndim >= 2 else 1 + 0.1 * rng.standard_normal(a.shape)
            put(b + name, v)
    put("output_norm.weight", sd["model.norm.weight"])
    lm = sd.get("lm_head.weight")
    put("output.weight", lm if lm is not None else sd["model.embed_tokens.weight"])
    _finish(w)


def _glm4moe_layer(sd, cfg, l: int):
    """(GGUF name without blk.N., array) of one GLM-4.5 layer."""
    out = []
    hp = f"model.layers.{l}."
    a = hp + "self_attn."

    def put(name, arr):
        out.append((name, arr))

    put("attn_norm.weight", sd[hp + "input_layernorm.weight"])
    for t in ("q", "k", "v"):
        put(f"attn_{t}.weight", sd[a + f"{t}_proj.weight"])
        if a + f"{t}_proj.bias" in sd:
            put(f"attn_{t}.bias", sd[a + f"{t}_proj.bias"])
    if a + "q_norm.weight" in sd:
        put("attn_q_norm.weight", sd[a + "q_norm.weight"])
        put("attn_k_norm.weight", sd[a + "k_norm.weight"])
    put("attn_output.weight", sd[a + "o_proj.weight"])
    put("post_attention_norm.weight", sd[hp + "post_attention_layernorm.weight"])
    _put_ffn(put, sd, hp, "", cfg, cfg.moe_intermediate_size)
    return out


def convert_minimax_m2(cfg, sd: dict, path: str, outtype: str = "f32") -> None:
    """MiniMax-M2 (transformers minimax_m2) -> GGUF arch "minimax-m2", as llama.cpp's converter
    writes it: rope.dimension_count from rotary_dim (partial NeoX RoPE), expert and dense FFN
    lengths both intermediate_size, sigmoid gating and no other routing key (llama.cpp's graph
    always renormalises the top-k weights, never scales them), the q/k norms over the whole
    projections, the selection bias as exp_probs_b."""
    n_head, n_layer = cfg.num_attention_heads, cfg.num_hidden_layers
    head_dim = _cfg(cfg, "head_dim", default=cfg.hidden_size // n_head)
    partial = _rope_params(cfg).get("partial_rotary_factor", 1.0)
    n_rot = int(_cfg(cfg, "rotary_dim", default=head_dim * partial))
    if _rope_params(cfg).get("rope_type", "default") not in (None, "default"):
        raise ValueError("minimax_m2: RoPE scaling is not supported by this converter")
    w = gguf.GGUFWriter(path, "minimax-m2")
    w.add_name("hf-converted minimax_m2")
    w.add_file_type({"f32": 0, "f16": 1, "q8_0": 7, "q4_0": 2}[outtype])
    w.add_vocab_size(cfg.vocab_size)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(n_head)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(n_rot)
    w.add_rope_freq_base(_rope_theta(cfg))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_expert_count(cfg.num_local_experts)
    w.add_expert_used_count(cfg.num_experts_per_tok)
    w.add_expert_feed_forward_length(cfg.intermediate_size)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    _write_synth_vocab(w, cfg.vocab_size)

    put = _putter(w, outtype)
    put("token_embd.weight", sd["model.embed_tokens.weight"])
    for l in range(n_layer):
        hp, b = f"model.layers.{l}.", f"blk.{l}."
        a, mp = hp + "self_attn.", hp + "mlp."
        put(b + "attn_norm.weight", sd[hp + "input_layernorm.weight"])
        for t in ("q", "k", "v"):
            put(b + f"attn_{t}.weight", sd[a + f"{t}_proj.weight"])
        put(b + "attn_q_norm.weight", sd[a + "q_norm.weight"])  # n_head * head_dim
        put(b + "attn_k_norm.weight", sd[a + "k_norm.weight"])  # n_head_kv * head_dim
        put(b + "attn_output.weight", sd[a + "o_proj.weight"])
        put(b + "ffn_norm.weight", sd[hp + "post_attention_layernorm.weight"])
        put(b + "ffn_gate_inp.weight", sd[mp + "gate.weight"])
        put(b + "exp_probs_b.bias", sd[mp + "e_score_correction_bias"])
        gate, up, down = _experts(sd, mp, cfg.num_local_experts, cfg.intermediate_size)
        put(b + "ffn_gate_exps.weight", gate)
        put(b + "ffn_up_exps.weight", up)
        put(b + "ffn_down_exps.weight", down)
    put("output_norm.weight", sd["model.norm.weight"])
    lm = sd.get("lm_head.weight")
    put("output.weight", lm if lm is not None else sd["model.embed_tokens.weight"])
    _finish(w)


def _gpt_oss_metadata(cfg, w, n_layer: int) -> None:
    """llama.cpp's keys for gpt-oss: the window (its layer pattern is fixed: even layers slide)
    and YaRN as llama.cpp's converter writes it."""
    types = getattr(cfg, "layer_types", None)
    want = ["sliding_attention" if l % 2 == 0 else "full_attention" for l in range(n_layer)]
    if types is not None and list(types) != want:
        raise ValueError(f"gpt_oss: layer_types {types} differ from llama.cpp's fixed pattern {want}")
    w.add_sliding_window(cfg.sliding_window)
    rp = _rope_params(cfg)
    if rp.get("rope_type") == "yarn":
        if rp.get("truncate", True):
            raise ValueError("gpt_oss: only the model's own YaRN (truncate=false) has a GGUF form")
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rp["factor"])
        w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
        w.add_rope_scaling_yarn_beta_fast(rp.get("beta_fast", 32.0))
        w.add_rope_scaling_yarn_beta_slow(rp.get("beta_slow", 1.0))
    if getattr(cfg, "swiglu_limit", 7.0) != 7.0:
        raise ValueError("gpt_oss: llama.cpp's layout has no key for swiglu_limit != 7")


def _phimoe_metadata(cfg, w) -> None:
    """LongRoPE as llama.cpp's Phi-3 converter writes it (original context, attention factor;
    the factors are tensors); the model's own attention factor is its short/long_mscale."""
    rp = _rope_params(cfg)
    if cfg.sliding_window is not None:
        w.add_sliding_window(cfg.sliding_window)
    if rp.get("rope_type") in ("longrope", "su"):
        if rp["short_mscale"] != rp["long_mscale"]:
            raise ValueError("phimoe: one rope.scaling.attn_factor cannot hold short_mscale != long_mscale")
        w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
        w.add_rope_scaling_attn_factors(rp["short_mscale"])


def _gpt_oss_tensors(sd: dict, n_layer: int, n_ff: int):
    """gpt-oss layers in llama.cpp's layout: separate gate and up experts (the model interleaves
    them column by column), every bias F32, the FFN norm named post_attention_norm."""
    for l in range(n_layer):
        hp, b = f"model.layers.{l}.", f"blk.{l}."
        yield b + "attn_norm.weight", sd[hp + "input_layernorm.weight"]
        for s in ("q", "k", "v"):
            yield b + f"attn_{s}.weight", sd[hp + f"self_attn.{s}_proj.weight"]
            yield b + f"attn_{s}.bias", sd[hp + f"self_attn.{s}_proj.bias"]
        yield b + "attn_output.weight", sd[hp + "self_attn.o_proj.weight"]
        yield b + "attn_output.bias", sd[hp + "self_attn.o_proj.bias"]
        yield b + "attn_sinks.weight", sd[hp + "self_attn.sinks"]
        yield b + "post_attention_norm.weight", sd[hp + "post_attention_layernorm.weight"]
        mp = hp + "mlp."
        yield b + "ffn_gate_inp.weight", sd[mp + "router.weight"]
        yield b + "ffn_gate_inp.bias", sd[mp + "router.bias"]
        gu = sd[mp + "experts.gate_up_proj"]            # (E, n_embd, 2 n_ff), [in, out]
        gub = sd[mp + "experts.gate_up_proj_bias"]      # (E, 2 n_ff)
        assert gu.shape[2] == 2 * n_ff, gu.shape
        yield b + "ffn_gate_exps.weight", gu[:, :, 0::2].transpose(0, 2, 1)
        yield b + "ffn_up_exps.weight", gu[:, :, 1::2].transpose(0, 2, 1)
        yield b + "ffn_gate_exps.bias", gub[:, 0::2]
        yield b + "ffn_up_exps.bias", gub[:, 1::2]
        yield b + "ffn_down_exps.weight", sd[mp + "experts.down_proj"].transpose(0, 2, 1)
        yield b + "ffn_down_exps.bias", sd[mp + "experts.down_proj_bias"]


def _reorder_v_heads(a: np.ndarray, axis: int, nk: int, per: int, hd: int) -> np.ndarray:
    """Value heads from grouped by key head [K0: v0..v{per-1}, K1: ...] to tiled order
    [K0 v0, K1 v0, ..., K0 v1, ...] along `axis` (llama.cpp's qwen35 converter)."""
    a = np.moveaxis(a, axis, 0)
    rest = a.shape[1:]
    a = a.reshape(nk, per, hd, *rest).swapaxes(0, 1).reshape(nk * per * hd, *rest)
    return np.moveaxis(a, 0, axis)


def convert_qwen_hybrid(cfg, sd: dict, path: str, outtype: str = "f32", mtp: int = 0,
                        seed: int = 0) -> None:
    """Qwen3-Next (qwen3_next) / Qwen3.5 MoE (qwen3_5_moe_text) -> "qwen3next" / "qwen35moe"."""
    v35 = cfg.model_type == "qwen3_5_moe_text"
    arch = "qwen35moe" if v35 else "qwen3next"
    n_head, n_layer, e = cfg.num_attention_heads, cfg.num_hidden_layers, cfg.hidden_size
    head_dim = _cfg(cfg, "head_dim", default=e // n_head)
    nk, nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    hk, hv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    per = nv // nk
    rp = _rope_params(cfg)
    if rp.get("rope_type", "default") not in (None, "default"):
        raise ValueError(f"{cfg.model_type}: rope type '{rp.get('rope_type')}' is not supported by this converter")
    layer_types = list(cfg.layer_types)
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"hf-converted {cfg.model_type}")
    w.add_file_type({"f32": 0, "f16": 1, "q8_0": 7, "q4_0": 2, "mxfp4": 38}[outtype])
    w.add_vocab_size(cfg.vocab_size)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(e)
    w.add_block_count(n_layer + mtp)
    if _cfg(cfg, "intermediate_size") is not None:
        w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(n_head)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(int(head_dim * rp.get("partial_rotary_factor", 0.25)))
    w.add_rope_freq_base(_rope_theta(cfg))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_expert_count(cfg.num_experts)
    w.add_expert_used_count(cfg.num_experts_per_tok)
    w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
    w.add_expert_shared_feed_forward_length(cfg.shared_expert_intermediate_size)
    w.add_ssm_conv_kernel(cfg.linear_conv_kernel_dim)
    w.add_ssm_state_size(hk)
    w.add_ssm_group_count(nk)
    w.add_ssm_time_step_rank(nv)
    w.add_ssm_inner_size(hv * nv)
    w.add_array(f"{arch}.attention.recurrent_layers",
                [t == "linear_attention" for t in layer_types] + [False] * mtp)
    w.add_full_attention_interval(_cfg(cfg, "full_attention_interval", default=4))
    if v35:
        w.add_rope_dimension_sections(list(rp.get("mrope_section", [11, 11, 10])) + [0])
    if mtp:
        w.add_nextn_predict_layers(mtp)
    _write_synth_vocab(w, cfg.vocab_size)

    put = _putter(w, outtype)
    put("token_embd.weight", sd["model.embed_tokens.weight"])
    for l in range(n_layer):
        for name, a in _qwen_hybrid_layer(sd, cfg, l, layer_types[l] == "linear_attention", v35):
            put(f"blk.{l}." + name, a)
    # MTP blocks: a full-attention MoE block (the last full-attention layer's shapes, redrawn)
    # plus the nextn tensors, as llama.cpp's converter stores real ones.
    rng = np.random.default_rng(seed + 4242)
    last_full = max(i for i, t in enumerate(layer_types) if t != "linear_attention")
    for k in range(mtp):
        b = f"blk.{n_layer + k}."
        extra = [("nextn.eh_proj.weight", np.zeros((e, 2 * e))), ("nextn.enorm.weight", np.zeros(e)),
                 ("nextn.hnorm.weight", np.zeros(e)), ("nextn.shared_head_norm.weight", np.zeros(e))]
        for name, a in list(_qwen_hybrid_layer(sd, cfg, last_full, False, v35)) + extra:
            v = rng.standard_normal(a.shape) / np.sqrt(a.shape[-1]) if a.ndim >= 2 else 1 + 0.1 * rng.standard_normal(a.shape)
            put(b + name, v)
    put("output_norm.weight", sd["model.norm.weight"] + 1)
    lm = sd.get("lm_head.weight")
    put("output.weight", lm if lm is not None else sd["model.embed_tokens.weight"])
    _finish(w)


def _qwen_hybrid_layer(sd, cfg, l: int, linear: bool, v35: bool):
    """(GGUF name without blk.N., array) of one Qwen3-Next / Qwen3.5 layer."""
    out = []
    hp = f"model.layers.{l}."
    put = lambda name, arr: out.append((name, arr))
    # Zero-centred RMSNorm (1 + weight) stored as llama.cpp's converter stores it.
    put("attn_norm.weight", sd[hp + "input_layernorm.weight"] + 1)
    put("post_attention_norm.weight", sd[hp + "post_attention_layernorm.weight"] + 1)
    nk, nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    hk, hv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    per = nv // nk
    if linear:
        a = hp + "linear_attn."
        conv = sd[a + "conv1d.weight"].reshape(sd[a + "conv1d.weight"].shape[0], -1)
        A, dt, out_w = sd[a + "A_log"], sd[a + "dt_bias"], sd[a + "out_proj.weight"]
        if v35:
            qkv, z = sd[a + "in_proj_qkv.weight"], sd[a + "in_proj_z.weight"]
            beta, alpha = sd[a + "in_proj_b.weight"], sd[a + "in_proj_a.weight"]
            if nk != nv:  # tiled value heads
                kd = 2 * nk * hk
                qkv = np.concatenate([qkv[:kd], _reorder_v_heads(qkv[kd:], 0, nk, per, hv)])
                z = _reorder_v_heads(z, 0, nk, per, hv)
                beta, alpha = (_reorder_v_heads(x, 0, nk, per, 1) for x in (beta, alpha))
                A, dt = (_reorder_v_heads(x, 0, nk, per, 1) for x in (A, dt))
                conv = np.concatenate([conv[:kd], _reorder_v_heads(conv[kd:], 0, nk, per, hv)])
                out_w = _reorder_v_heads(out_w, 1, nk, per, hv)
            put("attn_qkv.weight", qkv)
            put("attn_gate.weight", z)
            put("ssm_beta.weight", beta)
            put("ssm_alpha.weight", alpha)
        else:
            # in_proj_qkvz: per key head [q | k | v of its value heads | z of them].
            w = sd[a + "in_proj_qkvz.weight"]
            g = w.reshape(nk, 2 * hk + 2 * per * hv, -1)
            q, k = g[:, :hk], g[:, hk:2 * hk]
            v, zz = g[:, 2 * hk:2 * hk + per * hv], g[:, 2 * hk + per * hv:]
            flat = lambda x: x.reshape(-1, w.shape[-1])
            put("attn_qkv.weight", np.concatenate([flat(q), flat(k), flat(v)]))
            put("attn_gate.weight", flat(zz))
            put("ssm_ba.weight", sd[a + "in_proj_ba.weight"])
        put("ssm_conv1d.weight", conv)
        put("ssm_dt.bias", dt)
        put("ssm_a", -np.exp(A))
        put("ssm_norm.weight", sd[a + "norm.weight"])
        put("ssm_out.weight", out_w)
    else:
        a = hp + "self_attn."
        for t in ("q", "k", "v"):
            put(f"attn_{t}.weight", sd[a + f"{t}_proj.weight"])
        put("attn_q_norm.weight", sd[a + "q_norm.weight"] + 1)
        put("attn_k_norm.weight", sd[a + "k_norm.weight"] + 1)
        put("attn_output.weight", sd[a + "o_proj.weight"])
    mp = hp + "mlp."
    put("ffn_gate_inp.weight", sd[mp + "gate.weight"])
    gate, up, down = _experts(sd, mp, cfg.num_experts, cfg.moe_intermediate_size)
    put("ffn_gate_exps.weight", gate)
    put("ffn_up_exps.weight", up)
    put("ffn_down_exps.weight", down)
    put("ffn_gate_inp_shexp.weight", sd[mp + "shared_expert_gate.weight"].reshape(-1))
    put("ffn_gate_shexp.weight", sd[mp + "shared_expert.gate_proj.weight"])
    put("ffn_up_shexp.weight", sd[mp + "shared_expert.up_proj.weight"])
    put("ffn_down_shexp.weight", sd[mp + "shared_expert.down_proj.weight"])
    return out


def convert_gemma4(cfg, sd: dict, path: str, outtype: str = "f32") -> None:
    """Gemma 4 MoE (transformers gemma4_text, the 26B-A4B layout) -> GGUF arch "gemma4", as
    llama.cpp's converter writes it: per-layer kv heads, the global layers' head size in
    key_length and the sliding ones' in key_length_swa, proportional RoPE as rope_freqs
    divisors (1e30 for the pairs that do not rotate), norms unshifted, the router's scale and
    per-expert scale as ffn_gate_inp.scale / ffn_down_exps.scale, experts with gate and up fused,
    the output head tied to the embedding."""
    n_layer, n_embd = cfg.num_hidden_layers, cfg.hidden_size
    if _cfg(cfg, "hidden_size_per_layer_input", default=0):
        raise ValueError("gemma4: per-layer input embeddings (E2B/E4B) are not supported")
    if _cfg(cfg, "num_kv_shared_layers", default=0):
        raise ValueError("gemma4: layers sharing another layer's KV (E2B/E4B) are not supported")
    if not cfg.enable_moe_block:
        raise ValueError("gemma4: dense models are not supported (enable_moe_block is false)")
    if not cfg.tie_word_embeddings:
        raise ValueError("gemma4: an output head of its own has no llama.cpp layout")
    swa = [t == "sliding_attention" for t in cfg.layer_types]
    rp = cfg.rope_parameters
    full, slide = rp["full_attention"], rp["sliding_attention"]
    if full["rope_type"] != "proportional" or slide.get("rope_type", "default") != "default":
        raise ValueError(f"gemma4: rope types {full['rope_type']} / {slide.get('rope_type')} "
                         "(proportional / default expected)")
    layers = [cfg.per_layer_config[l] for l in range(n_layer)]
    hd_full = next(c.head_dim for c, s in zip(layers, swa) if not s)
    hd_swa = next(c.head_dim for c, s in zip(layers, swa) if s)
    w = gguf.GGUFWriter(path, "gemma4")
    w.add_name("hf-converted gemma4_text")
    w.add_file_type(1 if outtype == "f16" else 0)
    w.add_vocab_size(cfg.vocab_size)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv([int(c.num_key_value_heads) for c in layers])
    w.add_key_length(hd_full)
    w.add_value_length(hd_full)
    w.add_key_length_swa(hd_swa)
    w.add_value_length_swa(hd_swa)
    w.add_rope_dimension_count(hd_full)  # the whole head, with rope_freqs below
    w.add_rope_dimension_count_swa(int(hd_swa * slide.get("partial_rotary_factor", 1.0)))
    w.add_rope_freq_base(float(full["rope_theta"]))
    w.add_rope_freq_base_swa(float(slide["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_sliding_window(cfg.sliding_window)
    w.add_sliding_window_pattern(swa)
    if cfg.final_logit_softcapping:
        w.add_final_logit_softcapping(float(cfg.final_logit_softcapping))
    w.add_shared_kv_layers(0)
    w.add_embedding_length_per_layer_input(0)
    w.add_expert_count(cfg.num_experts)
    w.add_expert_used_count(cfg.top_k_experts)
    w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
    _write_synth_vocab(w, cfg.vocab_size)

    put = _putter(w, outtype)
    put("token_embd.weight", sd["model.embed_tokens.weight"])
    rot = int(hd_full * full["partial_rotary_factor"] / 2)
    put("rope_freqs.weight", np.array([1.0] * rot + [1e30] * (hd_full // 2 - rot), dtype=np.float32))
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "post_attention_norm",
             "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm",
             "post_feedforward_layernorm_1": "post_ffw_norm_1",
             "pre_feedforward_layernorm_2": "pre_ffw_norm_2",
             "post_feedforward_layernorm_2": "post_ffw_norm_2",
             "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "router.proj": "ffn_gate_inp"}
    for l in range(n_layer):
        hp, b = f"model.layers.{l}.", f"blk.{l}."
        for hf, gg in names.items():
            if hp + hf + ".weight" in sd:  # v_proj is absent on the global layers (k_eq_v)
                put(b + gg + ".weight", sd[hp + hf + ".weight"])
        put(b + "ffn_gate_inp.scale", sd[hp + "router.scale"])
        put(b + "ffn_gate_up_exps.weight", sd[hp + "experts.gate_up_proj"])  # (E, 2 ff, embd)
        put(b + "ffn_down_exps.weight", sd[hp + "experts.down_proj"])        # (E, embd, ff)
        put(b + "ffn_down_exps.scale", sd[hp + "router.per_expert_scale"])
        put(b + "layer_output_scale.weight", sd[hp + "layer_scalar"])
    put("output_norm.weight", sd["model.norm.weight"])
    _finish(w)


def convert_state_dict(cfg, sd: dict, path: str, outtype: str = "f32", **opts) -> None:
    """sd: name -> float numpy array (HF names). Writes GGUF to `path`. opts: kv_b (DeepSeek's
    older attn_kv_b layout), mtp (GLM-4.5 next-token-prediction blocks)."""
    mt = cfg.model_type
    if mt not in ARCHS:
        raise ValueError(f"unsupported model_type '{mt}' (supported: {', '.join(ARCHS)})")
    if mt in ("deepseek_v2", "deepseek_v3"):
        return convert_deepseek(cfg, sd, path, outtype, kv_b=opts.get("kv_b", False))
    if mt == "glm4_moe":
        return convert_glm4moe(cfg, sd, path, outtype, mtp=opts.get("mtp", 0))
    if mt in ("qwen3_next", "qwen3_5_moe_text"):
        if not _cfg(cfg, "norm_topk_prob", default=True):
            raise ValueError(f"{mt}: norm_topk_prob=False but llama.cpp always renormalises the top-k weights")
        return convert_qwen_hybrid(cfg, sd, path, outtype, mtp=opts.get("mtp", 0))
    if mt == "minimax_m2":
        return convert_minimax_m2(cfg, sd, path, outtype)
    if mt == "gemma4_text":
        return convert_gemma4(cfg, sd, path, outtype)
    arch, renorm, permute = ARCHS[mt]
    norm_topk = bool(_cfg(cfg, "norm_topk_prob", default=(mt == "mixtral")))
    if mt != "mixtral" and norm_topk != renorm:
        raise ValueError(f"{mt}: norm_topk_prob={norm_topk} but llama.cpp's {arch} always uses "
                         f"{renorm}; the GGUF would compute a different model")
    if mt == "qwen2_moe" and (_cfg(cfg, "mlp_only_layers", default=[]) or _cfg(cfg, "decoder_sparse_step", default=1) != 1):
        raise ValueError("qwen2_moe: dense (mlp_only) layers are not supported by this converter")
    if mt == "qwen3_moe" and (_cfg(cfg, "mlp_only_layers", default=[]) or _cfg(cfg, "decoder_sparse_step", default=1) != 1):
        raise ValueError("qwen3_moe: dense (mlp_only) layers are not supported by this converter")

    n_embd = cfg.hidden_size
    n_head = cfg.num_attention_heads
    n_head_kv = _cfg(cfg, "num_key_value_heads", default=n_head)
    head_dim = _cfg(cfg, "head_dim", default=n_embd // n_head)
    n_layer = cfg.num_hidden_layers
    n_vocab = cfg.vocab_size
    n_expert = _cfg(cfg, "num_local_experts", "num_experts")
    n_used = cfg.num_experts_per_tok
    if mt in ("mixtral", "olmoe", "gpt_oss", "phimoe"):
        n_ff_exp = cfg.intermediate_size
    else:
        n_ff_exp = cfg.moe_intermediate_size

    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"hf-converted {mt}")
    w.add_file_type({"f32": 0, "f16": 1, "q8_0": 7, "q4_0": 2, "mxfp4": 38}[outtype])
    w.add_vocab_size(n_vocab)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(_rope_theta(cfg))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_used)
    w.add_expert_feed_forward_length(n_ff_exp)
    if mt == "qwen2_moe":
        w.add_expert_shared_feed_forward_length(cfg.shared_expert_intermediate_size)
    if mt == "gpt_oss":
        _gpt_oss_metadata(cfg, w, n_layer)
    if mt == "phimoe":
        _phimoe_metadata(cfg, w)

    _write_synth_vocab(w, n_vocab)
    put = _putter(w, outtype)

    put("token_embd.weight", sd["model.embed_tokens.weight"])
    if mt == "gpt_oss":
        for name, a in _gpt_oss_tensors(sd, n_layer, n_ff_exp):
            put(name, a)
        n_layer = 0  # done
    if mt == "phimoe":
        rp = _rope_params(cfg)
        put("rope_factors_long.weight", np.array(rp["long_factor"], dtype=np.float32))
        put("rope_factors_short.weight", np.array(rp["short_factor"], dtype=np.float32))
    for l in range(n_layer):
        hp = f"model.layers.{l}."
        b = f"blk.{l}."
        put(b + "attn_norm.weight", sd[hp + "input_layernorm.weight"])
        if hp + "input_layernorm.bias" in sd:  # LayerNorm (phimoe)
            put(b + "attn_norm.bias", sd[hp + "input_layernorm.bias"])
            put(b + "ffn_norm.bias", sd[hp + "post_attention_layernorm.bias"])
        q = sd[hp + "self_attn.q_proj.weight"]
        k = sd[hp + "self_attn.k_proj.weight"]
        if permute:
            q, k = permute_rope(q, n_head), permute_rope(k, n_head_kv)
        put(b + "attn_q.weight", q)
        put(b + "attn_k.weight", k)
        put(b + "attn_v.weight", sd[hp + "self_attn.v_proj.weight"])
        for s, t in (("q", "q"), ("k", "k"), ("v", "v")):
            key = hp + f"self_attn.{s}_proj.bias"
            if key in sd:
                put(b + f"attn_{t}.bias", sd[key])
        if hp + "self_attn.q_norm.weight" in sd:
            put(b + "attn_q_norm.weight", sd[hp + "self_attn.q_norm.weight"])
            put(b + "attn_k_norm.weight", sd[hp + "self_attn.k_norm.weight"])
        put(b + "attn_output.weight", sd[hp + "self_attn.o_proj.weight"])
        if hp + "self_attn.o_proj.bias" in sd:
            put(b + "attn_output.bias", sd[hp + "self_attn.o_proj.bias"])
        put(b + "ffn_norm.weight", sd[hp + "post_attention_layernorm.weight"])
        mp = hp + ("block_sparse_moe." if hp + "block_sparse_moe.gate.weight" in sd else "mlp.")
        put(b + "ffn_gate_inp.weight", sd[mp + ("router.weight" if mp + "router.weight" in sd else "gate.weight")])
        gate, up, down = _experts(sd, mp, n_expert, n_ff_exp)
        put(b + "ffn_gate_exps.weight", gate)
        put(b + "ffn_up_exps.weight", up)
        put(b + "ffn_down_exps.weight", down)
        if mp + "shared_expert_gate.weight" in sd:
            put(b + "ffn_gate_inp_shexp.weight", sd[mp + "shared_expert_gate.weight"].reshape(-1))
            put(b + "ffn_gate_shexp.weight", sd[mp + "shared_expert.gate_proj.weight"])
            put(b + "ffn_up_shexp.weight", sd[mp + "shared_expert.up_proj.weight"])
            put(b + "ffn_down_shexp.weight", sd[mp + "shared_expert.down_proj.weight"])
    put("output_norm.weight", sd["model.norm.weight"])
    if "model.norm.bias" in sd:
        put("output_norm.bias", sd["model.norm.bias"])
    lm = sd.get("lm_head.weight")
    put("output.weight", lm if lm is not None else sd["model.embed_tokens.weight"])
    if "lm_head.bias" in sd:
        put("output.bias", sd["lm_head.bias"])
    _finish(w)


def convert_model(model, path: str, outtype: str = "f32", **opts) -> None:
    sd = {k: v.detach().to("cpu").double().numpy() for k, v in model.state_dict().items()}
    convert_state_dict(model.config, sd, path, outtype, **opts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir", help="transformers model directory (config.json + weights)")
    ap.add_argument("out", help="output .gguf path")
    ap.add_argument("--outtype", choices=tuple(OUTTYPES), default="f32")
    ap.add_argument("--mla-kv-b", action="store_true", help="DeepSeek: the older attn_kv_b layout")
    ap.add_argument("--mtp", type=int, default=0, help="GLM-4.5, Qwen3-Next/3.5: next-token-prediction blocks to append")
    args = ap.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, torch_dtype=torch.float32)
    try:
        convert_model(model, args.out, args.outtype, kv_b=args.mla_kv_b, mtp=args.mtp)
    except (ValueError, KeyError) as e:
        print(f"hf_to_gguf: {args.model_dir}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
