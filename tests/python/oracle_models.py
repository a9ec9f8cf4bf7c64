"""Tiny seeded transformers MoE models and helpers shared by the oracle tests.

Weights are re-drawn (not transformers' std-0.02 init) so that activations are O(1), logits are
spread and greedy choices have clear margins: N(0, 1/fan_in) matrices, N(0, 1) embeddings,
1 + N(0, 0.1^2) norm weights, N(0, 0.1^2) biases, routers scaled by ROUTER_SCALE.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

ROUTER_SCALE = 4.0
# minimax-m2: MiniMax-M2 (partial NeoX RoPE, q/k RMSNorm over the whole projections, sigmoid
# routing with the selection bias, renormalised weights, no shared expert), two MoE layers.
ARCHS = ("mixtral", "qwen2moe", "qwen3moe", "olmoe", "gpt-oss", "phimoe", "minimax-m2", "gemma4")
# deepseek2: DeepSeek-V2(-Lite) (MLA without q_lora, softmax routing, group-limited greedy,
# YaRN with mscale == mscale_all_dim); deepseek3: DeepSeek-V3 (q_lora, sigmoid routing with the
# selection bias, groups scored by their best two, renormalised and scaled weights); both with
# a leading dense layer and shared experts. glm4moe: GLM-4.5 (partial NeoX RoPE, q/k/v biases,
# q/k norms, sigmoid routing with bias, one shared expert, a leading dense layer).
NEW_ARCHS = ("deepseek2", "deepseek3", "glm4moe")
# Gated DeltaNet hybrids: Qwen3-Next and Qwen3.5 MoE, four layers (three DeltaNet, then full
# attention with the output gate), a sigmoid-gated shared expert. Value heads are twice the key
# heads, so the grouped (qwen3next) and tiled (qwen35moe) head orders differ.
HYBRID_ARCHS = ("qwen3next", "qwen35moe")
# Selection-bias buffers (not parameters) redrawn like the weights: N(0, BIAS_STD^2), so they
# change which experts are picked without deciding alone (sigmoid scores are in (0, 1)).
BIAS_STD = 0.1


def oracle_unavailable(reason: str):
    """An oracle (tool, binary, data) this test needs is missing: skip, or fail under CI=true,
    where every oracle must run (tests/python/oracle_import.py)."""
    from oracle_import import unavailable
    unavailable(reason)


def require(module: str):
    """import `module` for an oracle test (oracle_unavailable when it cannot be imported)."""
    from oracle_import import require_module
    return require_module(module, "an oracle of this test")


PHIMOE_ORIG_CTX = 64


def phimoe_factors(n_pairs: int, long: bool) -> list[float]:
    """Phi-3.5-MoE's LongRoPE factors in the tiny models: distinct per pair, short != long."""
    x = [i / max(1, n_pairs - 1) for i in range(n_pairs)]
    return [1.5 + 6.3 * v for v in x] if long else [1.0 + 1.05 * v for v in x]


def oracle_import(module: str):
    """Imports an oracle's module: a skip when it is missing on a developer's machine, a failure
    under CI=true (an oracle test that cannot run must not pass as skipped there)."""
    return require(module)


def moeflow_binary() -> str | None:
    b = os.environ.get("MOEFLOW_BINARY")
    if b and Path(b).exists():
        return b
    # Outside ctest: the most recently built binary of any build directory.
    cands = [c for c in ROOT.glob("build*/moeflow") if c.is_file()]
    if cands:
        return str(max(cands, key=lambda c: c.stat().st_mtime))
    return shutil.which("moeflow")


def moeflow_has_command(binary: str, cmd: str) -> bool:
    r = subprocess.run([binary, cmd, "--help"], capture_output=True, text=True)
    return r.returncode == 0


def make_config(arch: str, n_layer: int = 2, vocab: int = 512, hidden: int = 64):
    import transformers as T
    common = dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=n_layer,
                  num_attention_heads=4, max_position_embeddings=256, tie_word_embeddings=False)
    if arch == "mixtral":
        cfg = T.MixtralConfig(**common, intermediate_size=96, num_key_value_heads=2,
                              num_local_experts=8, num_experts_per_tok=2, rms_norm_eps=1e-5,
                              rope_theta=1e6)
    elif arch == "qwen2moe":
        cfg = T.Qwen2MoeConfig(**common, intermediate_size=96, moe_intermediate_size=32,
                               shared_expert_intermediate_size=64, num_key_value_heads=2,
                               num_experts=8, num_experts_per_tok=4, norm_topk_prob=False,
                               rms_norm_eps=1e-6, rope_theta=1e6, qkv_bias=True)
    elif arch == "qwen3moe":
        # head_dim 32 with 4 heads: q is 128 wide while n_embd is 64, exercising key_length.
        cfg = T.Qwen3MoeConfig(**common, intermediate_size=96, moe_intermediate_size=32,
                               num_key_value_heads=2, head_dim=32, num_experts=8,
                               num_experts_per_tok=2, norm_topk_prob=True, rms_norm_eps=1e-6,
                               rope_theta=1e6)
    elif arch == "olmoe":
        cfg = T.OlmoeConfig(**common, intermediate_size=32, num_key_value_heads=4, num_experts=8,
                            num_experts_per_tok=2, norm_topk_prob=False, rms_norm_eps=1e-5,
                            rope_theta=1e4)
    elif arch in ("deepseek2", "deepseek3"):
        # YaRN over a 32-position original context, so the 48 positions of the test go beyond it.
        v3 = arch == "deepseek3"
        yarn = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                "original_max_position_embeddings": 32, "beta_fast": 32.0, "beta_slow": 1.0,
                "mscale": 1.0 if v3 else 0.707, "mscale_all_dim": 1.0 if v3 else 0.707}
        mla = dict(common, max_position_embeddings=128, intermediate_size=96,
                   moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=3,
                   first_k_dense_replace=1, kv_lora_rank=32, qk_nope_head_dim=16,
                   qk_rope_head_dim=8, v_head_dim=16, n_group=4, topk_group=2, rms_norm_eps=1e-6,
                   num_key_value_heads=4,
                   rope_parameters=yarn)
        if v3:
            cfg = T.DeepseekV3Config(**mla, q_lora_rank=24, n_shared_experts=1, norm_topk_prob=True,
                                     routed_scaling_factor=2.5)
        else:
            cfg = T.DeepseekV2Config(**mla, q_lora_rank=None, n_shared_experts=2,
                                     topk_method="group_limited_greedy", routed_scaling_factor=1.5)
    elif arch == "glm4moe":
        # head_dim 32 with 4 heads (q is 128 wide, n_embd 64); half of each head rotates.
        cfg = T.Glm4MoeConfig(**common, intermediate_size=96, moe_intermediate_size=32,
                              n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
                              first_k_dense_replace=1, num_key_value_heads=2, head_dim=32,
                              attention_bias=True, use_qk_norm=True, routed_scaling_factor=2.5,
                              norm_topk_prob=True, n_group=1, topk_group=1, rms_norm_eps=1e-5,
                              rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                               "partial_rotary_factor": 0.5})
    elif arch == "minimax-m2":
        # head_dim 32 with 4 heads (q is 128 wide, n_embd 64); rotary_dim 16 (half of each head,
        # the released config's legacy field, as llama.cpp's converter reads it); top-3 of 8.
        cfg = T.MiniMaxM2Config(**common, intermediate_size=32, num_key_value_heads=2, head_dim=32,
                                rotary_dim=16, num_local_experts=8, num_experts_per_tok=3,
                                rms_norm_eps=1e-6, rope_theta=5e6)
    elif arch == "gpt-oss":
        # The real model's YaRN (factor 32 over 4096 positions, base 150000, truncate=false) and
        # clamp; head_dim 32 so q is wider than n_embd; an 8-token window on layers 0, 2, ...
        # so the 48 positions of the test cross it; top-4 of 8 experts.
        common["max_position_embeddings"] = 4096 * 32
        cfg = T.GptOssConfig(**common, intermediate_size=32, num_key_value_heads=2, head_dim=32,
                             num_local_experts=8, num_experts_per_tok=4, sliding_window=8,
                             rms_norm_eps=1e-5)
    elif arch in HYBRID_ARCHS:
        hybrid = dict(common, intermediate_size=96, moe_intermediate_size=32,
                      shared_expert_intermediate_size=64, num_key_value_heads=2, head_dim=32,
                      num_experts=8, num_experts_per_tok=2, rms_norm_eps=1e-6,
                      linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
                      linear_num_key_heads=2, linear_num_value_heads=4,
                      layer_types=["linear_attention" if (i + 1) % 4 else "full_attention"
                                   for i in range(n_layer)])
        rope = {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25}
        if arch == "qwen3next":
            cfg = T.Qwen3NextConfig(**hybrid, norm_topk_prob=True, rope_parameters=rope)
        else:
            del hybrid["intermediate_size"]  # Qwen3.5's MoE config has no dense FFN size
            cfg = T.Qwen3_5MoeTextConfig(**hybrid, rope_parameters=dict(
                rope, mrope_section=[1, 1, 2], mrope_interleaved=True))
    elif arch == "gemma4":
        # The 26B-A4B's layout at a tiny size: 8 heads; sliding layers (head 16, 4 kv heads, an
        # 8-token window the 48 positions cross, RoPE base 1e4) between global ones (head 32, one
        # kv head whose key projection is also the values: cache rows half as wide; proportional
        # RoPE over a quarter of each head at base 1e6), a dense GELU FFN beside top-2 of 8 GELU
        # experts, soft-capped logits, the output head tied to the embedding; no per-layer
        # embeddings or shared KV (as the 26B).
        types = ["full_attention" if (i + 1) % 2 == 0 or i == n_layer - 1 else "sliding_attention"
                 for i in range(n_layer)]
        common["tie_word_embeddings"] = True
        common["num_attention_heads"] = 8
        cfg = T.Gemma4TextConfig(**common, intermediate_size=96, num_key_value_heads=4, head_dim=16,
                                 global_head_dim=32, num_global_key_value_heads=1,
                                 attention_k_eq_v=True, sliding_window=8, layer_types=types,
                                 final_logit_softcapping=30.0, hidden_size_per_layer_input=0,
                                 num_kv_shared_layers=0, enable_moe_block=True, num_experts=8,
                                 top_k_experts=2, moe_intermediate_size=32, rms_norm_eps=1e-6,
                                 hidden_activation="gelu_pytorch_tanh")
    elif arch == "phimoe":
        cfg = T.PhimoeConfig(**common, intermediate_size=32, num_key_value_heads=2,
                             num_local_experts=8, num_experts_per_tok=2, rms_norm_eps=1e-5,
                             attention_bias=True, lm_head_bias=True, sliding_window=16,
                             rope_parameters={"rope_type": "longrope", "rope_theta": 1e4,
                                              "short_factor": phimoe_factors(hidden // 8, False),
                                              "long_factor": phimoe_factors(hidden // 8, True),
                                              "original_max_position_embeddings": PHIMOE_ORIG_CTX,
                                              "short_mscale": 1.1, "long_mscale": 1.1})
    else:
        raise ValueError(arch)
    cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id = 1, 2, None
    cfg._attn_implementation = "eager"
    # The plain per-expert loop: grouped_mm kernels reject float64.
    cfg._experts_implementation = "eager"
    return cfg


def _check_rope(cfg, want: float):
    rp = getattr(cfg, "rope_parameters", None)
    if isinstance(rp, dict):
        rp["rope_theta"] = want


def make_model(arch: str, seed: int = 0, n_layer: int | None = None, vocab: int = 512,
               router_scale: float = ROUTER_SCALE, hidden: int = 64):
    """A float64 *ForCausalLM with seeded O(1)-scaled weights (2 layers; 3 for the DeepSeek/GLM
    architectures: a dense layer then two MoE layers)."""
    import torch
    import transformers as T
    if n_layer is None:
        n_layer = 3 if arch in NEW_ARCHS else 4 if arch in HYBRID_ARCHS or arch == "gemma4" else 2
    cfg = make_config(arch, n_layer, vocab, hidden)
    if arch not in NEW_ARCHS and arch != "gemma4":
        _check_rope(cfg, {"olmoe": 1e4, "gpt-oss": 150000.0, "phimoe": 1e4, "qwen3next": 1e7,
                          "qwen35moe": 1e7, "minimax-m2": 5e6}.get(arch, 1e6))
    cls = {"mixtral": T.MixtralForCausalLM, "qwen2moe": T.Qwen2MoeForCausalLM,
           "qwen3moe": T.Qwen3MoeForCausalLM, "olmoe": T.OlmoeForCausalLM,
           "deepseek2": T.DeepseekV2ForCausalLM, "deepseek3": T.DeepseekV3ForCausalLM,
           "glm4moe": T.Glm4MoeForCausalLM, "gpt-oss": T.GptOssForCausalLM,
           "phimoe": T.PhimoeForCausalLM, "qwen3next": T.Qwen3NextForCausalLM,
           "qwen35moe": T.Qwen3_5MoeForCausalLM, "minimax-m2": T.MiniMaxM2ForCausalLM,
           "gemma4": T.Gemma4ForCausalLM}[arch]
    torch.manual_seed(seed)
    model = cls(cfg).double().eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = p.shape
            zero_centred = arch in HYBRID_ARCHS and not name.endswith("linear_attn.norm.weight")
            gain = name.endswith(("router.scale", "router.per_expert_scale"))
            if (name.endswith("norm.weight") or "layernorm" in name or gain) and not name.endswith("bias"):
                # The hybrids' RMSNorm multiplies by 1 + weight (all but the DeltaNet's gated norm).
                v = (0.0 if zero_centred else 1.0) + 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)
            elif name.endswith("bias"):
                v = 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)
            elif "embed_tokens" in name:
                # Gemma scales the embedding by sqrt(hidden): rows of std 1/sqrt(hidden).
                std = 1.0 / np.sqrt(shape[-1]) if arch == "gemma4" else 1.0
                v = std * torch.randn(shape, generator=g, dtype=torch.float64)
            else:
                std = 1.0 / np.sqrt(shape[-1])
                if is_router(name) and "shared_expert" not in name:
                    # Gemma 4's router reads rms_norm(x) * scale / sqrt(hidden), entries of
                    # ~1/sqrt(hidden): std router_scale gives logits of std ~router_scale.
                    std = router_scale if arch == "gemma4" else std * router_scale
                if name.endswith("experts.gate_up_proj") and arch == "gpt-oss":
                    std *= 5  # pre-activations beyond the clamp at 7, often enough to matter
                v = std * torch.randn(shape, generator=g, dtype=torch.float64)
            p.copy_(v)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                # float32-exact: the GGUF stores it as F32.
                b.copy_((BIAS_STD * torch.randn(b.shape, generator=g, dtype=torch.float64)).float())
            elif name.endswith("layer_scalar"):
                # Gemma 4's per-layer output scale (ones at init; the real model's are not).
                b.copy_((1.0 + 0.1 * torch.randn(b.shape, generator=g, dtype=torch.float64)).float())
    return model


def is_router(hf_name: str) -> bool:
    return hf_name.endswith(("mlp.gate.weight", "block_sparse_moe.gate.weight",
                             "shared_expert_gate.weight", "mlp.router.weight", "router.proj.weight"))


def _gguf_type(hf_name: str, outtype: str) -> str:
    """The GGUF type tools/hf_to_gguf.py stores HF parameter `hf_name` in."""
    from hf_to_gguf import OUTTYPES
    if (is_router(hf_name) or hf_name.endswith("bias") or "norm" in hf_name or hf_name.endswith("sinks")
            or "conv1d" in hf_name):
        return "F32"
    dense, experts = OUTTYPES[outtype]
    return experts if ".experts." in hf_name else dense


def _roundtrip_rows(a, qtype: str):
    """Quantize then dequantize the rows (last dim) of a float64 array with gguf-py."""
    import gguf
    if qtype == "F16":
        return a.astype(np.float16).astype(np.float64)
    qt = gguf.GGMLQuantizationType[qtype]
    flat = a.reshape(-1, a.shape[-1]).astype(np.float32)
    return gguf.quants.dequantize(gguf.quants.quantize(flat, qt), qt).astype(np.float64).reshape(a.shape)


def round_like_gguf(model, outtype: str):
    """Round, in place, the weights that tools/hf_to_gguf.py stores in a lower precision (F16 or a
    block format: matrices other than the routers), so the float64 model is exactly the model in
    the file. Quantization blocks run along the GGUF rows: the input dim of each matrix (gpt-oss
    keeps its experts as [in, out], so those are transposed first)."""
    import torch
    if outtype == "f32":
        return
    gpt_oss = model.config.model_type == "gpt_oss"
    with torch.no_grad():
        for name, p in model.named_parameters():
            t = _gguf_type(name, outtype)
            if p.dim() < 2 or t == "F32":
                continue
            a = p.detach().numpy()
            transposed = gpt_oss and ".experts." in name
            if transposed:
                a = np.swapaxes(a, -1, -2)
            r = _roundtrip_rows(a, t)
            if transposed:
                r = np.swapaxes(r, -1, -2)
            p.copy_(torch.from_numpy(np.ascontiguousarray(r)))


def reference_greedy(model, prompt: list[int], n_greedy: int):
    """(logits rows for the prompt and each fed-back generated token, generated ids), float64:
    one prefill, then one cached step per generated token (the last one is fed too, so there are
    len(prompt) + n_greedy rows, as `moeflow eval` writes them)."""
    import torch
    gen, rows = [], []
    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True)
        rows.append(out.logits[0])
        past = out.past_key_values
        for _ in range(n_greedy):
            nxt = int(torch.argmax(rows[-1][-1]))
            gen.append(nxt)
            out = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            rows.append(out.logits[0])
    return torch.cat(rows).numpy(), gen


def run_moeflow_eval(binary: str, model_path: str, tokens: list[int], n_greedy: int, out: Path,
                     threads: int = 2, ctx: int = 0):
    cmd = [binary, "eval", "-m", str(model_path), "--tokens", ",".join(map(str, tokens)),
           "--logits-out", str(out), "-t", str(threads)]
    if ctx:
        cmd += ["-c", str(ctx)]
    if n_greedy:
        cmd += ["--greedy", str(n_greedy)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stderr}"
    line = [l for l in r.stdout.splitlines() if l.strip().startswith("{")][-1]
    info = json.loads(line)
    logits = np.fromfile(out, dtype="<f4")
    assert logits.size == info["rows"] * info["n_vocab"], "logits file size disagrees with rows*n_vocab"
    return logits.reshape(info["rows"], info["n_vocab"]), info


def rel_err_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row max|a-b| / max|b| (b the reference)."""
    return np.abs(a - b).max(axis=1) / np.abs(b).max(axis=1)
