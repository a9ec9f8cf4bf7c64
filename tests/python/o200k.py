"""The o200k encoding offline, for the tokenizer and chat-format oracles.

tiktoken downloads its rank files at run time (no network here). The PyPI package bpe-openai
bundles o200k_base.tiktoken; its bytes are checked against the SHA-256 that tiktoken itself
pins for o200k_base, so the ranks are OpenAI's. From them:
  * `tiktoken_encoding()`: tiktoken's own Encoding (its Rust BPE and regex) over those ranks
    with the o200k_harmony special tokens: the reference encoder;
  * `encodings_dir()`: a directory holding o200k_base.tiktoken, for openai-harmony
    (TIKTOKEN_ENCODINGS_BASE), the reference renderer of the harmony chat format;
  * `write_vocab_gguf()`: the vocabulary as llama.cpp's converter writes gpt-oss's
    (tokenizer.ggml.model gpt2, pre gpt-4o, GPT-2 byte alphabet, merges, control specials).
"""
from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.resources
from functools import lru_cache
from pathlib import Path

from tokenizer_inputs import write_bpe_vocab_gguf

# tiktoken_ext/openai_public.py: expected_hash of o200k_base.tiktoken.
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
PAT_STR = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
N_VOCAB = 201088


@lru_cache(maxsize=1)
def rank_file_bytes() -> bytes:
    data = (importlib.resources.files("bpe_openai") / "data" / "o200k_base.tiktoken.gz").read_bytes()
    raw = gzip.decompress(data)
    got = hashlib.sha256(raw).hexdigest()
    if got != O200K_SHA256:
        raise RuntimeError(f"bpe-openai's o200k_base.tiktoken has SHA-256 {got}, not tiktoken's {O200K_SHA256}")
    return raw


@lru_cache(maxsize=1)
def ranks() -> dict[bytes, int]:
    out = {}
    for line in rank_file_bytes().splitlines():
        tok, rank = line.split()
        out[base64.b64decode(tok)] = int(rank)
    return out


def harmony_specials() -> dict[str, int]:
    """o200k_harmony's special tokens (tiktoken's definition; 200018 is <|endofprompt|>)."""
    sp = {f"<|reserved_{i}|>": i for i in range(200000, N_VOCAB)}
    sp.update({"<|startoftext|>": 199998, "<|endoftext|>": 199999, "<|return|>": 200002,
               "<|constrain|>": 200003, "<|channel|>": 200005, "<|start|>": 200006,
               "<|end|>": 200007, "<|message|>": 200008, "<|call|>": 200012,
               "<|endofprompt|>": 200018})
    del sp["<|reserved_200002|>"], sp["<|reserved_200003|>"], sp["<|reserved_200005|>"]
    for i in (200006, 200007, 200008, 200012, 200018):
        del sp[f"<|reserved_{i}|>"]
    return sp


def tiktoken_encoding():
    import tiktoken
    return tiktoken.Encoding(name="o200k_harmony_offline", pat_str=PAT_STR,
                             mergeable_ranks=ranks(), special_tokens=harmony_specials())


def encodings_dir(tmp: Path) -> Path:
    d = tmp / "tiktoken_encodings"
    d.mkdir(exist_ok=True)
    (d / "o200k_base.tiktoken").write_bytes(rank_file_bytes())
    return d


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's printable stand-in for every byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def _merge_of(token: bytes, rank: int, r: dict[bytes, int]) -> tuple[bytes, bytes]:
    """The last merge that builds `token`: BPE over its bytes with the ranks below its own stops
    at exactly two parts (how tiktoken vocabularies become HF merge lists)."""
    parts = [bytes([b]) for b in token]
    while True:
        best, at = None, None
        for i in range(len(parts) - 1):
            q = r.get(parts[i] + parts[i + 1])
            if q is not None and q < rank and (best is None or q < best):
                best, at = q, i
        if best is None:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    assert len(parts) == 2, (token, parts)
    return parts[0], parts[1]


def write_vocab_gguf(path: Path) -> Path:
    r = ranks()
    alpha = _byte_alphabet()
    text = lambda b: "".join(alpha[x] for x in b)  # noqa: E731
    tokens = [""] * N_VOCAB
    types = [1] * N_VOCAB
    for tok, rank in r.items():
        tokens[rank] = text(tok)
    for name, i in harmony_specials().items():
        tokens[i] = name
        types[i] = 3
    assert all(tokens), "every id has a text"
    merges = []
    for tok, rank in sorted(r.items(), key=lambda kv: kv[1]):
        if len(tok) > 1:
            a, b = _merge_of(tok, rank, r)
            merges.append(f"{text(a)} {text(b)}")
    return write_bpe_vocab_gguf(path, "gpt-oss", "gpt-4o", tokens, types, merges, bos=199998,
                                eos=200002, pad=199999)
