"""`moeflow gen-model` checked with gguf-py (an independent GGUF reader and dequantizer):
llama.cpp tensor names/shapes and metadata, the exact generated values (re-derived here from the
documented counter-based RNG), weight statistics, quantization error of every quantized type,
and clean failures on bad settings."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

from oracle_import import require, require_module

gguf = require_module("gguf", "gguf-py, the independent GGUF reader")
from oracle_models import moeflow_binary  # noqa: E402

BIN = moeflow_binary()
require(BIN is not None, "moeflow binary not built (MOEFLOW_BINARY unset, no build*/moeflow)")

M64 = (1 << 64) - 1


def gen(tmp_path, arch, preset="tiny", *extra, name=None):
    out = tmp_path / (name or f"{arch}-{preset}.gguf")
    r = subprocess.run([BIN, "gen-model", "--arch", arch, "--preset", preset, "-o", str(out), "-q",
                        "-t", "2", *extra], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return out


def fields(reader):
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def tensors(reader):
    return {t.name: t for t in reader.tensors}


# --- independent re-derivation of the generator's random stream ---------------------------
def _mix(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _splitmix_scalar(state):
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def _fnv1a(s: str) -> int:
    h = 0xCBF29CE484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001B3) & M64
    return h


def expected_row(name, seed, row, n, mean, std):
    s = seed ^ ((_fnv1a(name) * 0xD6E8FEB86659FD93) & M64)
    _, z = _splitmix_scalar(s)
    _, state = _splitmix_scalar(z ^ row)
    k = np.arange(1, (n + 1) // 2 + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        r = _mix(np.uint64(state) + k * np.uint64(0x9E3779B97F4A7C15))
    u1 = ((r >> np.uint64(40)).astype(np.float32) + np.float32(0.5)) * np.float32(2.0 ** -24)
    u2 = ((r >> np.uint64(8)) & np.uint64(0xFFFFFF)).astype(np.float32) * np.float32(2.0 ** -24)
    rad = np.float32(std) * np.sqrt(np.float32(-2.0) * np.log(u1))
    th = np.float32(2 * np.pi) * u2
    out = np.empty(2 * len(k), dtype=np.float32)
    out[0::2] = mean + rad * np.cos(th)
    out[1::2] = mean + rad * np.sin(th)
    return out[:n]


# --- expected llama.cpp layout, written from llama.cpp's tensor tables -------------------------
SHAPES = {  # arch -> (n_embd, n_head, n_kv, head_dim, ff_exp, ff_shexp, experts, used, vocab)
    "mixtral": (64, 4, 2, 16, 128, 0, 8, 2, 512),
    "qwen2moe": (64, 4, 4, 16, 64, 128, 8, 4, 512),
    "qwen3moe": (64, 4, 2, 32, 64, 0, 8, 2, 512),
    "olmoe": (64, 4, 4, 16, 64, 0, 8, 2, 512),
    "gpt-oss": (64, 4, 2, 32, 64, 0, 8, 4, 512),
    "phimoe": (64, 4, 2, 16, 128, 0, 8, 2, 512),
}
GGUF_ARCH = {"mixtral": "llama", "qwen2moe": "qwen2moe", "qwen3moe": "qwen3moe", "olmoe": "olmoe",
             "gpt-oss": "gpt-oss", "phimoe": "phimoe"}


def expected_tensors(arch, n_layer):
    e, h, kv, hd, ff, sh, ne, _, v = SHAPES[arch]
    t = {"token_embd.weight": [e, v], "output_norm.weight": [e], "output.weight": [e, v]}
    for l in range(n_layer):
        b = f"blk.{l}."
        t.update({b + "attn_norm.weight": [e], b + "attn_q.weight": [e, h * hd],
                  b + "attn_k.weight": [e, kv * hd], b + "attn_v.weight": [e, kv * hd],
                  b + "attn_output.weight": [h * hd, e], b + "ffn_norm.weight": [e],
                  b + "ffn_gate_inp.weight": [e, ne], b + "ffn_gate_exps.weight": [e, ff, ne],
                  b + "ffn_up_exps.weight": [e, ff, ne], b + "ffn_down_exps.weight": [ff, e, ne]})
        if arch == "qwen2moe":
            t.update({b + "attn_q.bias": [h * hd], b + "attn_k.bias": [kv * hd],
                      b + "attn_v.bias": [kv * hd], b + "ffn_gate_inp_shexp.weight": [e],
                      b + "ffn_gate_shexp.weight": [e, sh], b + "ffn_up_shexp.weight": [e, sh],
                      b + "ffn_down_shexp.weight": [sh, e]})
        if arch == "qwen3moe":
            t.update({b + "attn_q_norm.weight": [hd], b + "attn_k_norm.weight": [hd]})
        if arch == "olmoe":
            t.update({b + "attn_q_norm.weight": [h * hd], b + "attn_k_norm.weight": [kv * hd]})
        if arch in ("gpt-oss", "phimoe"):
            t.update({b + "attn_q.bias": [h * hd], b + "attn_k.bias": [kv * hd],
                      b + "attn_v.bias": [kv * hd], b + "attn_output.bias": [e]})
        if arch == "gpt-oss":  # llama.cpp's openai-moe tables
            del t[b + "ffn_norm.weight"]
            t.update({b + "post_attention_norm.weight": [e], b + "attn_sinks.weight": [h],
                      b + "ffn_gate_inp.bias": [ne], b + "ffn_gate_exps.bias": [ff, ne],
                      b + "ffn_up_exps.bias": [ff, ne], b + "ffn_down_exps.bias": [e, ne]})
        if arch == "phimoe":
            t.update({b + "attn_norm.bias": [e], b + "ffn_norm.bias": [e]})
    if arch == "phimoe":
        t.update({"output_norm.bias": [e], "output.bias": [v], "rope_factors_long.weight": [hd // 2],
                  "rope_factors_short.weight": [hd // 2]})
    return t


@pytest.mark.parametrize("arch", list(SHAPES))
def test_layout_and_metadata(tmp_path, arch):
    path = gen(tmp_path, arch, "tiny", "--layers", "3")
    r = gguf.GGUFReader(str(path))
    got = {n: [int(x) for x in t.shape] for n, t in tensors(r).items()}
    assert got == expected_tensors(arch, 3)
    f = fields(r)
    a = GGUF_ARCH[arch]
    e, h, kv, hd, ff, sh, ne, used, v = SHAPES[arch]
    assert f["general.architecture"] == a
    assert f[f"{a}.block_count"] == 3
    assert f[f"{a}.embedding_length"] == e
    assert f[f"{a}.attention.head_count"] == h
    assert f[f"{a}.attention.head_count_kv"] == kv
    assert f[f"{a}.attention.key_length"] == hd == f[f"{a}.attention.value_length"]
    assert f[f"{a}.rope.dimension_count"] == hd
    assert f[f"{a}.expert_count"] == ne and f[f"{a}.expert_used_count"] == used
    assert f[f"{a}.expert_feed_forward_length"] == ff
    if arch == "qwen2moe":
        assert f[f"{a}.expert_shared_feed_forward_length"] == sh
    if arch == "gpt-oss":
        assert f[f"{a}.attention.sliding_window"] == 8
        assert f[f"{a}.rope.scaling.type"] == "yarn" and f[f"{a}.rope.scaling.factor"] == 32
        assert f[f"{a}.rope.scaling.original_context_length"] == 4096
    if arch == "phimoe":
        assert f[f"{a}.attention.sliding_window"] == 16
        assert f[f"{a}.rope.scaling.original_context_length"] == 64
        # llama.cpp's Phi-3 converter: sqrt(1 + ln(ctx / orig) / ln(orig))
        want = np.sqrt(1 + np.log(f[f"{a}.context_length"] / 64) / np.log(64))
        assert abs(f[f"{a}.rope.scaling.attn_factor"] - want) < 1e-6
    for k in ("context_length", "feed_forward_length", "rope.freq_base",
              "attention.layer_norm_rms_epsilon"):
        assert f"{a}.{k}" in f
    assert f["tokenizer.ggml.model"] == "llama"
    toks = f["tokenizer.ggml.tokens"]
    assert len(toks) == v == len(set(toks)) == len(f["tokenizer.ggml.scores"])
    assert toks[:3] == ["<unk>", "<s>", "</s>"] and toks[3 + 10] == "<0x0A>"
    tt = f["tokenizer.ggml.token_type"]
    assert list(tt[:3]) == [2, 3, 3] and set(tt[3:259]) == {6} and set(tt[259:]) == {1}


def test_values_match_documented_rng_and_scaling(tmp_path):
    path = gen(tmp_path, "qwen3moe", "tiny", "--seed", "7", "--router-scale", "3")
    ts = tensors(gguf.GGUFReader(str(path)))
    e = 64
    cases = [("token_embd.weight", 5, 0.0, 1.0), ("blk.1.attn_q.weight", 3, 0.0, e ** -0.5),
             ("blk.2.attn_output.weight", 0, 0.0, 128 ** -0.5),
             ("blk.0.ffn_down_exps.weight", 64 * 5 + 9, 0.0, 64 ** -0.5),
             ("blk.3.ffn_gate_inp.weight", 6, 0.0, 3 * e ** -0.5),
             ("blk.0.attn_k_norm.weight", 0, 1.0, 0.1), ("output_norm.weight", 0, 1.0, 0.1)]
    for name, row, mean, std in cases:
        data = np.asarray(ts[name].data, dtype=np.float32).reshape(-1, int(ts[name].shape[0]))
        want = expected_row(name, 7, row, data.shape[1], mean, std)
        np.testing.assert_allclose(data[row], want, rtol=1e-5, atol=1e-6, err_msg=name)
    # Whole-tensor statistics: N(0, 1/fan_in) keeps activations O(1).
    w = np.asarray(ts["blk.0.ffn_gate_exps.weight"].data, dtype=np.float64)
    assert abs(w.std() * np.sqrt(e) - 1) < 0.02 and abs(w.mean()) < 0.01


def test_seed_changes_values_and_layers_are_a_prefix(tmp_path):
    a = tensors(gguf.GGUFReader(str(gen(tmp_path, "olmoe", "tiny", "--seed", "1", name="a.gguf"))))
    b = tensors(gguf.GGUFReader(str(gen(tmp_path, "olmoe", "tiny", "--seed", "2", name="b.gguf"))))
    c = tensors(gguf.GGUFReader(str(gen(tmp_path, "olmoe", "tiny", "--seed", "1", "--layers", "2",
                                        name="c.gguf"))))
    n = "blk.1.attn_v.weight"
    assert not np.array_equal(a[n].data, b[n].data)
    assert np.array_equal(a[n].data, c[n].data)
    assert "blk.2.attn_v.weight" not in c


# (type, bound on ||dequant - f32|| / ||f32||): loose multiples of each format's known error.
QUANT_BOUNDS = [("F16", 1e-3), ("BF16", 8e-3), ("Q8_0", 0.01), ("Q6_K", 0.03), ("Q5_K", 0.05),
                ("Q5_0", 0.06), ("Q4_K", 0.1), ("Q4_0", 0.12), ("Q3_K", 0.2), ("Q2_K", 0.4)]


@pytest.fixture(scope="module")
def small_f32(tmp_path_factory):
    d = tmp_path_factory.mktemp("f32")
    return tensors(gguf.GGUFReader(str(gen(d, "mixtral", "small", "--layers", "1"))))


@pytest.mark.parametrize("qtype,bound", QUANT_BOUNDS)
def test_quantized_types_decode_close_to_f32(tmp_path, small_f32, qtype, bound):
    path = gen(tmp_path, "mixtral", "small", "--layers", "1", "--type", qtype)
    q = tensors(gguf.GGUFReader(str(path)))
    for name in ("blk.0.attn_q.weight", "blk.0.ffn_down_exps.weight", "token_embd.weight"):
        t = q[name]
        assert t.tensor_type.name == qtype, name
        deq = gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1)
        ref = np.asarray(small_f32[name].data, dtype=np.float32).reshape(-1)
        err = np.linalg.norm(deq - ref) / np.linalg.norm(ref)
        assert err < bound, f"{qtype} {name}: relative error {err:.4f} >= {bound}"
        assert err > 0 or qtype == "F32"
    # Norms and the router stay F32 whatever the weight type.
    assert q["blk.0.ffn_gate_inp.weight"].tensor_type.name == "F32"
    assert q["blk.0.attn_norm.weight"].tensor_type.name == "F32"


def test_k_quant_falls_back_on_short_rows_like_llamacpp(tmp_path):
    # tiny rows are 64 long: no 256-element K blocks fit, llama.cpp picks Q5_0 for Q4_K.
    ts = tensors(gguf.GGUFReader(str(gen(tmp_path, "mixtral", "tiny", "--type", "Q4_K"))))
    assert ts["blk.0.attn_q.weight"].tensor_type.name == "Q5_0"


def test_expert_type_applies_to_experts_only(tmp_path):
    ts = tensors(gguf.GGUFReader(str(gen(tmp_path, "qwen2moe", "small", "--layers", "1",
                                         "--type", "Q8_0", "--expert-type", "Q4_K"))))
    assert ts["blk.0.ffn_up_exps.weight"].tensor_type.name == "Q4_K"
    assert ts["blk.0.ffn_up_shexp.weight"].tensor_type.name == "Q8_0"
    assert ts["blk.0.attn_q.bias"].tensor_type.name == "F32"


@pytest.mark.parametrize("args,needle", [
    (["--arch", "gpt5"], "--arch"),
    (["--arch", "mixtral", "--preset", "huge"], "preset"),
    (["--arch", "mixtral", "--type", "Q9_9"], "--type"),
    (["--arch", "mixtral", "--vocab", "100"], "--vocab"),
    (["--arch", "mixtral", "--expert-used", "9"], "--expert-used"),
    (["--arch", "mixtral", "--router-scale", "-1"], "--router-scale"),
])
def test_bad_settings_fail_with_named_setting(tmp_path, args, needle):
    out = tmp_path / "bad.gguf"
    r = subprocess.run([BIN, "gen-model", "-o", str(out), "-q", *args], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0
    assert needle in r.stderr, r.stderr
    assert not out.exists()


# Published total parameter counts of the released models (model cards / config arithmetic).
# phimoe: + 128 for the two LongRoPE factor tensors (64 floats each), which the model keeps in
# its config rather than among its parameters.
RELEASED = [("mixtral", "8x7b", 46_702_792_704), ("qwen2moe", "a2.7b", 14_315_784_192),
            ("qwen3moe", "30b-a3b", 30_532_122_624), ("olmoe", "1b-7b", 6_919_161_856),
            ("gpt-oss", "20b", 20_914_757_184), ("gpt-oss", "120b", 116_829_156_672),
            ("phimoe", "3.5-moe", 41_873_153_344 + 128)]


@pytest.mark.parametrize("arch,preset,params", RELEASED)
def test_released_presets_have_the_published_parameter_counts(arch, preset, params):
    import json
    r = subprocess.run([BIN, "gen-model", "--arch", arch, "--preset", preset, "-o", "/dev/null",
                        "--dry-run", "--type", "Q4_K"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["n_params"] == params


# --- deepseek2 / glm4moe: layout written from llama.cpp's tensor tables (llama-model loaders) ---
def expected_deepseek2(n_layer, e=64, h=4, q_lora=0, kvr=32, nope=16, rope=8, dv=16, ff=128,
                       ff_exp=32, ne=8, shared=2, lead=1, v=512, bias=False):
    t = {"token_embd.weight": [e, v], "output_norm.weight": [e], "output.weight": [e, v]}
    for l in range(n_layer):
        b = f"blk.{l}."
        t.update({b + "attn_norm.weight": [e], b + "attn_kv_a_mqa.weight": [e, kvr + rope],
                  b + "attn_kv_a_norm.weight": [kvr], b + "attn_k_b.weight": [nope, kvr, h],
                  b + "attn_v_b.weight": [kvr, dv, h], b + "attn_output.weight": [h * dv, e],
                  b + "ffn_norm.weight": [e]})
        if q_lora:
            t.update({b + "attn_q_a.weight": [e, q_lora], b + "attn_q_a_norm.weight": [q_lora],
                      b + "attn_q_b.weight": [q_lora, h * (nope + rope)]})
        else:
            t[b + "attn_q.weight"] = [e, h * (nope + rope)]
        if l < lead:
            t.update({b + "ffn_gate.weight": [e, ff], b + "ffn_up.weight": [e, ff],
                      b + "ffn_down.weight": [ff, e]})
            continue
        t.update({b + "ffn_gate_inp.weight": [e, ne], b + "ffn_gate_exps.weight": [e, ff_exp, ne],
                  b + "ffn_up_exps.weight": [e, ff_exp, ne], b + "ffn_down_exps.weight": [ff_exp, e, ne],
                  b + "ffn_gate_shexp.weight": [e, ff_exp * shared],
                  b + "ffn_up_shexp.weight": [e, ff_exp * shared],
                  b + "ffn_down_shexp.weight": [ff_exp * shared, e]})
        if bias:
            t[b + "exp_probs_b.bias"] = [ne]
    return t


def expected_glm4moe(n_layer, nextn=1, e=64, h=4, kv=2, hd=32, ff=128, ff_exp=32, ne=8, lead=1, v=512):
    t = {"token_embd.weight": [e, v], "output_norm.weight": [e], "output.weight": [e, v]}
    for l in range(n_layer + nextn):
        b = f"blk.{l}."
        t.update({b + "attn_norm.weight": [e], b + "attn_q.weight": [e, h * hd],
                  b + "attn_k.weight": [e, kv * hd], b + "attn_v.weight": [e, kv * hd],
                  b + "attn_q.bias": [h * hd], b + "attn_k.bias": [kv * hd], b + "attn_v.bias": [kv * hd],
                  b + "attn_q_norm.weight": [hd], b + "attn_k_norm.weight": [hd],
                  b + "attn_output.weight": [h * hd, e], b + "post_attention_norm.weight": [e]})
        if l < lead:
            t.update({b + "ffn_gate.weight": [e, ff], b + "ffn_up.weight": [e, ff],
                      b + "ffn_down.weight": [ff, e]})
        else:
            t.update({b + "ffn_gate_inp.weight": [e, ne], b + "exp_probs_b.bias": [ne],
                      b + "ffn_gate_exps.weight": [e, ff_exp, ne], b + "ffn_up_exps.weight": [e, ff_exp, ne],
                      b + "ffn_down_exps.weight": [ff_exp, e, ne], b + "ffn_gate_shexp.weight": [e, ff_exp],
                      b + "ffn_up_shexp.weight": [e, ff_exp], b + "ffn_down_shexp.weight": [ff_exp, e]})
        if l >= n_layer:
            t.update({b + "nextn.eh_proj.weight": [2 * e, e], b + "nextn.enorm.weight": [e],
                      b + "nextn.hnorm.weight": [e], b + "nextn.shared_head_norm.weight": [e]})
    return t


def test_deepseek2_layout_and_metadata(tmp_path):
    for preset, kw in (("tiny", {}), ("tiny-v3", dict(q_lora=24, shared=1, bias=True))):
        r = gguf.GGUFReader(str(gen(tmp_path, "deepseek2", preset, "--layers", "3")))
        got = {n: [int(x) for x in t.shape] for n, t in tensors(r).items()}
        assert got == expected_deepseek2(3, **kw), preset
        f = fields(r)
        a = "deepseek2."
        assert f["general.architecture"] == "deepseek2"
        # MLA as llama.cpp's converter writes it: one kv head of latent + rotary key.
        assert f[a + "attention.head_count_kv"] == 1
        assert f[a + "attention.key_length"] == 32 + 8 and f[a + "attention.value_length"] == 32
        assert f[a + "attention.key_length_mla"] == 24 and f[a + "attention.value_length_mla"] == 16
        assert f[a + "attention.kv_lora_rank"] == 32 and f[a + "rope.dimension_count"] == 8
        assert f[a + "attention.q_lora_rank"] == kw.get("q_lora", 0)
        assert f[a + "leading_dense_block_count"] == 1
        assert f[a + "expert_shared_count"] == kw.get("shared", 2)
        assert f[a + "expert_gating_func"] == (2 if preset == "tiny-v3" else 1)
        assert f[a + "expert_group_count"] == (4 if preset == "tiny-v3" else 1)
        assert f[a + "rope.scaling.type"] == "yarn" and f[a + "rope.scaling.factor"] == 4.0
        assert f[a + "rope.scaling.original_context_length"] == 64
        assert abs(f[a + "rope.scaling.yarn_log_multiplier"] - 0.1 * (1.0 if preset == "tiny-v3" else 0.707)) < 1e-6
        assert (a + "expert_weights_norm" in f) == (preset == "tiny-v3")


def test_glm4moe_layout_and_metadata(tmp_path):
    r = gguf.GGUFReader(str(gen(tmp_path, "glm4moe", "tiny", "--layers", "3")))
    got = {n: [int(x) for x in t.shape] for n, t in tensors(r).items()}
    assert got == expected_glm4moe(3)
    f = fields(r)
    a = "glm4moe."
    assert f[a + "block_count"] == 4 and f[a + "nextn_predict_layers"] == 1
    assert f[a + "rope.dimension_count"] == 16 and f[a + "attention.key_length"] == 32
    assert f[a + "expert_gating_func"] == 2 and f[a + "expert_weights_norm"] is True
    assert f[a + "expert_shared_count"] == 1 and f[a + "leading_dense_block_count"] == 1


def expected_minimax_m2(n_layer, e=64, h=4, kv=2, hd=32, ff=64, ne=8, v=512):
    """llama.cpp's minimax-m2 loader: q/k norms over the whole projections, every layer MoE with
    the selection bias, no shared expert."""
    t = {"token_embd.weight": [e, v], "output_norm.weight": [e], "output.weight": [e, v]}
    for l in range(n_layer):
        b = f"blk.{l}."
        t.update({b + "attn_norm.weight": [e], b + "attn_q.weight": [e, h * hd],
                  b + "attn_k.weight": [e, kv * hd], b + "attn_v.weight": [e, kv * hd],
                  b + "attn_q_norm.weight": [h * hd], b + "attn_k_norm.weight": [kv * hd],
                  b + "attn_output.weight": [h * hd, e], b + "ffn_norm.weight": [e],
                  b + "ffn_gate_inp.weight": [e, ne], b + "exp_probs_b.bias": [ne],
                  b + "ffn_gate_exps.weight": [e, ff, ne], b + "ffn_up_exps.weight": [e, ff, ne],
                  b + "ffn_down_exps.weight": [ff, e, ne]})
    return t


def test_minimax_m2_layout_and_metadata(tmp_path):
    r = gguf.GGUFReader(str(gen(tmp_path, "minimax-m2", "tiny", "--layers", "3")))
    got = {n: [int(x) for x in t.shape] for n, t in tensors(r).items()}
    assert got == expected_minimax_m2(3)
    f = fields(r)
    a = "minimax-m2."
    assert f["general.architecture"] == "minimax-m2" and f[a + "block_count"] == 3
    assert f[a + "rope.dimension_count"] == 16 and f[a + "attention.key_length"] == 32
    assert f[a + "attention.head_count"] == 4 and f[a + "attention.head_count_kv"] == 2
    assert f[a + "expert_feed_forward_length"] == 64 == f[a + "feed_forward_length"]
    assert f[a + "expert_gating_func"] == 2
    # As llama.cpp's converter: no routing key beyond the gating function.
    for k in ("expert_weights_norm", "expert_weights_scale", "expert_shared_count",
              "expert_group_count", "leading_dense_block_count"):
        assert a + k not in f, k


def _hf_params(arch, preset):
    """Parameters of the released model's transformers config (meta device, no memory), plus what
    the GGUF holds beyond it: the selection-bias buffers of sigmoid routing and, for GLM, the MTP
    block (a MoE layer + eh_proj + its three norms)."""
    from oracle_import import require_module
    torch = require_module("torch", "meta-device configs of the released models")
    T = require_module("transformers", "the released models' configs")
    yarn = lambda f, m, theta=1e4: {"rope_type": "yarn", "rope_theta": theta, "factor": f,
                                    "original_max_position_embeddings": 4096, "mscale": m,
                                    "mscale_all_dim": m, "beta_fast": 32, "beta_slow": 1}
    mla = dict(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    cfg, cls = {
        "v2-lite": (lambda: T.DeepseekV2Config(vocab_size=102400, hidden_size=2048, num_hidden_layers=27,
            num_attention_heads=16, num_key_value_heads=16, intermediate_size=10944,
            moe_intermediate_size=1408, n_routed_experts=64, n_shared_experts=2, num_experts_per_tok=6,
            first_k_dense_replace=1, q_lora_rank=None, max_position_embeddings=163840,
            rope_parameters=yarn(40, 0.707), **mla), T.DeepseekV2ForCausalLM),
        "v2": (lambda: T.DeepseekV2Config(vocab_size=102400, hidden_size=5120, num_hidden_layers=60,
            num_attention_heads=128, num_key_value_heads=128, intermediate_size=12288,
            moe_intermediate_size=1536, n_routed_experts=160, n_shared_experts=2, num_experts_per_tok=6,
            first_k_dense_replace=1, q_lora_rank=1536, max_position_embeddings=163840,
            rope_parameters=yarn(40, 0.707), **mla), T.DeepseekV2ForCausalLM),
        "v3": (lambda: T.DeepseekV3Config(vocab_size=129280, hidden_size=7168, num_hidden_layers=61,
            num_attention_heads=128, num_key_value_heads=128, intermediate_size=18432,
            moe_intermediate_size=2048, n_routed_experts=256, n_shared_experts=1, num_experts_per_tok=8,
            first_k_dense_replace=3, q_lora_rank=1536, max_position_embeddings=163840,
            rope_parameters=yarn(40, 1.0), **mla), T.DeepseekV3ForCausalLM),
        "kimi-k2": (lambda: T.DeepseekV3Config(vocab_size=163840, hidden_size=7168, num_hidden_layers=61,
            num_attention_heads=64, num_key_value_heads=64, intermediate_size=18432,
            moe_intermediate_size=2048, n_routed_experts=384, n_shared_experts=1, num_experts_per_tok=8,
            first_k_dense_replace=1, n_group=1, topk_group=1, q_lora_rank=1536,
            max_position_embeddings=131072, rope_parameters=yarn(32, 1.0, 5e4), **mla),
            T.DeepseekV3ForCausalLM),
        "4.5-air": (lambda: T.Glm4MoeConfig(vocab_size=151552, hidden_size=4096, num_hidden_layers=46,
            num_attention_heads=96, num_key_value_heads=8, head_dim=128, intermediate_size=10944,
            moe_intermediate_size=1408, n_routed_experts=128, n_shared_experts=1, num_experts_per_tok=8,
            first_k_dense_replace=1, attention_bias=True, use_qk_norm=False), T.Glm4MoeForCausalLM),
        "4.5": (lambda: T.Glm4MoeConfig(vocab_size=151552, hidden_size=5120, num_hidden_layers=92,
            num_attention_heads=96, num_key_value_heads=8, head_dim=128, intermediate_size=12288,
            moe_intermediate_size=1536, n_routed_experts=160, n_shared_experts=1, num_experts_per_tok=8,
            first_k_dense_replace=3, attention_bias=True, use_qk_norm=True), T.Glm4MoeForCausalLM),
        "m2": (lambda: T.MiniMaxM2Config(vocab_size=200064, hidden_size=3072, num_hidden_layers=62,
            num_attention_heads=48, num_key_value_heads=8, head_dim=128, rotary_dim=64,
            intermediate_size=1536, num_local_experts=256, num_experts_per_tok=8),
            T.MiniMaxM2ForCausalLM),
    }[preset]
    cfg = cfg()
    with torch.device("meta"):
        m = cls(cfg)
    n = sum(p.numel() for p in m.parameters())
    n += sum(b.numel() for name, b in m.named_buffers() if name.endswith("e_score_correction_bias"))
    if arch == "glm4moe":
        last = m.model.layers[-1]
        e = cfg.hidden_size
        n += sum(p.numel() for p in last.parameters()) + cfg.n_routed_experts + 2 * e * e + 3 * e
    return n


# Approximate published totals (model cards), as a sanity check of the transformers arithmetic.
RELEASED_NEW = [("deepseek2", "v2-lite", 15.7e9), ("deepseek2", "v2", 236e9), ("deepseek2", "v3", 671e9),
                ("deepseek2", "kimi-k2", 1.03e12), ("glm4moe", "4.5-air", 110e9), ("glm4moe", "4.5", 358e9),
                ("minimax-m2", "m2", 230e9)]


@pytest.mark.parametrize("arch,preset,published", RELEASED_NEW)
def test_deepseek_glm_presets_match_the_released_configs(arch, preset, published):
    import json
    r = subprocess.run([BIN, "gen-model", "--arch", arch, "--preset", preset, "-o", "/dev/null",
                        "--dry-run", "--type", "Q4_K"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    n = json.loads(r.stdout)["n_params"]
    assert n == _hf_params(arch, preset)
    assert abs(n / published - 1) < 0.01, f"{preset}: {n} vs published ~{published:.3g}"


def test_repeat_experts_copies_the_first_moe_layers_experts_only(tmp_path):
    """--repeat-experts: every MoE layer's routed experts are the first MoE layer's bytes (the
    full-size benchmark models); routers and attention stay per layer, and without the flag
    the layers' experts differ."""
    rep = tensors(gguf.GGUFReader(str(gen(tmp_path, "qwen3moe", "tiny", "--type", "Q4_K",
                                          "--repeat-experts", name="rep.gguf"))))
    own = tensors(gguf.GGUFReader(str(gen(tmp_path, "qwen3moe", "tiny", "--type", "Q4_K",
                                          name="own.gguf"))))
    layers = sorted({int(n.split(".")[1]) for n in rep if n.startswith("blk.")})
    assert len(layers) >= 2
    for proj in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
        first = rep[f"blk.{layers[0]}.{proj}.weight"].data
        for layer in layers[1:]:
            assert np.array_equal(rep[f"blk.{layer}.{proj}.weight"].data, first), (proj, layer)
            assert not np.array_equal(own[f"blk.{layer}.{proj}.weight"].data,
                                      own[f"blk.{layers[0]}.{proj}.weight"].data), (proj, layer)
        # The first layer is the generator's own stream, as without the flag.
        assert np.array_equal(first, own[f"blk.{layers[0]}.{proj}.weight"].data)
    for layer in layers[1:]:
        assert not np.array_equal(rep[f"blk.{layer}.ffn_gate_inp.weight"].data,
                                  rep[f"blk.{layers[0]}.ffn_gate_inp.weight"].data)


# --- qwen3next / qwen35moe: layout written from llama.cpp's tensor tables (llama-model loaders) ---
def expected_qwen_hybrid(arch, n_layer, e=64, h=4, kv=2, hd=32, ff_exp=32, sh=64, ne=8, v=512,
                         nk=2, nv=4, hs=16, conv=4):
    t = {"token_embd.weight": [e, v], "output_norm.weight": [e], "output.weight": [e, v]}
    for l in range(n_layer):
        b = f"blk.{l}."
        t.update({b + "attn_norm.weight": [e], b + "post_attention_norm.weight": [e],
                  b + "ffn_gate_inp.weight": [e, ne], b + "ffn_gate_exps.weight": [e, ff_exp, ne],
                  b + "ffn_up_exps.weight": [e, ff_exp, ne], b + "ffn_down_exps.weight": [ff_exp, e, ne],
                  b + "ffn_gate_inp_shexp.weight": [e], b + "ffn_gate_shexp.weight": [e, sh],
                  b + "ffn_up_shexp.weight": [e, sh], b + "ffn_down_shexp.weight": [sh, e]})
        if (l + 1) % 4:  # gated DeltaNet
            c = 2 * nk * hs + nv * hs
            t.update({b + "attn_qkv.weight": [e, c], b + "attn_gate.weight": [e, nv * hs],
                      b + "ssm_conv1d.weight": [conv, c], b + "ssm_dt.bias": [nv], b + "ssm_a": [nv],
                      b + "ssm_norm.weight": [hs], b + "ssm_out.weight": [nv * hs, e]})
            if arch == "qwen3next":
                t[b + "ssm_ba.weight"] = [e, 2 * nv]
            else:
                t.update({b + "ssm_beta.weight": [e, nv], b + "ssm_alpha.weight": [e, nv]})
        else:  # full attention, q of [q | gate] per head
            t.update({b + "attn_q.weight": [e, 2 * h * hd], b + "attn_k.weight": [e, kv * hd],
                      b + "attn_v.weight": [e, kv * hd], b + "attn_q_norm.weight": [hd],
                      b + "attn_k_norm.weight": [hd], b + "attn_output.weight": [h * hd, e]})
    return t


@pytest.mark.parametrize("arch", ["qwen3next", "qwen35moe"])
def test_qwen_hybrid_layout_and_metadata(tmp_path, arch):
    r = gguf.GGUFReader(str(gen(tmp_path, arch, "tiny", "--layers", "5")))
    tt = tensors(r)
    got = {n: [int(x) for x in t.shape] for n, t in tt.items()}
    assert got == expected_qwen_hybrid(arch, 5)
    f = fields(r)
    a = arch + "."
    assert f[a + "block_count"] == 5 and f[a + "full_attention_interval"] == 4
    assert f[a + "ssm.conv_kernel"] == 4 and f[a + "ssm.state_size"] == 16
    assert f[a + "ssm.group_count"] == 2 and f[a + "ssm.time_step_rank"] == 4
    assert f[a + "ssm.inner_size"] == 64
    assert f[a + "rope.dimension_count"] == 8 and f[a + "attention.key_length"] == 32
    assert f[a + "expert_shared_feed_forward_length"] == 64
    assert (a + "feed_forward_length" in f) == (arch == "qwen3next")
    if arch == "qwen35moe":
        assert list(f[a + "rope.dimension_sections"]) == [1, 1, 2, 0]
    # The decay rates are negative (ssm_a = -exp(A_log)) and the kernel stays F32.
    assert (np.asarray(tt["blk.0.ssm_a"].data) < 0).all()
    assert tt["blk.0.ssm_conv1d.weight"].tensor_type == gguf.GGMLQuantizationType.F32


def _hf_hybrid_params(preset):
    """Parameters of the released Qwen3-Next-80B-A3B / Qwen3.6-35B-A3B text models as transformers
    builds them from their config.json values (meta device: no memory)."""
    from oracle_import import require_module
    torch = require_module("torch", "meta-device configs of the released models")
    T = require_module("transformers", "the released models' configs")
    common = dict(hidden_size=2048, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
                  moe_intermediate_size=512, shared_expert_intermediate_size=512,
                  linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
                  linear_num_key_heads=16, linear_num_value_heads=32, tie_word_embeddings=False)
    if preset == "80b-a3b":
        cfg = T.Qwen3NextConfig(vocab_size=151936, num_hidden_layers=48, intermediate_size=5632,
                                num_experts=512, num_experts_per_tok=10, **common)
        cls = T.Qwen3NextForCausalLM
    else:
        cfg = T.Qwen3_5MoeTextConfig(vocab_size=248320, num_hidden_layers=40, num_experts=256,
                                     num_experts_per_tok=8, **common)
        cls = T.Qwen3_5MoeForCausalLM
    with torch.device("meta"):
        m = cls(cfg)
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("arch,preset,published", [("qwen3next", "80b-a3b", 80e9),
                                                   ("qwen35moe", "35b-a3b", 35e9)])
def test_qwen_hybrid_presets_match_the_released_configs(arch, preset, published):
    import json
    r = subprocess.run([BIN, "gen-model", "--arch", arch, "--preset", preset, "-o", "/dev/null",
                        "--dry-run", "--type", "Q4_K"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    n = json.loads(r.stdout)["n_params"]
    assert n == _hf_hybrid_params(preset)
    assert abs(n / published - 1) < 0.03, f"{preset}: {n} vs published ~{published:.3g}"


# --- gemma4: layout written from llama.cpp's tensor tables (src/models/gemma4.cpp) -------------
def expected_gemma4(n_layer, e=64, h=8, kv=4, kvg=1, hd=16, hdg=32, ff=128, ff_exp=32, ne=8, v=512):
    t = {"token_embd.weight": [e, v], "output_norm.weight": [e], "rope_freqs.weight": [hdg // 2]}
    for l in range(n_layer):
        b = f"blk.{l}."
        glob = (l + 1) % 2 == 0 or l == n_layer - 1
        d, k = (hdg, kvg) if glob else (hd, kv)
        t.update({b + "attn_norm.weight": [e], b + "attn_q.weight": [e, h * d],
                  b + "attn_k.weight": [e, k * d], b + "attn_output.weight": [h * d, e],
                  b + "attn_q_norm.weight": [d], b + "attn_k_norm.weight": [d],
                  b + "post_attention_norm.weight": [e], b + "ffn_norm.weight": [e],
                  b + "ffn_gate.weight": [e, ff], b + "ffn_up.weight": [e, ff],
                  b + "ffn_down.weight": [ff, e], b + "post_ffw_norm_1.weight": [e],
                  b + "pre_ffw_norm_2.weight": [e], b + "post_ffw_norm_2.weight": [e],
                  b + "post_ffw_norm.weight": [e], b + "ffn_gate_inp.weight": [e, ne],
                  b + "ffn_gate_inp.scale": [e], b + "ffn_gate_up_exps.weight": [e, 2 * ff_exp, ne],
                  b + "ffn_down_exps.weight": [ff_exp, e, ne], b + "ffn_down_exps.scale": [ne],
                  b + "layer_output_scale.weight": [1]})
        if not glob:  # the global layers' values are their keys (attention_k_eq_v)
            t[b + "attn_v.weight"] = [e, k * d]
    return t


def test_gemma4_layout_and_metadata(tmp_path):
    r = gguf.GGUFReader(str(gen(tmp_path, "gemma4", "tiny")))
    got = {n: [int(x) for x in t.shape] for n, t in tensors(r).items()}
    assert got == expected_gemma4(4)
    f = fields(r)
    a = "gemma4."
    assert f["general.architecture"] == "gemma4"
    assert list(f[a + "attention.head_count_kv"]) == [4, 1, 4, 1]
    assert list(f[a + "attention.sliding_window_pattern"]) == [True, False, True, False]
    assert f[a + "attention.key_length"] == 32 == f[a + "attention.value_length"]
    assert f[a + "attention.key_length_swa"] == 16 == f[a + "attention.value_length_swa"]
    assert f[a + "rope.dimension_count"] == 32 and f[a + "rope.dimension_count_swa"] == 16
    assert f[a + "rope.freq_base"] == 1e6 and f[a + "rope.freq_base_swa"] == 1e4
    assert f[a + "attention.sliding_window"] == 8 and f[a + "final_logit_softcapping"] == 30.0
    assert f[a + "attention.shared_kv_layers"] == 0
    assert f[a + "embedding_length_per_layer_input"] == 0
    assert f[a + "feed_forward_length"] == 128 and f[a + "expert_feed_forward_length"] == 32
    # Proportional RoPE: a quarter of the global head (4 of 16 pairs) rotates.
    freqs = tensors(r)["rope_freqs.weight"].data
    assert list(freqs) == [1.0] * 4 + [np.float32(1e30)] * 12


def test_gemma4_26b_a4b_preset_matches_the_released_config():
    """The 26B-A4B's text config (google/gemma-4-26B-A4B; llama.cpp's loader reads the same
    shapes): transformers' parameters on the meta device, plus what the GGUF holds beyond them:
    the 30 layer scalars (buffers in transformers) and the global layers' rope_freqs table."""
    import json
    torch = require_module("torch", "meta-device configs of the released models")
    T = require_module("transformers", "the released models' configs")
    cfg = T.Gemma4TextConfig(
        vocab_size=262144, hidden_size=2816, num_hidden_layers=30, intermediate_size=2112,
        num_attention_heads=16, num_key_value_heads=8, head_dim=256, global_head_dim=512,
        num_global_key_value_heads=2, attention_k_eq_v=True, sliding_window=1024,
        final_logit_softcapping=30.0, hidden_size_per_layer_input=0, num_kv_shared_layers=0,
        enable_moe_block=True, num_experts=128, top_k_experts=8, moe_intermediate_size=704,
        max_position_embeddings=131072, tie_word_embeddings=True)
    with torch.device("meta"):
        m = T.Gemma4ForCausalLM(cfg)
    want = sum(p.numel() for p in m.parameters()) + 30 + 512 // 2
    r = subprocess.run([BIN, "gen-model", "--arch", "gemma4", "--preset", "26b-a4b", "-o",
                        "/dev/null", "--dry-run", "--type", "Q4_K"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)["n_params"]
    assert got == want
    # The model card's total: 25.2B (the text model; the vision tower adds ~0.55B).
    assert abs(got / 25.2e9 - 1) < 0.01, got
