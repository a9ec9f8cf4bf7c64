#!/usr/bin/env python3
"""Train moeflow's demo MoE: a tiny Mixtral-style model (GGUF arch "llama" with experts).

Why this shape: it exercises every part of the engine that a real MoE needs (GQA attention,
RoPE, RMSNorm, a top-2-of-8 router with SwiGLU experts, untied output) while staying small
enough (~9 MB in F16) to ship in the repository and to train on one CPU core in ~20 minutes.

RoPE rotates adjacent pairs (x[2i], x[2i+1]) -- ggml's "normal" mode used by the llama arch --
so the exported Q/K weights need no permutation.

Data: /work/shared/data/corpus/*.txt; the last 5% of the lines of every file is held out and
only used for the reported perplexity.
"""
import argparse
import glob
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

EOT = "<|endoftext|>"


def read_corpus(corpus_dir, holdout):
    train, held = [], []
    for path in sorted(glob.glob(os.path.join(corpus_dir, "*.txt"))):
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        cut = int(len(lines) * (1.0 - holdout))
        train.append("\n".join(lines[:cut]))
        held.append("\n".join(lines[cut:]))
    return train, held


def train_tokenizer(texts, vocab_size, out_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    # GPT-2 regex + byte-level alphabet, no prefix space: exactly llama.cpp's "gpt-2" pre-tokenizer.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    tok.save(out_path)
    return tok


def encode_stream(tok, texts):
    eot = tok.token_to_id(EOT)
    ids = []
    for t in texts:
        ids.append(eot)
        chunks = t.split("\n")
        # Encode line by line (the newline is kept) so memory stays small and it is fast.
        enc = tok.encode_batch([c + "\n" for c in chunks])
        for e in enc:
            ids.extend(e.ids)
    return torch.tensor(ids, dtype=torch.long)


def rope_tables(head_dim, ctx, base):
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.arange(ctx, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x, cos, sin):
    # x: [B, H, S, D]; pairs (2i, 2i+1) rotate by angle pos*theta_i
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[: x.shape[2]], sin[: x.shape[2]]
    y0 = x0 * c - x1 * s
    y1 = x0 * s + x1 * c
    return torch.stack((y0, y1), dim=-1).flatten(-2)


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class MoE(nn.Module):
    def __init__(self, d, ff, n_expert, top_k):
        super().__init__()
        self.n_expert, self.top_k = n_expert, top_k
        self.gate_inp = nn.Linear(d, n_expert, bias=False)
        s = 1.0 / math.sqrt(d)
        self.w_gate = nn.Parameter(torch.randn(n_expert, ff, d) * s)
        self.w_up = nn.Parameter(torch.randn(n_expert, ff, d) * s)
        self.w_down = nn.Parameter(torch.randn(n_expert, d, ff) / math.sqrt(ff))

    def forward(self, x):
        shp = x.shape
        x = x.reshape(-1, shp[-1])
        logits = self.gate_inp(x)
        probs = F.softmax(logits, dim=-1)
        topw, topi = probs.topk(self.top_k, dim=-1)
        topw = topw / topw.sum(-1, keepdim=True)  # Mixtral: softmax over the selected logits
        out = torch.zeros_like(x)
        for e in range(self.n_expert):
            rows, slot = (topi == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            xe = x[rows]
            h = F.silu(xe @ self.w_gate[e].t()) * (xe @ self.w_up[e].t())
            out.index_add_(0, rows, (h @ self.w_down[e].t()) * topw[rows, slot, None])
        # Switch-Transformer load-balancing loss: fraction routed x mean router probability.
        frac = torch.zeros(self.n_expert).index_add_(0, topi.flatten(),
                                                     torch.ones(topi.numel())) / topi.numel()
        aux = self.n_expert * (frac * probs.mean(0)).sum()
        return out.reshape(shp), aux, topi.reshape(*shp[:-1], self.top_k)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, hd = cfg["n_embd"], cfg["head_dim"]
        self.nh, self.nkv, self.hd = cfg["n_head"], cfg["n_head_kv"], hd
        self.attn_norm = RMSNorm(d, cfg["rms_eps"])
        self.wq = nn.Linear(d, self.nh * hd, bias=False)
        self.wk = nn.Linear(d, self.nkv * hd, bias=False)
        self.wv = nn.Linear(d, self.nkv * hd, bias=False)
        self.wo = nn.Linear(self.nh * hd, d, bias=False)
        self.ffn_norm = RMSNorm(d, cfg["rms_eps"])
        self.moe = MoE(d, cfg["n_ff"], cfg["n_expert"], cfg["n_expert_used"])

    def forward(self, x, cos, sin):
        B, S, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(B, S, self.nh, self.hd).transpose(1, 2)
        k = self.wk(h).view(B, S, self.nkv, self.hd).transpose(1, 2)
        v = self.wv(h).view(B, S, self.nkv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(B, S, -1))
        m, aux, topi = self.moe(self.ffn_norm(x))
        return x + m, aux, topi


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_embd = nn.Embedding(cfg["n_vocab"], cfg["n_embd"])
        nn.init.normal_(self.tok_embd.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg["n_layer"]))
        self.norm = RMSNorm(cfg["n_embd"], cfg["rms_eps"])
        self.output = nn.Linear(cfg["n_embd"], cfg["n_vocab"], bias=False)
        cos, sin = rope_tables(cfg["head_dim"], cfg["n_ctx"], cfg["rope_base"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, idx):
        x = self.tok_embd(idx)
        aux_total, routes = 0.0, []
        for b in self.blocks:
            x, aux, topi = b(x, self.cos, self.sin)
            aux_total = aux_total + aux
            routes.append(topi)
        return self.output(self.norm(x)), aux_total / len(self.blocks), routes


@torch.no_grad()
def evaluate(model, data, ctx, max_windows=400):
    model.eval()
    n = min((len(data) - 1) // ctx, max_windows)
    nll, cnt = 0.0, 0
    routes_all = []
    for i in range(0, n, 16):
        xs = torch.stack([data[j * ctx: j * ctx + ctx] for j in range(i, min(i + 16, n))])
        ys = torch.stack([data[j * ctx + 1: j * ctx + ctx + 1] for j in range(i, min(i + 16, n))])
        logits, _, routes = model(xs)
        nll += F.cross_entropy(logits.flatten(0, 1), ys.flatten(), reduction="sum").item()
        cnt += ys.numel()
        routes_all.append(routes)
    model.train()
    return math.exp(nll / cnt), routes_all


def routing_stats(routes_all, n_expert):
    """Per-layer expert usage and how often consecutive tokens reuse an expert (locality)."""
    stats = []
    n_layer = len(routes_all[0])
    for l in range(n_layer):
        r = torch.cat([ra[l] for ra in routes_all], dim=0)  # [N, S, k]
        usage = torch.bincount(r.flatten(), minlength=n_expert).float()
        usage = (usage / usage.sum()).tolist()
        prev, cur = r[:, :-1, :], r[:, 1:, :]
        overlap = (cur[..., :, None] == prev[..., None, :]).any(-1).float().mean().item()
        stats.append({"layer": l, "usage": [round(u, 4) for u in usage],
                      "consecutive_reuse": round(overlap, 4)})
    k = routes_all[0][0].shape[-1]
    random_reuse = 1 - math.comb(n_expert - k, k) / math.comb(n_expert, k)
    return stats, random_reuse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="../shared/data/corpus")
    ap.add_argument("--out", default="build-demo-model")
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--resume", action="store_true",
                    help="continue from OUT/ckpt.pt (same tokenizer) with a fresh time budget")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)

    train_txt, held_txt = read_corpus(args.corpus, holdout=0.05)
    tok_path = os.path.join(args.out, "tokenizer.json")
    if args.resume:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(tok_path)
    else:
        tok = train_tokenizer(train_txt, args.vocab, tok_path)
    train_ids = encode_stream(tok, train_txt)
    held_ids = encode_stream(tok, held_txt)
    print(f"tokens: train {len(train_ids)}  held-out {len(held_ids)}", flush=True)

    cfg = dict(n_vocab=tok.get_vocab_size(), n_embd=128, n_layer=4, n_head=4, n_head_kv=2,
               head_dim=32, n_ff=256, n_expert=8, n_expert_used=2, n_ctx=256,
               train_ctx=128, rope_base=10000.0, rms_eps=1e-5, aux_coef=0.01)
    model = Model(cfg)
    if args.resume:
        ck = torch.load(os.path.join(args.out, "ckpt.pt"))
        cfg = ck["cfg"]
        model.load_state_dict(ck["state"])
    print("params:", sum(p.numel() for p in model.parameters()), flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    ctx, budget = cfg["train_ctx"], args.minutes * 60
    t0, step, seen = time.time(), 0, 0
    log = []
    while True:
        frac = (time.time() - t0) / budget
        if frac >= 1.0:
            break
        # Warm-up then cosine decay on wall-clock fraction, so the run length is fixed in time.
        lr = args.lr * (1.0 if args.resume else min(1.0, step / 100)) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(train_ids) - ctx - 1, (args.batch,))
        xb = torch.stack([train_ids[s: s + ctx] for s in starts])
        yb = torch.stack([train_ids[s + 1: s + ctx + 1] for s in starts])
        logits, aux, _ = model(xb)
        ce = F.cross_entropy(logits.flatten(0, 1), yb.flatten())
        loss = ce + cfg["aux_coef"] * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        seen += xb.numel()
        if step % 50 == 0:
            el = time.time() - t0
            print(f"step {step} t={el:.0f}s tok={seen} ce={ce.item():.3f} aux={aux.item():.3f} "
                  f"lr={lr:.2e} tok/s={seen / el:.0f}", flush=True)
            log.append({"step": step, "t": el, "ce": ce.item(), "aux": aux.item()})
        if step % 500 == 0:
            torch.save({"cfg": cfg, "state": model.state_dict()}, os.path.join(args.out, "ckpt.pt"))

    ppl, routes = evaluate(model, held_ids, ctx)
    ppl_train, _ = evaluate(model, train_ids[: len(held_ids)], ctx)
    stats, rnd = routing_stats(routes, cfg["n_expert"])
    torch.save({"cfg": cfg, "state": model.state_dict()}, os.path.join(args.out, "ckpt.pt"))
    report = {"steps": step, "train_tokens_seen": seen, "train_tokens": len(train_ids),
              "heldout_tokens": len(held_ids), "heldout_ppl": ppl, "train_sample_ppl": ppl_train,
              "eval_ctx": ctx, "routing": stats, "random_consecutive_reuse": rnd,
              "minutes": args.minutes, "cfg": cfg, "log": log}
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(f"held-out ppl {ppl:.2f} (train-sample ppl {ppl_train:.2f})", flush=True)
    for s in stats:
        print(s, flush=True)
    print("random-routing consecutive reuse:", round(rnd, 4))


if __name__ == "__main__":
    main()
