"""The o200k tokenizer (gpt-oss's vocabulary, tokenizer.ggml.pre "gpt-4o") against tiktoken.

The reference is tiktoken itself (OpenAI's Rust BPE and regex) over the o200k ranks that the
PyPI package bpe-openai bundles, checked against the SHA-256 tiktoken pins for o200k_base
(tiktoken alone would download them; see o200k.py). The vocabulary GGUF is built from the same
ranks the way llama.cpp's converter lays out gpt-oss's (GPT-2 byte alphabet, merges, harmony
specials as control tokens). moeflow must give tiktoken's ids for every input:
  * llama.cpp's tokenizer test inputs (../shared/data/tokenizers),
  * hand-picked cases of the o200k pattern (case changes inside words, contractions of any
    case, digit groups, punctuation followed by '/' and line breaks, whitespace runs, CR LF),
    scripts with combining marks (Devanagari, Thai, Arabic, Hebrew), CJK, emoji sequences,
    control characters,
  * 300 lines of real text and code from ../shared/data/corpus,
  * 200 seeded random strings over ASCII, Latin-1, Greek, Cyrillic, CJK, combining marks, emoji
    and whitespace;
and the harmony special tokens parsed in a chat prompt.
"""
from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

import oracle_models as om
import o200k

om.oracle_import("tiktoken")
om.oracle_import("bpe_openai")
om.oracle_import("gguf")

BIN = om.moeflow_binary()
assert BIN is not None, "moeflow binary not built"
DATA = Path(os.environ.get("MOEFLOW_SHARED_DATA", om.ROOT.parent / "shared" / "data"))
SEP = "\n__ggml_vocab_test__\n"

CASES = [
    "Hello world", " Hello world", "HelloWorld", "camelCaseWordsHere", "XMLHttpRequest",
    "HTTPServer2Go", "ALLCAPS words", "I'm", "I'M", "they'LL", "It's", "you'RE",
    "don't DON'T", "'s 're 've", "12345678901", "3.14159 and 2,718", "1st 22nd 333rd 4444th",
    "a/b/c/", "!!!//\n", "foo.bar/baz\r\n", "(x)=>{return x*2;}\n", "   \n\n\t  x",
    "line1\r\nline2\rline3\n", " \u00a0 nbsp", "tab\tsep\tvalues", "naïve café résumé",
    "ÉTÉ Ölçü ÀÉÎÕÜ", "Straße GROSSE", "ǅemal ǈubljana", "Ωμέγα ΑΛΦΑ", "Привет МИР",
    "日本語のテキストです。", "中文标点，测试！", "한국어 텍스트", "नमस्ते दुनिया", "ภาษาไทย",
    "مرحبا بالعالم", "שלום עולם", "e\u0301 combining", "🎉 party 🎉🎉", "👩‍👩‍👧‍👦 family",
    "🇫🇷 flag", "\x00\x01\x7f control", "def f(x):\n    return x ** 2\n", "<|start|> not special",
    "x" * 300, " " * 50 + "end", "\n" * 10, "mixed123abc456DEF",
]


def corpus_lines(n: int) -> list[str]:
    lines = []
    for f in sorted((DATA / "corpus").glob("*.txt")):
        text = f.read_text(encoding="utf-8", errors="replace").splitlines()
        rng = random.Random(f.name)
        lines += [l for l in rng.sample(text, min(len(text), n // 5)) if l.strip()]
    return lines


def random_strings(n: int) -> list[str]:
    rng = random.Random(200)
    ranges = [(0x20, 0x7E), (0xA0, 0xFF), (0x391, 0x3C9), (0x410, 0x44F), (0x4E00, 0x4FFF),
              (0x300, 0x36F), (0x1F600, 0x1F64F), (0x900, 0x97F)]
    ws = [" ", "\n", "\t", "\r\n", "  "]
    out = []
    for _ in range(n):
        s = []
        for _ in range(rng.randint(1, 40)):
            if rng.random() < 0.15:
                s.append(rng.choice(ws))
            else:
                lo, hi = rng.choice(ranges)
                s.append(chr(rng.randint(lo, hi)))
        out.append("".join(s))
    return out


def llamacpp_inputs() -> list[str]:
    inp = DATA / "tokenizers" / "llamacpp_vocab" / "ggml-vocab-llama-bpe.gguf.inp"
    return inp.read_text(encoding="utf-8").split(SEP)


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    return o200k.write_vocab_gguf(tmp_path_factory.mktemp("o200k") / "o200k.gguf")


def test_o200k_ids_match_tiktoken(vocab, tmp_path):
    enc = o200k.tiktoken_encoding()
    inputs = [s for s in llamacpp_inputs() + CASES + corpus_lines(300) + random_strings(200)
              if SEP not in s]
    # An empty input is dropped when last in the file: keep non-empty inputs last.
    inputs.sort(key=lambda s: s != "", reverse=False)
    assert len(inputs) > 500
    (tmp_path / "v.inp").write_text(SEP.join(inputs), encoding="utf-8")
    (tmp_path / "v.out").write_text("".join(" ".join(map(str, enc.encode_ordinary(s))) + "\n"
                                            for s in inputs), encoding="utf-8")
    r = subprocess.run([BIN, "tokenize", "-m", str(vocab), "--vectors", str(tmp_path / "v.inp"),
                        str(tmp_path / "v.out")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{len(inputs)}/{len(inputs)} passed" in r.stdout, r.stdout


def test_harmony_special_tokens_parse(vocab):
    enc = o200k.tiktoken_encoding()
    text = ("<|start|>system<|message|>Reasoning: low<|end|><|start|>user<|message|>Hi, what's "
            "2+2?<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>")
    r = subprocess.run([BIN, "tokenize", "-m", str(vocab), "-p", text], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in r.stdout.split()] == enc.encode(text, allowed_special="all")
