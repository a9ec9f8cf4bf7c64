"""moeflow vs transformers (the reference implementation of each architecture).

For each architecture a tiny seeded random model is built from its transformers config (weights
redrawn O(1)-scaled, routers scaled for clear top-k margins, norm_topk_prob as llama.cpp computes
that architecture), converted to GGUF by tools/hf_to_gguf.py (F32 and F16), and run by
`moeflow eval` over a 32-token prompt plus 16 greedy steps. The reference is transformers in
float64 with eager attention; for F16 files the reference model carries the same F16-rounded
weights, so both sides compute the same model.

Metric: for every logits row, max|moeflow - ref| / max|ref|; all rows must be < 1e-3, and the
16 greedy tokens must be identical.

The DeepSeek and GLM models (oracle_models.NEW_ARCHS) have a leading dense layer and two MoE
layers. DeepSeek files are written in the current layout (attn_k_b / attn_v_b) and, as
"deepseek2-kv_b", in the older one (attn_kv_b); the GLM file carries a next-token-prediction
block after the trunk ("+mtp"), which must not change the logits.
"""
from __future__ import annotations

import numpy as np
import pytest

import oracle_models as om  # noqa: E402

torch = om.require("torch")
om.require("transformers")
om.require("gguf")
from hf_to_gguf import convert_model  # noqa: E402

BIN = om.moeflow_binary()
if BIN is None or not om.moeflow_has_command(BIN, "eval"):
    om.oracle_unavailable("moeflow binary with the eval command not available")

N_PROMPT, N_GREEDY, TOL = 32, 16, 1e-3


@pytest.fixture(scope="module")
def models():
    torch.set_num_threads(2)
    return {}


# (case name, arch of oracle_models, converter options)
CASES = [(a, a, {}) for a in om.ARCHS] + [
    ("deepseek2", "deepseek2", {}), ("deepseek2-kv_b", "deepseek2", {"kv_b": True}),
    ("deepseek3", "deepseek3", {}), ("glm4moe+mtp", "glm4moe", {"mtp": 1})]


@pytest.mark.parametrize("outtype", ["f32", "f16"])
@pytest.mark.parametrize("case,arch,opts", CASES, ids=[c[0] for c in CASES])
def test_logits_and_greedy_match_transformers(tmp_path, case, arch, opts, outtype):
    model = om.make_model(arch, seed=11)
    om.round_like_gguf(model, outtype)
    path = tmp_path / f"{case}-{outtype}.gguf"
    convert_model(model, str(path), outtype, **opts)

    rng = np.random.default_rng(5)
    prompt = [int(t) for t in rng.integers(3, model.config.vocab_size, N_PROMPT)]
    ref, ref_gen = om.reference_greedy(model, prompt, N_GREEDY)

    got, info = om.run_moeflow_eval(BIN, path, prompt, N_GREEDY, tmp_path / "logits.f32")
    assert info["generated"] == ref_gen, f"{arch}/{outtype}: greedy tokens differ"
    assert got.shape == ref.shape == (N_PROMPT + N_GREEDY, model.config.vocab_size)
    err = om.rel_err_rows(got.astype(np.float64), ref)
    worst = int(err.argmax())
    assert err.max() < TOL, f"{arch}/{outtype}: row {worst} relative error {err.max():.2e}"
