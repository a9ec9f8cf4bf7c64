#!/usr/bin/env python3
"""Export the trained demo MoE (train.py's ckpt.pt + tokenizer.json) to GGUF.

Two steps: this script writes an F32 GGUF in llama.cpp's layout for a Mixtral-style model
(arch "llama" with experts; byte-level BPE tokenizer with llama.cpp's "gpt-2" pre-tokenizer)
through gguf-py, then `moeflow quantize` re-encodes it with moeflow's own encoders and writer
into the shipped file (default F16 weights: lossless for the trained F32 weights to within
F16 rounding, so tests compare it with a float64 reference at 1e-3; F32 norms and routers).

usage: tools/demo_model/export.py --ckpt build-demo-model --moeflow build/moeflow \
           --type F16 -o models/demo-moe.gguf
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
import gguf

EOT = "<|endoftext|>"


def tokenizer_metadata(w, tok_json_path):
    with open(tok_json_path, encoding="utf-8") as f:
        tj = json.load(f)
    vocab = tj["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    specials = {a["content"]: a["id"] for a in tj.get("added_tokens", [])}
    for t, i in specials.items():
        if i >= len(tokens):
            tokens.extend([None] * (i + 1 - len(tokens)))
        tokens[i] = t
    assert all(t is not None for t in tokens), "tokenizer ids are not contiguous"
    merges = tj["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    types = [gguf.TokenType.CONTROL if t in specials else gguf.TokenType.NORMAL for t in tokens]
    eot = specials[EOT]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(eot)
    w.add_eos_token_id(eot)
    # Every training document starts with <|endoftext|>, so a prompt does too.
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    return len(tokens)


def export_f32(ckpt_dir, path):
    ck = torch.load(os.path.join(ckpt_dir, "ckpt.pt"), map_location="cpu")
    cfg, sd = ck["cfg"], ck["state"]
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("moeflow-demo-moe")
    w.add_context_length(cfg["n_ctx"])
    w.add_embedding_length(cfg["n_embd"])
    w.add_block_count(cfg["n_layer"])
    w.add_feed_forward_length(cfg["n_ff"])
    w.add_head_count(cfg["n_head"])
    w.add_head_count_kv(cfg["n_head_kv"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_rope_freq_base(cfg["rope_base"])
    w.add_layer_norm_rms_eps(cfg["rms_eps"])
    w.add_expert_count(cfg["n_expert"])
    w.add_expert_used_count(cfg["n_expert_used"])
    n_vocab = tokenizer_metadata(w, os.path.join(ckpt_dir, "tokenizer.json"))
    assert n_vocab == cfg["n_vocab"], (n_vocab, cfg["n_vocab"])

    def put(name, t):
        w.add_tensor(name, np.ascontiguousarray(t.detach().float().numpy()))

    put("token_embd.weight", sd["tok_embd.weight"])
    for l in range(cfg["n_layer"]):
        p, b = f"blocks.{l}.", f"blk.{l}."
        put(b + "attn_norm.weight", sd[p + "attn_norm.weight"])
        # RoPE in train.py rotates adjacent pairs, llama.cpp's "normal" mode: no permutation.
        put(b + "attn_q.weight", sd[p + "wq.weight"])
        put(b + "attn_k.weight", sd[p + "wk.weight"])
        put(b + "attn_v.weight", sd[p + "wv.weight"])
        put(b + "attn_output.weight", sd[p + "wo.weight"])
        put(b + "ffn_norm.weight", sd[p + "ffn_norm.weight"])
        put(b + "ffn_gate_inp.weight", sd[p + "moe.gate_inp.weight"])
        put(b + "ffn_gate_exps.weight", sd[p + "moe.w_gate"])
        put(b + "ffn_up_exps.weight", sd[p + "moe.w_up"])
        put(b + "ffn_down_exps.weight", sd[p + "moe.w_down"])
    put("output_norm.weight", sd["norm.weight"])
    put("output.weight", sd["output.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", default="build-demo-model", help="train.py's --out directory")
    ap.add_argument("--moeflow", default="build/moeflow")
    ap.add_argument("--type", default="F16", help="weight type of the shipped file")
    ap.add_argument("-o", "--output", default="models/demo-moe.gguf")
    a = ap.parse_args()
    f32 = os.path.join(a.ckpt, "demo-moe-f32.gguf")
    export_f32(a.ckpt, f32)
    os.makedirs(os.path.dirname(os.path.abspath(a.output)), exist_ok=True)
    r = subprocess.run([a.moeflow, "quantize", "-m", f32, "-o", a.output, "--type", a.type, "-q"])
    if r.returncode != 0:
        sys.exit(r.returncode)
    print(f"wrote {a.output} ({os.path.getsize(a.output) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
