"""MiniMax-M2's tokenizer layout (tokenizer.ggml.pre "minimax-m2") against Hugging Face tokenizers.

MiniMax-M2's own tokenizer.json (200064 tokens) is not reachable from here (no model hub, and no
PyPI package or indexed repository carries it), so its vocabulary cannot be checked. What makes
the family's tokenizer its own can be: a byte-level BPE whose pre-tokenizer is a Split on the
o200k pattern (llama.cpp's LLAMA_VOCAB_PRE_TYPE_MINIMAX_M2 quotes it "from tokenizer.json")
followed by ByteLevel without its own regex, no normalizer, merges not ignored, and added tokens
(]~!b[ ]~b] [e~[ ]!d~[ <think> </think> <minimax:tool_call> </minimax:tool_call>) matched inside the text. The
reference is the `tokenizers` library (the Rust implementation MiniMax-M2 ships for), over a
tokenizer of exactly that layout whose BPE is trained here on ../shared/data/corpus (8000 tokens
with the family's special tokens); the GGUF is written as llama.cpp's converter writes
minimax-m2's (model gpt2, pre minimax-m2, GPT-2 byte alphabet, merges, specials as control
tokens). moeflow must give the library's ids for every input:
  * llama.cpp's tokenizer test inputs, the o200k pattern's hand-picked cases, 300 corpus lines
    and 200 seeded random strings (tokenizer_inputs.py, as test_o200k_tokenizer.py), plain text;
  * a chat prompt in MiniMax-M2's format with its role markers, thinking and tool-call tokens
    (and with --no-special, none of them).
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import oracle_models as om
import o200k
import tokenizer_inputs as inputs_lib

tokenizers = om.oracle_import("tokenizers")
om.oracle_import("gguf")

BIN = om.moeflow_binary()
assert BIN is not None, "moeflow binary not built"
DATA, SEP = inputs_lib.DATA, inputs_lib.SEP

# MiniMax-M2's markers as added tokens: tokenizer_config's bos / eos / unk and its chat
# template's role, thinking and tool-call markers.
SPECIALS = ["]!d~[", "]~!b[", "[e~[", "]~b]", "<think>", "</think>", "<minimax:tool_call>",
            "</minimax:tool_call>"]
BOS, EOS = "]~!b[", "[e~["
VOCAB_SIZE = 8000


def train_tokenizer():
    """A tokenizer of MiniMax-M2's layout, its BPE trained on the shared corpus."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(o200k.PAT_STR), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    files = sorted(str(f) for f in (DATA / "corpus").glob("*.txt"))
    assert files, f"no corpus under {DATA / 'corpus'}"
    tok.train(files, trainer)
    return tok


def write_vocab_gguf(tok, path: Path) -> Path:
    """The vocabulary as llama.cpp's converter writes a minimax-m2 file."""
    model = json.loads(tok.to_str())["model"]
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [""] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text
    assert all(tokens), "every id has a text"
    special = set(SPECIALS)
    types = [3 if t in special else 1 for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return inputs_lib.write_bpe_vocab_gguf(path, "minimax-m2", "minimax-m2", tokens, types, merges,
                                           bos=vocab[BOS], eos=vocab[EOS])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tok = train_tokenizer()
    assert tok.get_vocab_size() == VOCAB_SIZE
    return tok, write_vocab_gguf(tok, tmp_path_factory.mktemp("minimax") / "minimax-m2.gguf")


def plain_inputs() -> list[str]:
    inputs = [s for s in inputs_lib.llamacpp_inputs() + inputs_lib.CASES
              + inputs_lib.corpus_lines(300) + inputs_lib.random_strings(200)
              if SEP not in s and not any(sp in s for sp in SPECIALS)]
    inputs.sort(key=lambda s: s != "")  # an empty input is dropped when last in the file
    return inputs


def test_ids_match_hf_tokenizers(trained, tmp_path):
    tok, vocab = trained
    inputs = plain_inputs()
    assert len(inputs) > 500
    want = [tok.encode(s, add_special_tokens=False).ids for s in inputs]
    # The trained vocabulary must exercise the merges, not spell everything in bytes.
    assert sum(map(len, want)) < 0.6 * sum(len(s.encode()) for s in inputs)
    (tmp_path / "v.inp").write_text(SEP.join(inputs), encoding="utf-8")
    (tmp_path / "v.out").write_text("".join(" ".join(map(str, ids)) + "\n" for ids in want),
                                    encoding="utf-8")
    r = subprocess.run([BIN, "tokenize", "-m", str(vocab), "--vectors", str(tmp_path / "v.inp"),
                        str(tmp_path / "v.out")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{len(inputs)}/{len(inputs)} passed" in r.stdout, r.stdout


def moeflow_ids(vocab: Path, text: str, *flags: str) -> list[int]:
    r = subprocess.run([BIN, "tokenize", "-m", str(vocab), "--no-bos", *flags, "-p", text],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [int(x) for x in r.stdout.split()]


CHAT = ("]~!b[]~b]system\nYou are a helpful assistant.[e~[\n]~b]user\nWhat's 2+2? Use the "
        "calculator.[e~[\n]~b]ai\n<think>\nThe user wants 2+2.\n</think>\n\n<minimax:tool_call>\n"
        "<invoke name=\"calc\">\n<parameter name=\"expr\">2+2</parameter>\n</invoke>\n"
        "</minimax:tool_call>[e~[\n]~b]tool\n<response>4</response>[e~[\n]~b]ai\n")


def test_special_tokens_parse_in_a_chat_prompt(trained):
    tok, vocab = trained
    want = tok.encode(CHAT, add_special_tokens=False).ids
    got = moeflow_ids(vocab, CHAT)
    assert got == want
    specials = {tok.token_to_id(s) for s in SPECIALS}
    n_markers = sum(CHAT.count(s) for s in SPECIALS)
    assert n_markers == 14 and sum(i in specials for i in got) == n_markers, "markers not parsed"
    # --no-special spells them out: the same ids as the text with no added tokens at all.
    spelled = moeflow_ids(vocab, CHAT, "--no-special")
    assert not specials & set(spelled)

