#!/usr/bin/env python3
"""Regenerates the committed seed corpora of the fuzz targets (tests/fuzz/corpus/<name>/).

    python3 tests/fuzz/make_corpus.py [--shared ../shared/data]

  gguf/           small GGUF files written here byte by byte (independently of moeflow's
                  writer): v2 and v3, every metadata value type, nested arrays, alignment,
                  quantized tensor types, MoE layers (separate and fused gate/up, "low" copies),
                  SentencePiece and BPE vocabularies.
  tokenizer/      <vocab index><flags><text>: the llama.cpp test-vector inputs of
                  ../shared/data/tokenizers/llamacpp_vocab/*.inp spread over every tokenizer of
                  fuzz_tokenizer.cpp, plus some id lists to decode.
  chat_template/  <template>\\0<context>: the published templates of the supported model
                  families (from tests/chat_template/templates/ and the vocabularies'
                  tokenizer.chat_template) with conversations, tools and tool calls, and small
                  templates for each Jinja feature the renderer supports.
Existing seeds of a folder are replaced; crash reproducers live in the GoogleTest suites.
"""
from __future__ import annotations

import argparse
import json
import shutil
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# ---------------------------------------------------------------------------------------------
# GGUF, byte by byte

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
          BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
F32T, F16T, Q4_0, Q8_0, Q4_K = 0, 1, 2, 8, 12
TYPE_SIZE = {F32T: (1, 4), F16T: (1, 2), Q4_0: (32, 18), Q8_0: (32, 34), Q4_K: (256, 144)}


def gstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gval(t: int, v) -> bytes:
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gval(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


def gguf(kvs: list[tuple[str, int, object]], tensors: list[tuple[str, int, list[int]]],
         version: int = 3, alignment: int = 32) -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        head += gstr(k) + struct.pack("<I", t) + gval(t, v)
    offs, off, sizes = [], 0, []
    for name, typ, dims in tensors:
        blk, ts = TYPE_SIZE[typ]
        n = ts * (dims[0] // blk)
        for d in dims[1:]:
            n *= d
        offs.append(off)
        sizes.append(n)
        off = (off + n + alignment - 1) // alignment * alignment
    for (name, typ, dims), o in zip(tensors, offs):
        head += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", typ, o)
    pad = (-len(head)) % alignment
    data = bytearray(off)
    for i, (o, n) in enumerate(zip(offs, sizes)):
        for k in range(n):
            data[o + k] = (i * 37 + k * 7) & 0xFF
    return head + b"\0" * pad + bytes(data)


def gguf_seeds() -> dict[str, bytes]:
    s: dict[str, bytes] = {}
    s["empty_v3.gguf"] = gguf([], [])
    s["empty_v2.gguf"] = gguf([], [], version=2)
    s["all_value_types.gguf"] = gguf([
        ("u8", U8, 7), ("i8", I8, -7), ("u16", U16, 65535), ("i16", I16, -300),
        ("u32", U32, 1 << 31), ("i32", I32, -1), ("f32", F32, 1.5), ("bool", BOOL, True),
        ("str", STR, "h\u00e9llo"), ("u64", U64, 1 << 40), ("i64", I64, -(1 << 40)),
        ("f64", F64, -2.25), ("arr.u8", ARR, (U8, [1, 2, 3])), ("arr.f32", ARR, (F32, [0.5, -1.0])),
        ("arr.str", ARR, (STR, ["a", "", "bc"])), ("arr.bool", ARR, (BOOL, [True, False])),
        ("arr.nested", ARR, (ARR, [(I32, [1, 2]), (I32, [])])),
        ("general.alignment", U32, 64),
    ], [("t", F32T, [4, 2])], alignment=64)
    arch = [("general.architecture", STR, "llama"), ("llama.block_count", U32, 3),
            ("llama.expert_count", U32, 2), ("llama.expert_used_count", U32, 1)]
    s["moe_separate.gguf"] = gguf(arch, [
        ("token_embd.weight", F32T, [8, 4]),
        ("blk.0.ffn_gate.weight", F16T, [8, 4]),
        ("blk.1.ffn_gate_inp.weight", F32T, [8, 2]),
        ("blk.1.ffn_gate_exps.weight", F32T, [8, 4, 2]),
        ("blk.1.ffn_up_exps.weight", F32T, [8, 4, 2]),
        ("blk.1.ffn_down_exps.weight", F32T, [4, 8, 2]),
        ("blk.2.ffn_gate_up_exps.weight", F16T, [8, 8, 2]),
        ("blk.2.ffn_down_exps.weight", F16T, [4, 8, 2]),
    ])
    s["moe_quant_low.gguf"] = gguf(arch[:2], [
        ("blk.1.ffn_gate_exps.weight", Q8_0, [32, 32, 1]),
        ("blk.1.ffn_up_exps.weight", Q8_0, [32, 32, 1]),
        ("blk.1.ffn_down_exps.weight", Q4_0, [32, 32, 1]),
        ("blk.1.ffn_gate_exps.low", Q4_0, [32, 32, 1]),
        ("blk.1.ffn_up_exps.low", Q4_0, [32, 32, 1]),
        ("blk.1.ffn_down_exps.low", Q4_0, [32, 32, 1]),
        ("output.weight", Q4_K, [256, 1]),
    ])
    spm_tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + \
                 ["\u2581", "\u2581a", "ab", "a", "b", "\u2581ab", "<|user|>"]
    spm_types = [2, 3, 3] + [6] * 256 + [1, 1, 1, 1, 1, 1, 4]
    s["vocab_spm.gguf"] = gguf([
        ("general.architecture", STR, "llama"),
        ("tokenizer.ggml.model", STR, "llama"),
        ("tokenizer.ggml.tokens", ARR, (STR, spm_tokens)),
        ("tokenizer.ggml.scores", ARR, (F32, [0.0] * 259 + [-1.0, -2.0, -3.0, -4.0, -5.0, -1.5, 0.0])),
        ("tokenizer.ggml.token_type", ARR, (I32, spm_types)),
        ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.eos_token_id", U32, 2),
        ("tokenizer.ggml.unknown_token_id", U32, 0), ("tokenizer.ggml.add_bos_token", BOOL, True),
        ("tokenizer.chat_template", STR, "{% for m in messages %}{{ m['content'] }}{% endfor %}"),
    ], [])
    byte_chars = [chr(c) for c in range(ord("!"), ord("~") + 1)] + ["\u0120", "\u010a"]
    s["vocab_bpe.gguf"] = gguf([
        ("tokenizer.ggml.model", STR, "gpt2"), ("tokenizer.ggml.pre", STR, "qwen2"),
        ("tokenizer.ggml.tokens", ARR, (STR, byte_chars + ["\u0120a", "ab", "<|im_end|>"])),
        ("tokenizer.ggml.token_type", ARR, (I32, [1] * (len(byte_chars) + 2) + [3])),
        ("tokenizer.ggml.merges", ARR, (STR, ["\u0120 a", "a b"])),
        ("tokenizer.ggml.eos_token_id", U32, len(byte_chars) + 2),
    ], [], version=2)
    return s


# ---------------------------------------------------------------------------------------------
# Tokenizer inputs

N_VOCABS = 12  # kVocabs in fuzz_tokenizer.cpp
ADD_BOS, PARSE_SPECIAL, IDS, SPECIAL_PIECES = 1, 2, 4, 8


def tokenizer_seeds(shared: Path) -> dict[str, bytes]:
    texts: list[str] = []
    for inp in sorted((shared / "tokenizers" / "llamacpp_vocab").glob("*.inp")):
        texts += inp.read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    texts = list(dict.fromkeys(t for t in texts if t))  # unique, in order
    texts += ["<|im_start|>user\nhi<|im_end|>", "<s>[INST] x [/INST]</s>", "<|user|>\nHi<|end|>",
              "\u2581\u2581 lead", "12345678901234567890", "tab\tand\r\nCRLF"]
    seeds = {}
    for i, t in enumerate(texts):
        v = i % N_VOCABS
        flags = [0, ADD_BOS | PARSE_SPECIAL, PARSE_SPECIAL | SPECIAL_PIECES, ADD_BOS][(i // N_VOCABS) % 4]
        seeds[f"text_{i:03d}_v{v}"] = bytes([v, flags]) + t.encode()
    seeds["text_invalid_utf8_v2"] = bytes([2, 0]) + b"ok \xff\xc3 \xe2\x82 end\x00\x01"
    seeds["text_invalid_utf8_v0"] = bytes([0, 1]) + b"\xf0\x9f\xa6 \xc0\xaf x"
    for v in range(N_VOCABS):
        ids = b"".join(struct.pack("<H", x) for x in (0, 1, 2, 3, 259, 300, 1000, 31999, 0xFFFF))
        seeds[f"ids_v{v}"] = bytes([v, IDS | (SPECIAL_PIECES if v % 2 else 0)]) + ids
    return seeds


# ---------------------------------------------------------------------------------------------
# Chat templates

def test_templates() -> dict[str, str]:
    """The published templates the tests render (tests/chat_template/templates/NAME.jinja)."""
    folder = ROOT / "tests" / "chat_template" / "templates"
    return {p.stem: p.read_bytes().decode("utf-8") for p in sorted(folder.glob("*.jinja"))}


def gguf_chat_template(path: Path) -> str | None:
    """tokenizer.chat_template of a GGUF, found by its key (keys are unique in these files)."""
    b = path.read_bytes()
    key = gstr("tokenizer.chat_template")
    i = b.find(key)
    if i < 0:
        return None
    i += len(key)
    (t,) = struct.unpack_from("<I", b, i)
    (n,) = struct.unpack_from("<Q", b, i + 4)
    return b[i + 12:i + 12 + n].decode("utf-8") if t == STR else None


CONVERSATIONS = {
    "chat": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9\U0001f999"},
             {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2+2?"}],
    "nosys": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
              {"role": "user", "content": "c"}],
    "think": [{"role": "user", "content": "q"},
              {"role": "assistant", "content": "<think>\nreason\n</think>\n\nanswer"},
              {"role": "user", "content": "more"}],
}
TOOLS_CONTEXT = {
    "messages": [{"role": "user", "content": "Weather in Paris?"},
                 {"role": "assistant", "content": "",
                  "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                  "arguments": {"city": "Paris", "unit": "C"}}}]},
                 {"role": "tool", "content": "{\"t\": 21}"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "add_generation_prompt": True, "enable_thinking": False, "bos_token": "<s>", "eos_token": "</s>",
}

# One small template per Jinja feature of src/chat_template/chat_template.h.
FEATURES = {
    "whitespace": "  {%- if true -%}  a  {%- endif %}\n{# comment #}{{- ' b ' -}}  {%+ if 1 %}c{% endif %}\n",
    "operators": "{{ 1 + 2 * 3 - 4 // 3 % 2 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 'a' ~ 1 ~ none }} {{ 'ab' * 3 }} "
                 "{{ [1] + [2] }} {{ 1 < 2 and not 3 >= 4 or false }} {{ 'b' in 'abc' }} {{ 3 not in [1] }}",
    "slices": "{{ 'hello'[1:3] }}{{ 'hello'[::-1] }}{{ [1,2,3,4][-2:] }}{{ messages[0]['content'][:5] }}",
    "loops": "{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}"
             "{{ loop.first }}{{ loop.last }}{% if loop.index0 > 1 %}{% break %}{% endif %}"
             "{% else %}empty{% endfor %}{% for k, v in {'a': 1}.items() %}{{ k }}={{ v }}{% endfor %}",
    "namespace": "{% set ns = namespace(n=0, s='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                 "{% endfor %}{{ ns.n }}{% set x %}block {{ ns.n }}{% endset %}{{ x | trim }}",
    "filters": "{{ messages | length }}{{ ' x ' | trim }}{{ messages | map(attribute='role') | join(',') }}"
               "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}{{ 'a' | upper }}"
               "{{ none | default('d') }}{{ [3,1] | first }}{{ 'abc' | reverse }}{{ -3 | abs }}"
               "{{ '42' | int + 1 }}{{ 2 | float }}{{ 'a\nb' | indent(2, true) }}{{ 'x y' | title }}"
               "{{ {'k': [1, 'two']} | tojson }}{{ messages[0] | tojson(indent=2) }}{{ 'aXb' | replace('X', '-') }}",
    "tests": "{{ x is defined }}{{ none is none }}{{ 'a' is string }}{{ 3 is odd }}{{ 4 is divisibleby 2 }}"
             "{{ [] is sequence }}{{ {} is mapping }}{{ 1 is number }}{{ true is boolean }}{{ 2 is gt 1 }}",
    "methods": "{{ ' a b '.strip() }}{{ 'a,b'.split(',') }}{{ 'abc'.startswith('a') }}{{ 'x'.endswith('y') }}"
               "{{ '{} and {}'.format(1, 2) }}{{ ','.join(['a', 'b']) }}{{ {'a': 1}.get('b', 2) }}"
               "{{ {'a': 1}.keys() | list }}{{ 'Ab'.lower() }}{{ 'hi'.capitalize() }}",
    "errors": "{% if messages | length > 1 %}{{ raise_exception('too many: ' ~ messages | length) }}{% endif %}",
    "range_time": "{% for i in range(3) %}{{ i }}{% endfor %}{{ range(1, 10, 3) | list }}{{ strftime_now('%Y') | length }}",
    "dictsort": "{% for k, v in {'b': 1, 'A': 2, 'a': [3]} | dictsort %}{{ k }}={{ v }};{% endfor %}"
                "{% for k, v in {'b': 1, 'A': 2} | dictsort(true, reverse=true) %}{{ k }}{% endfor %}",
    "generation": "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% continue %}{% endfor %}",
    "macros": "{%- macro t(s, d=0) -%}{%- if s is mapping and s.type == 'array' -%}list[{{ t(s['items'], d + 1) }}]"
              "{%- else -%}{{ s.type if s is mapping else s }}{%- endif -%}{%- endmacro -%}"
              "{% for m in messages %}{{ t(m.content) }}|{{ t({'type': 'array', 'items': {'type': m.role}}) }}"
              "{{ t(d=1, s=m) | length }}{% endfor %}",
}


def chat_seeds(shared: Path) -> dict[str, bytes]:
    templates = test_templates()
    for p in sorted((shared / "tokenizers" / "llamacpp_vocab").glob("*.gguf")):
        t = gguf_chat_template(p)
        if t:
            templates["gguf_" + p.name[len("ggml-vocab-"):-len(".gguf")]] = t
    seeds: dict[str, bytes] = {}
    for name, t in templates.items():
        for conv, msgs in CONVERSATIONS.items():
            seeds[f"{name}_{conv}"] = t.encode() + b"\0" + json.dumps(msgs).encode()
        seeds[f"{name}_tools"] = t.encode() + b"\0" + json.dumps(TOOLS_CONTEXT).encode()
        seeds[f"{name}_bytes"] = t.encode() + b"\0user\x01hi \xff\x01assistant\x01yo\x01user\x01again"
    for name, t in FEATURES.items():
        seeds[f"feature_{name}"] = t.encode() + b"\0" + json.dumps(CONVERSATIONS["chat"]).encode()
        seeds[f"feature_{name}_plain"] = t.encode()
    return seeds


def write(folder: Path, seeds: dict[str, bytes]) -> None:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for name, data in seeds.items():
        (folder / name).write_bytes(data)
    print(f"{folder.relative_to(ROOT)}: {len(seeds)} seeds, {sum(map(len, seeds.values()))} bytes, "
          f"largest {max(map(len, seeds.values()))}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    a = ap.parse_args()
    corpus = HERE / "corpus"
    write(corpus / "gguf", gguf_seeds())
    write(corpus / "tokenizer", tokenizer_seeds(a.shared))
    write(corpus / "chat_template", chat_seeds(a.shared))


if __name__ == "__main__":
    main()
