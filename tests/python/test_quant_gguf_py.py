"""Cross-checks moeflow's block formats against the independent numpy implementation in gguf-py
(gguf.quants), through the hidden `moeflow quant-tool` command."""
import os
import subprocess

import numpy as np
import pytest

from oracle_import import require, require_module

gguf = require_module("gguf", "gguf-py, the independent block-format implementation")
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf.quants import dequantize as gq_dequantize, quantize as gq_quantize  # noqa: E402

BIN = os.environ.get("MOEFLOW_BINARY")
require(bool(BIN) and os.path.exists(BIN), f"MOEFLOW_BINARY not set or missing ({BIN!r})")

DEQUANT_TYPES = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
                 "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4"]
# gguf-py can produce these; moeflow must write the very same bytes.
SAME_BYTES = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4"]
# Byte offsets of the fp16 scale fields per block (random bytes there could be Inf/NaN).
HALF_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
               "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
               "IQ4_NL": [0], "IQ4_XS": [0]}


def run_tool(tmp_path, mode, typ, data, row_len=None):
    src, dst = tmp_path / f"{mode}.in", tmp_path / f"{mode}.out"
    data.tofile(src)
    cmd = [BIN, "quant-tool", "--mode", mode, "--type", typ, "--in", str(src), "--out", str(dst)]
    if row_len:
        cmd += ["--row-len", str(row_len)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    return np.fromfile(dst, dtype=np.float32 if mode == "dequantize" else np.uint8)


def random_valid_blocks(typ, nblocks, rng):
    qt = getattr(T, typ)
    bs, ts = gguf.GGML_QUANT_SIZES[qt]
    if typ in ("F16", "BF16"):
        h = rng.integers(0, 1 << 16, size=nblocks * 64, dtype=np.uint16)
        expo = (h >> 10) & 31 if typ == "F16" else (h >> 7) & 0xFF
        h[expo == (31 if typ == "F16" else 0xFF)] &= 0x3FFF  # finite only
        return h.view(np.uint8)
    raw = rng.integers(0, 256, size=(nblocks, ts), dtype=np.uint8)
    for off in HALF_FIELDS.get(typ, []):
        h = rng.integers(0, 1 << 16, size=nblocks, dtype=np.uint16)
        h[((h >> 10) & 31) == 31] &= 0xBFFF
        raw[:, off:off + 2] = h.view(np.uint8).reshape(nblocks, 2)
    if typ == "MXFP4":
        raw[:, 0] = rng.integers(0, 240, size=nblocks, dtype=np.uint8)
    return raw.reshape(-1)


@pytest.mark.parametrize("typ", DEQUANT_TYPES)
def test_dequantize_matches_gguf_py_bit_exact(tmp_path, typ):
    rng = np.random.default_rng(100 + DEQUANT_TYPES.index(typ))
    raw = random_valid_blocks(typ, 64, rng)
    ours = run_tool(tmp_path, "dequantize", typ, raw)
    theirs = gq_dequantize(raw, getattr(T, typ)).astype(np.float32).reshape(-1)
    assert ours.shape == theirs.shape
    # same formula, same float32 operation order -> identical bits
    np.testing.assert_array_equal(ours.view(np.uint32), theirs.view(np.uint32))


QUANT_BOUNDS = {"F16": 4e-4, "BF16": 3e-3, "Q8_0": 6e-3, "Q6_K": 0.019, "Q5_K": 0.039,
                "Q5_1": 0.042, "Q5_0": 0.047, "Q4_K": 0.078, "Q4_1": 0.086, "Q4_0": 0.095,
                "IQ4_NL": 0.081, "IQ4_XS": 0.082, "MXFP4": 0.127, "Q3_K": 0.158, "Q2_K": 0.294}


@pytest.mark.parametrize("typ", list(QUANT_BOUNDS))
def test_our_quantization_decodes_in_gguf_py(tmp_path, typ):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(32 * 1024).astype(np.float32)
    q = run_tool(tmp_path, "quantize", typ, x, row_len=4096)
    theirs = gq_dequantize(q, getattr(T, typ)).astype(np.float32).reshape(-1)
    ours = run_tool(tmp_path, "dequantize", typ, q, row_len=4096)
    np.testing.assert_array_equal(ours.view(np.uint32), theirs.view(np.uint32))
    rel = np.sqrt(np.mean((theirs.astype(np.float64) - x) ** 2) / np.mean(x.astype(np.float64) ** 2))
    assert 0 < rel < QUANT_BOUNDS[typ], f"{typ}: relative RMSE {rel:.4f}"


@pytest.mark.parametrize("typ", SAME_BYTES)
def test_quantize_bytes_match_gguf_py(tmp_path, typ):
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.standard_normal(8192), rng.uniform(-3, 3, 8192),
                        np.zeros(64), np.full(64, 0.37)]).astype(np.float32)
    ours = run_tool(tmp_path, "quantize", typ, x)
    theirs = gq_quantize(x.reshape(1, -1), getattr(T, typ)).reshape(-1).view(np.uint8)
    assert ours.shape == theirs.shape
    mismatch = np.flatnonzero(ours != theirs)
    assert mismatch.size == 0, f"{typ}: {mismatch.size} bytes differ, first at {mismatch[:8]}"


def test_gguf_py_quantization_roundtrips_through_moeflow(tmp_path):
    # the other direction: gguf-py writes, moeflow reads
    rng = np.random.default_rng(12)
    x = rng.standard_normal(4096).astype(np.float32)
    for typ in ("Q4_0", "Q5_1", "Q8_0", "MXFP4"):
        q = gq_quantize(x.reshape(1, -1), getattr(T, typ)).reshape(-1).view(np.uint8)
        ours = run_tool(tmp_path, "dequantize", typ, q)
        theirs = gq_dequantize(q, getattr(T, typ)).astype(np.float32).reshape(-1)
        np.testing.assert_array_equal(ours, theirs)


def test_bad_requests_fail_cleanly(tmp_path):
    x = np.ones(100, dtype=np.float32)  # not a multiple of 32
    src = tmp_path / "x.f32"
    x.tofile(src)
    for args in (["--mode", "quantize", "--type", "Q4_0"],
                 ["--mode", "quantize", "--type", "IQ2_XXS"],
                 ["--mode", "dequantize", "--type", "IQ2_XXS"],
                 ["--mode", "quantize", "--type", "NOPE"]):
        r = subprocess.run([BIN, "quant-tool", *args, "--in", str(src), "--out", str(tmp_path / "o")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0
        assert "error" in r.stderr and args[-1] in r.stderr, r.stderr


def test_half_and_bfloat_rounding_over_the_whole_range(tmp_path):
    # Round-to-nearest-even at every magnitude, subnormals, overflow and ties included.
    rng = np.random.default_rng(13)
    mags = 10.0 ** rng.uniform(-10, 6, 20000)
    x = (mags * rng.choice([-1.0, 1.0], mags.size)).astype(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, 65504, 65519.99, 65520, 6e-8, 2.9802322e-8,
                        5.9604645e-8, 8.940697e-8, 1e-45, 3.4e38, 1.0009765625, 1.00048828125],
                       dtype=np.float32)
    x = np.concatenate([x, special])
    x = np.concatenate([x, np.zeros((-x.size) % 32, dtype=np.float32)])
    ours = run_tool(tmp_path, "quantize", "F16", x).view(np.uint16)
    with np.errstate(over="ignore"):  # overflow to inf is the expected result
        want = x.astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(ours, want)
    ours_bf = run_tool(tmp_path, "quantize", "BF16", x)
    theirs_bf = gq_quantize(x.reshape(1, -1), T.BF16).reshape(-1).view(np.uint8)
    np.testing.assert_array_equal(ours_bf, theirs_bf)
    # and every half value decodes exactly
    allh = np.arange(1 << 16, dtype=np.uint16)
    allh = allh[((allh >> 10) & 31) != 31]
    back = run_tool(tmp_path, "dequantize", "F16", allh.view(np.uint8))
    np.testing.assert_array_equal(back, allh.view(np.float16).astype(np.float32))
