"""Tokenizer test inputs shared by the BPE oracle tests (test_o200k_tokenizer.py,
test_minimax_m2_tokenizer.py): llama.cpp's tokenizer test inputs, hand-picked cases of the o200k
pattern, real text lines and seeded random strings, the vector files' separator; and the
vocabulary-only GGUF those tests write (`write_bpe_vocab_gguf`)."""
from __future__ import annotations

import os
import random
from pathlib import Path

import oracle_models as om

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


def write_bpe_vocab_gguf(path: Path, arch: str, pre: str, tokens: list[str], types: list[int],
                         merges: list[str], bos: int, eos: int, pad: int | None = None) -> Path:
    """A vocabulary-only GGUF as llama.cpp's converter writes a byte-level BPE (tokenizer.ggml.model
    gpt2): token texts in the GPT-2 byte alphabet, their types (1 normal, 3 control), merges, no
    BOS added."""
    import gguf
    w = gguf.GGUFWriter(str(path), arch)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    if pad is not None:
        w.add_pad_token_id(pad)
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
