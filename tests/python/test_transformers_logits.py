"""moeflow vs transformers (the reference implementation of each architecture).

For each architecture a tiny seeded random model is built from its transformers config (weights
redrawn O(1)-scaled, routers scaled for clear top-k margins, norm_topk_prob as llama.cpp computes
that architecture), converted to GGUF by tools/hf_to_gguf.py (F32 and F16), and run by
`moeflow eval` over a 32-token prompt plus 16 greedy steps. The reference is transformers in
float64 with eager attention; for F16 files the reference model carries the same F16-rounded
weights, so both sides compute the same model.

Metric: for every logits row, max|moeflow - ref| / max|ref|; all rows must be below the case's
bound in TOL (below), and the 16 greedy tokens must be identical.

The DeepSeek and GLM models (oracle_models.NEW_ARCHS) have a leading dense layer and two MoE
layers. DeepSeek files are written in the current layout (attn_k_b / attn_v_b) and, as
"deepseek2-kv_b", in the older one (attn_kv_b); the GLM file carries a next-token-prediction
block after the trunk ("+mtp"), which must not change the logits.

gemma4: Gemma 4 26B-A4B's layout in 4 layers (sliding layers with an 8-token window between
global layers of another head size whose keys are their values, proportional RoPE, a dense FFN
beside the experts, router scale, per-expert scale, layer scale, embedding scale, soft-capped
logits).

gpt-oss: the real YaRN (factor 32 over 4096 positions, unrounded ramp), an 8-token window on
every other layer, sinks, biases everywhere, pre-activations scaled past the clamp. phimoe:
LayerNorm, SparseMixer routing, LongRoPE short factors (the 48 positions stay below the original
context of 64), a 16-token window; and the long factors when moeflow's context exceeds 64,
against the same weights in a transformers model whose factors are the long ones (transformers'
Phi-MoE rotary always takes its short factors).

Bounds: 10x the largest max row error measured over the three kernel levels (MOEFLOW_SIMD=avx512,
avx2, scalar: the kernels sum in another order at each, so a CPU without AVX-512 or AVX2 gives
other last bits), rounded up to one digit. The models are seeded and the runs deterministic.
A real error is far above: float32 rounding leaves ~5e-7, while e.g. a wrong RoPE pair or norm
epsilon gives 1e-3 .. 1.
Measured 2026-11-26 (moeflow f8fa329+, Xeon with AVX-512, transformers 5.24.0, torch 2.15.0), max row
error F32 / F16 at avx512 | avx2 | scalar:
  mixtral        5.5e-7 / 5.1e-7 | 4.2e-7 / 4.2e-7 | 4.6e-7 / 5.5e-7
  qwen2moe       4.3e-7 / 4.5e-7 | 4.5e-7 / 4.8e-7 | 6.0e-7 / 6.4e-7
  qwen3moe       5.1e-7 / 6.4e-7 | 5.1e-7 / 4.8e-7 | 5.3e-7 / 6.0e-7
  olmoe          3.5e-7 / 3.6e-7 | 4.8e-7 / 3.8e-7 | 4.2e-7 / 6.0e-7
  gpt-oss        1.2e-6 / 2.1e-6 | 2.2e-6 / 2.1e-6 | 2.0e-6 / 1.3e-6
  phimoe         4.3e-7 / 4.5e-7 | 4.5e-7 / 4.4e-7 | 3.9e-7 / 4.7e-7
  deepseek2      1.0e-6 / 1.2e-6 | 8.5e-7 / 9.7e-7 | 1.3e-6 / 1.0e-6   (kv_b layout: the same)
  deepseek3      8.2e-7 / 7.2e-7 | 7.6e-7 / 6.7e-7 | 6.1e-7 / 7.6e-7
  glm4moe+mtp    5.3e-7 / 5.2e-7 | 5.3e-7 / 5.1e-7 | 5.8e-7 / 5.1e-7
  phimoe long    6.4e-7 (F32)    | 5.6e-7          | 7.2e-7
Gated DeltaNet hybrids (4 layers: 3 DeltaNet + gated full attention; 150-token prompt, i.e.
transformers' chunked delta rule over 3 chunks of 64, then 16 recurrent decode steps; the
qwen35moe file carries an MTP block that must not change the logits), measured 2026-11-27
(F32 / F16 at avx512 | avx2 | scalar; bound 1e-4, 7x the worst):
  qwen3next      7.1e-6 / 9.1e-6 | 5.4e-6 / 9.9e-6 | 9.0e-6 / 1.2e-5
  qwen35moe+mtp  5.2e-6 / 8.6e-6 | 5.6e-6 / 1.4e-5 | 6.3e-6 / 6.6e-6
The larger error than the attention-only models is the state recurrence in float32 (moeflow)
against float64 (transformers) over 166 positions. Checked to fail (greedy tokens differ) with
the attention output gate left out, the convolution left out (qkv passed through), and
qwen35moe's value heads read in qwen3next's grouped order instead of tiled.
  minimax-m2     3.0e-7 / 3.6e-7 | 3.1e-7 / 3.2e-7 | 3.0e-7 / 3.6e-7   (2026-11-27, 14c6570+)
minimax-m2: the test fails when a feature is lost: the same model's file with full RoPE instead
of rotary_dim 16 gives max 1.7 and other greedy tokens, the file without the selection bias
max 1.8 (other greedy tokens).
  gemma4         3.3e-6 / 3.5e-6 | 3.9e-6 / 4.0e-6 | 4.8e-6 / 4.2e-6   (2026-11-27, moeflow 1b52934+)
(gemma4's reference is not all float64: transformers' Gemma4RMSNorm normalises in float32, and a
layer has eight of them; a broken feature is far above: soft-capping off 1.1e-2, the sliding
window off changes the greedy tokens.)
(`pytest -s` prints a MEASURE line per case.)
"""
from __future__ import annotations

import numpy as np
import pytest

from oracle_import import require, require_module

torch = require_module("torch", "PyTorch, the float64 reference forward pass")
require_module("transformers", "transformers, the reference implementation of each architecture")
require_module("gguf", "gguf-py, the GGUF writer of tools/hf_to_gguf.py")

import oracle_models as om  # noqa: E402

from hf_to_gguf import convert_model  # noqa: E402

BIN = om.moeflow_binary()
require(BIN is not None, "moeflow binary not built (MOEFLOW_BINARY unset, no build*/moeflow)")
require(om.moeflow_has_command(BIN, "eval"), f"{BIN} has no eval command")

N_PROMPT, N_GREEDY = 32, 16
# (case, outtype): bound on the max row error, 10x the measured worst (module docstring).
TOL = {
    ("mixtral", "f32"): 6e-6, ("mixtral", "f16"): 6e-6,
    ("qwen2moe", "f32"): 7e-6, ("qwen2moe", "f16"): 7e-6,
    ("qwen3moe", "f32"): 6e-6, ("qwen3moe", "f16"): 7e-6,
    ("olmoe", "f32"): 5e-6, ("olmoe", "f16"): 7e-6,
    ("gpt-oss", "f32"): 3e-5, ("gpt-oss", "f16"): 3e-5,
    ("phimoe", "f32"): 5e-6, ("phimoe", "f16"): 5e-6,
    ("deepseek2", "f32"): 2e-5, ("deepseek2", "f16"): 2e-5,
    ("deepseek2-kv_b", "f32"): 2e-5, ("deepseek2-kv_b", "f16"): 2e-5,
    ("deepseek3", "f32"): 9e-6, ("deepseek3", "f16"): 8e-6,
    ("glm4moe+mtp", "f32"): 6e-6, ("glm4moe+mtp", "f16"): 6e-6,
    ("phimoe-long", "f32"): 8e-6,
    ("qwen3next", "f32"): 1e-4, ("qwen3next", "f16"): 1e-4,
    ("qwen35moe+mtp", "f32"): 1e-4, ("qwen35moe+mtp", "f16"): 1e-4,
    ("minimax-m2", "f32"): 4e-6, ("minimax-m2", "f16"): 4e-6,
    ("gemma4", "f32"): 5e-5, ("gemma4", "f16"): 5e-5,
}


@pytest.fixture(scope="module")
def models():
    torch.set_num_threads(2)
    return {}


# (case name, arch of oracle_models, converter options)
CASES = [(a, a, {}) for a in om.ARCHS] + [
    ("deepseek2", "deepseek2", {}), ("deepseek2-kv_b", "deepseek2", {"kv_b": True}),
    ("deepseek3", "deepseek3", {}), ("glm4moe+mtp", "glm4moe", {"mtp": 1}),
    ("qwen3next", "qwen3next", {}), ("qwen35moe+mtp", "qwen35moe", {"mtp": 1})]
# The hybrids' prompt crosses several of transformers' 64-token chunks of the gated delta rule
# (its chunked prefill is the reference for moeflow's token-by-token recurrence).
N_PROMPT_HYBRID = 150


@pytest.mark.parametrize("outtype", ["f32", "f16"])
@pytest.mark.parametrize("case,arch,opts", CASES, ids=[c[0] for c in CASES])
def test_logits_and_greedy_match_transformers(tmp_path, case, arch, opts, outtype):
    model = om.make_model(arch, seed=11)
    om.round_like_gguf(model, outtype)
    path = tmp_path / f"{case}-{outtype}.gguf"
    convert_model(model, str(path), outtype, **opts)

    rng = np.random.default_rng(5)
    n_prompt = N_PROMPT_HYBRID if arch in om.HYBRID_ARCHS else N_PROMPT
    prompt = [int(t) for t in rng.integers(3, model.config.vocab_size, n_prompt)]
    ref, ref_gen = om.reference_greedy(model, prompt, N_GREEDY)

    got, info = om.run_moeflow_eval(BIN, path, prompt, N_GREEDY, tmp_path / "logits.f32")
    assert info["generated"] == ref_gen, f"{arch}/{outtype}: greedy tokens differ"
    assert got.shape == ref.shape == (n_prompt + N_GREEDY, model.config.vocab_size)
    err = om.rel_err_rows(got.astype(np.float64), ref)
    worst = int(err.argmax())
    print(f"\nMEASURE {case} {outtype} max {err.max():.3g} row {worst}")
    tol = TOL[(case, outtype)]
    assert err.max() < tol, f"{case}/{outtype}: row {worst} relative error {err.max():.2e} >= {tol:.0e}"


def test_phimoe_long_context_takes_the_long_rope_factors(tmp_path):
    import copy
    model = om.make_model("phimoe", seed=11)
    path = tmp_path / "phimoe.gguf"
    convert_model(model, str(path), "f32")
    # The same weights with the long factors as the ones transformers uses.
    cfg = copy.deepcopy(model.config)
    cfg.rope_parameters["short_factor"] = list(cfg.rope_parameters["long_factor"])
    long_model = type(model)(cfg).double().eval()
    long_model.load_state_dict(model.state_dict())

    rng = np.random.default_rng(6)
    prompt = [int(t) for t in rng.integers(3, model.config.vocab_size, N_PROMPT)]
    ref_long, gen_long = om.reference_greedy(long_model, prompt, N_GREEDY)
    ref_short, _ = om.reference_greedy(model, prompt, N_GREEDY)
    assert om.rel_err_rows(ref_long, ref_short).max() > 1e-2, "the factors must make a difference"

    ctx = 4 * om.PHIMOE_ORIG_CTX  # beyond the original context: the long factors
    got, info = om.run_moeflow_eval(BIN, path, prompt, N_GREEDY, tmp_path / "logits.f32", ctx=ctx)
    assert info["generated"] == gen_long
    err = om.rel_err_rows(got.astype(np.float64), ref_long)
    print(f"\nMEASURE phimoe-long f32 max {err.max():.3g} row {int(err.argmax())}")
    tol = TOL[("phimoe-long", "f32")]
    assert err.max() < tol, f"phimoe long context: row {int(err.argmax())} relative error {err.max():.2e} >= {tol:.0e}"
