"""`moeflow perplexity` against llama.cpp (llama-cpp-python) on the shipped demo model.

llama.cpp's perplexity rule (its `llama-perplexity` tool, default mode) is recomputed here with
the llama_cpp Python API: the text is tokenized once with BOS, cut into chunks of n_ctx tokens,
each chunk evaluated from a reset context (logits_all=True) with its first token replaced by
BOS, and only the logits at positions n_ctx/2 .. n_ctx-2 scored (the next token's log-softmax
in float64); ppl = exp(mean NLL). llama.cpp runs with an F32 KV cache (as moeflow) and no flash
attention.

Text: the held-out tail (last 5% of the lines, which tools/demo_model/train.py never trained
on) of ../shared/data/corpus/wikipedia_texts.txt; n_ctx 256 (the demo model's GGUF
context_length).

Checks (bounds in PPL_REL / KL_REL / TOP1_POINTS: 10x the worst measured difference, rounded up
to one digit, or an earlier bound where that is tighter):
  * F16 demo model, every chunk: same token count, same number of scored tokens, relative
    difference of the perplexities < 2e-3 (measured worst 1.6e-4);
  * Q8_0 and Q4_K copies made by `moeflow quantize` (first 40 chunks): < 7e-3 (Q8_0, measured
    worst 6.6e-4) and < 6e-3 (Q4_K, measured worst 5.9e-4);
  * KL divergence of the Q4_K copy against the F16 model (first 20 chunks): moeflow's
    `--save-logits` (F16) + `--kl-divergence` (Q4_K) against the same KL computed here from
    llama.cpp's logits of both files: within 2e-2 relative (measured worst 1.2e-3), top-1
    agreement within 1.5 points (measured at most 0.47 points: 3.2x; llama.cpp rounds
    activations to F16 for F16 weights, so near-tied argmaxes flip); the tokens stored in
    moeflow's logits file are llama.cpp's chunk tokens (BOS first).
The text and models are fixed and both engines deterministic; what moves the numbers is the
llama.cpp build (two builds below) and moeflow's kernel level (MOEFLOW_SIMD: measured at avx512
and avx2, not yet at scalar).

Measured (demo model of commit 4676fea, 2-core machine, llama-cpp-python 0.3.36): 27000
tokens, 105 chunks, 13335 scored; F16 moeflow 56.3371 vs llama.cpp 56.3441 (F32 KV; 56.3390
with llama.cpp's default F16 KV): -1.2e-4 relative. 40 chunks: Q8_0 60.5053 vs 60.5429
(-6.2e-4), Q4_K 61.6065 vs 61.6110 (-7e-5). KL(F16 || Q4_K) over 20 chunks: moeflow 0.02488,
llama.cpp 0.02485; top-1 agreement 0.8728 vs 0.8685. `pytest -s` prints these (MEASURE lines).
The whole file takes ~30 s.
Measured again 2026-11-26 (moeflow f8fa329+, Xeon with AVX-512, llama-cpp-python 0.3.36 built by
scripts/setup-deps.sh), relative difference F16 / Q8_0 / Q4_K, KL relative, top-1 points:
  MOEFLOW_SIMD=avx512  -1.60e-4 / -6.62e-4 / -5.35e-4, KL +4.0e-4, top-1 +0.43
  MOEFLOW_SIMD=avx2    -1.60e-4 / -5.28e-4 / -5.88e-4, KL -4.0e-4, top-1 +0.47
"""
from __future__ import annotations

import json
import math
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

import oracle_models as om  # noqa: E402
from oracle_import import require, require_module  # noqa: E402

llama_cpp = require_module("llama_cpp", "llama.cpp, the perplexity reference")

ROOT = Path(__file__).resolve().parents[2]
MODEL = Path(os.environ.get("MOEFLOW_DEMO_MODEL", ROOT / "models" / "demo-moe.gguf"))
CORPUS = Path(os.environ.get("MOEFLOW_SHARED_DATA", ROOT.parent / "shared" / "data")) / "corpus"
TEXT_FILE = CORPUS / "wikipedia_texts.txt"
BIN = om.moeflow_binary()
require(BIN is not None, "moeflow binary not built (MOEFLOW_BINARY unset, no build*/moeflow)")
require(MODEL.exists(), f"demo model {MODEL} missing")
require(TEXT_FILE.exists(), f"shared corpus {TEXT_FILE} missing (../shared/data)")
require(om.moeflow_has_command(BIN, "perplexity"), f"{BIN} has no perplexity command")

CTX = 256
PPL_REL = {"F16": 2e-3, "Q8_0": 7e-3, "Q4_K": 6e-3}  # |moeflow / llama.cpp - 1| (docstring)
KL_REL, TOP1_POINTS = 2e-2, 0.015


@pytest.fixture(scope="module")
def text_file(tmp_path_factory) -> Path:
    lines = TEXT_FILE.read_text(encoding="utf-8").split("\n")
    held_out = "\n".join(lines[int(len(lines) * 0.95):])  # train.py's held-out split
    p = tmp_path_factory.mktemp("ppl") / "heldout.txt"
    p.write_text(held_out, encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def quantized(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("ppl_models")
    out = {}
    for t in ("Q8_0", "Q4_K"):
        out[t] = d / f"demo-{t}.gguf"
        r = subprocess.run([BIN, "quantize", "-q", "-m", str(MODEL), "-o", str(out[t]), "--type", t],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    return out


def open_llama(path: Path):
    # One thread: ggml's workers spin while waiting, which on a loaded 2-core machine makes a
    # 2-thread eval many times slower.
    kw = dict(model_path=str(path), n_ctx=CTX, n_batch=CTX, n_ubatch=CTX, n_threads=1,
              n_threads_batch=1, logits_all=True, verbose=False, type_k=0, type_v=0)
    try:
        return llama_cpp.Llama(**kw, flash_attn=False)
    except TypeError:
        return llama_cpp.Llama(**kw)


def llama_chunks(llm, text: str, n_chunks: int | None):
    """The token list and the chunks (BOS first) of llama.cpp's rule."""
    toks = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    n = len(toks) // CTX
    if n_chunks is not None:
        n = min(n, n_chunks)
    chunks = []
    for c in range(n):
        ch = list(toks[c * CTX:(c + 1) * CTX])
        ch[0] = llm.token_bos()
        chunks.append(ch)
    return toks, chunks


def scored_log_probs(llm, chunk: list[int]) -> np.ndarray:
    """float64 log-softmax of the scored rows (positions CTX/2 .. CTX-2) of one chunk."""
    llm.reset()
    llm.eval(chunk)
    first = CTX // 2
    logits = np.array(llm.scores[first:CTX - 1], dtype=np.float64)
    m = logits.max(axis=1, keepdims=True)
    return logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))


def llama_perplexity(path: Path, text: str, n_chunks: int | None = None):
    llm = open_llama(path)
    try:
        toks, chunks = llama_chunks(llm, text, n_chunks)
        nll, count = 0.0, 0
        for ch in chunks:
            lp = scored_log_probs(llm, ch)
            targets = np.array(ch[CTX // 2 + 1:])
            nll -= float(lp[np.arange(len(targets)), targets].sum())
            count += len(targets)
        return math.exp(nll / count), len(toks), len(chunks), count
    finally:
        llm.close()


def moeflow_perplexity(path: Path, text_file: Path, n_chunks: int | None = None, extra=()):
    cmd = [BIN, "perplexity", "-m", str(path), "-f", str(text_file), "-c", str(CTX), "--json", *extra]
    if n_chunks is not None:
        cmd += ["--chunks", str(n_chunks)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(cmd)}:\n{r.stderr}"
    return json.loads(r.stdout)


def test_f16_perplexity_matches_llamacpp(text_file):
    text = text_file.read_text(encoding="utf-8")
    want, n_tok, n_chunks, n_scored = llama_perplexity(MODEL, text)
    got = moeflow_perplexity(MODEL, text_file)
    print(f"\nMEASURE F16 moeflow {got['perplexity']:.4f} llama.cpp {want:.4f} "
          f"rel {got['perplexity'] / want - 1:+.2e} tokens {n_tok} chunks {n_chunks} "
          f"scored {n_scored} moeflow {got['seconds']:.2f} s")
    assert got["n_tokens"] == n_tok, "the two tokenizers disagree on the text"
    assert got["n_chunks"] == n_chunks and got["n_tokens_scored"] == n_scored
    assert got["ctx"] == CTX
    assert abs(got["perplexity"] / want - 1) < PPL_REL["F16"], (got["perplexity"], want)


@pytest.mark.parametrize("wtype", ["Q8_0", "Q4_K"])
def test_quantized_perplexity_matches_llamacpp(text_file, quantized, wtype):
    text = text_file.read_text(encoding="utf-8")
    want, _, n_chunks, n_scored = llama_perplexity(quantized[wtype], text, 40)
    got = moeflow_perplexity(quantized[wtype], text_file, 40)
    print(f"\nMEASURE {wtype} moeflow {got['perplexity']:.4f} llama.cpp {want:.4f} "
          f"rel {got['perplexity'] / want - 1:+.2e}")
    assert got["n_chunks"] == n_chunks and got["n_tokens_scored"] == n_scored
    assert abs(got["perplexity"] / want - 1) < PPL_REL[wtype], (got["perplexity"], want)


def read_saved_tokens(path: Path) -> tuple[int, int, list[int]]:
    """n_ctx, n_chunks and the evaluated tokens from a --save-logits file (runtime/logits_file.h)."""
    b = path.read_bytes()
    assert b[:8] == b"MFLOGITS"
    _version, _n_vocab, n_ctx, n_chunks, _first = struct.unpack_from("<5I", b, 8)
    off = 8 + 20 + 16
    for _ in range(2):  # shape, model name
        (n,) = struct.unpack_from("<I", b, off)
        off += 4 + n
    toks = list(struct.unpack_from(f"<{n_ctx * n_chunks}i", b, off))
    return n_ctx, n_chunks, toks


def test_kl_divergence_matches_llamacpp(text_file, quantized, tmp_path):
    n_chunks = 20
    saved = tmp_path / "exact.logits"
    exact = moeflow_perplexity(MODEL, text_file, n_chunks, ["--save-logits", str(saved)])
    got = moeflow_perplexity(quantized["Q4_K"], text_file, n_chunks, ["--kl-divergence", str(saved)])

    text = text_file.read_text(encoding="utf-8")
    ref, lossy = open_llama(MODEL), open_llama(quantized["Q4_K"])
    try:
        _, chunks = llama_chunks(ref, text, n_chunks)
        kl, same, count = 0.0, 0, 0
        for ch in chunks:
            p, q = scored_log_probs(ref, ch), scored_log_probs(lossy, ch)
            kl += float((np.exp(p) * (p - q)).sum())
            same += int((p.argmax(axis=1) == q.argmax(axis=1)).sum())
            count += p.shape[0]
    finally:
        ref.close()
        lossy.close()
    kl /= count
    print(f"\nMEASURE KL(F16||Q4_K) moeflow {got['kl_divergence']:.5f} llama.cpp {kl:.5f} "
          f"top1 moeflow {got['top1_agreement']:.4f} llama.cpp {same / count:.4f} "
          f"ppl {got['ppl_exact']:.4f} -> {got['perplexity']:.4f}")

    n_ctx, n_saved, toks = read_saved_tokens(saved)
    assert (n_ctx, n_saved) == (CTX, n_chunks)
    assert toks == [t for ch in chunks for t in ch], "saved chunk tokens differ from llama.cpp's"
    assert got["n_tokens_scored"] == count
    assert got["ppl_exact"] == pytest.approx(exact["perplexity"], rel=1e-12)
    assert kl > 1e-4, "Q4_K should be measurably different from F16"
    assert abs(got["kl_divergence"] / kl - 1) < KL_REL, (got["kl_divergence"], kl)
    assert abs(got["top1_agreement"] - same / count) < TOP1_POINTS
