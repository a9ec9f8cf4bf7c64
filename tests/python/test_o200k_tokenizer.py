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

import subprocess

import pytest

import oracle_models as om
import o200k
from tokenizer_inputs import CASES, SEP, corpus_lines, llamacpp_inputs, random_strings

om.oracle_import("tiktoken")
om.oracle_import("bpe_openai")
om.oracle_import("gguf")

BIN = om.moeflow_binary()
assert BIN is not None, "moeflow binary not built"


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
