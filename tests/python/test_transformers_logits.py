"""moeflow vs transformers (the reference implementation of each architecture).

For each architecture a tiny seeded random model is built from its transformers config (weights
redrawn O(1)-scaled, routers scaled for clear top-k margins, norm_topk_prob as llama.cpp computes
that architecture), converted to GGUF by tools/hf_to_gguf.py (F32 and F16), and run by
`moeflow eval` over a 32-token prompt plus 16 greedy steps. The reference is transformers in
float64 with eager attention; for F16 files the reference model carries the same F16-rounded
weights, so both sides compute the same model.

Metric: for every logits row, max|moeflow - ref| / max|ref|; all rows must be < 1e-3, and the
16 greedy tokens must be identical.
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

N_PROMPT, N_GREEDY, TOL = 32, 16, 1e-3


@pytest.fixture(scope="module")
def models():
    torch.set_num_threads(2)
    return {}


@pytest.mark.parametrize("outtype", ["f32", "f16"])
@pytest.mark.parametrize("arch", om.ARCHS)
def test_logits_and_greedy_match_transformers(tmp_path, arch, outtype):
    model = om.make_model(arch, seed=11)
    om.round_like_gguf(model, outtype)
    path = tmp_path / f"{arch}-{outtype}.gguf"
    convert_model(model, str(path), outtype)

    rng = np.random.default_rng(5)
    prompt = [int(t) for t in rng.integers(3, model.config.vocab_size, N_PROMPT)]
    ref, ref_gen = om.reference_greedy(model, prompt, N_GREEDY)

    got, info = om.run_moeflow_eval(BIN, path, prompt, N_GREEDY, tmp_path / "logits.f32")
    assert info["generated"] == ref_gen, f"{arch}/{outtype}: greedy tokens differ"
    assert got.shape == ref.shape == (N_PROMPT + N_GREEDY, model.config.vocab_size)
    err = om.rel_err_rows(got.astype(np.float64), ref)
    worst = int(err.argmax())
    assert err.max() < TOL, f"{arch}/{outtype}: row {worst} relative error {err.max():.2e}"
