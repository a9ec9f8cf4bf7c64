#!/usr/bin/env python3
"""Convert a transformers MoE model (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE) to GGUF.

An independent converter (written for moeflow, on the `gguf` python package) that lays out
tensors and metadata the way llama.cpp expects them, so the same file can be run by moeflow,
by llama.cpp and compared against transformers itself.

  python tools/hf_to_gguf.py MODEL_DIR OUT.gguf [--outtype f32|f16]

As a library: convert_model(model, path, outtype) takes an in-memory *ForCausalLM.
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
}

# Kept F32 in F16 files, as llama.cpp keeps them: routers decide discrete choices.
F32_ALWAYS = ("ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight")


def stored_as_f16(name: str, ndim: int, outtype: str) -> bool:
    """Whether tensor `name` is written as F16 (shared with tests that round their reference)."""
    return outtype == "f16" and ndim >= 2 and not name.endswith(F32_ALWAYS)


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


def convert_state_dict(cfg, sd: dict, path: str, outtype: str = "f32") -> None:
    """sd: name -> float numpy array (HF names). Writes GGUF to `path`."""
    mt = cfg.model_type
    if mt not in ARCHS:
        raise ValueError(f"unsupported model_type '{mt}' (supported: {', '.join(ARCHS)})")
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
    if mt in ("mixtral", "olmoe"):
        n_ff_exp = cfg.intermediate_size
    else:
        n_ff_exp = cfg.moe_intermediate_size

    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"hf-converted {mt}")
    w.add_file_type(1 if outtype == "f16" else 0)
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

    def put(name: str, a: np.ndarray) -> None:
        a = np.ascontiguousarray(a)
        if stored_as_f16(name, a.ndim, outtype):
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, a.astype(np.float32))

    put("token_embd.weight", sd["model.embed_tokens.weight"])
    for l in range(n_layer):
        hp = f"model.layers.{l}."
        b = f"blk.{l}."
        put(b + "attn_norm.weight", sd[hp + "input_layernorm.weight"])
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
        put(b + "ffn_norm.weight", sd[hp + "post_attention_layernorm.weight"])
        mp = hp + ("block_sparse_moe." if hp + "block_sparse_moe.gate.weight" in sd else "mlp.")
        put(b + "ffn_gate_inp.weight", sd[mp + "gate.weight"])
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
    lm = sd.get("lm_head.weight")
    put("output.weight", lm if lm is not None else sd["model.embed_tokens.weight"])

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def convert_model(model, path: str, outtype: str = "f32") -> None:
    sd = {k: v.detach().to("cpu").double().numpy() for k, v in model.state_dict().items()}
    convert_state_dict(model.config, sd, path, outtype)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir", help="transformers model directory (config.json + weights)")
    ap.add_argument("out", help="output .gguf path")
    ap.add_argument("--outtype", choices=("f32", "f16"), default="f32")
    args = ap.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, torch_dtype=torch.float32)
    try:
        convert_model(model, args.out, args.outtype)
    except (ValueError, KeyError) as e:
        print(f"hf_to_gguf: {args.model_dir}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
