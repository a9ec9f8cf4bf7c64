"""The harmony chat format (gpt-oss) of `chat`/`serve` against openai-harmony, OpenAI's own
renderer (render_conversation_for_completion with its default system content), run offline on
the o200k ranks of o200k.py (TIKTOKEN_ENCODINGS_BASE). For each conversation `moeflow tokenize
--chat` must give the very token ids openai-harmony gives: OpenAI-style system messages become
the developer message's instructions, earlier answers the final channel (their reasoning not
replayed), the generation prompt <|start|>assistant; reasoning effort low/medium/high.
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest

import oracle_models as om
import o200k

om.oracle_import("bpe_openai")
om.oracle_import("gguf")
H = om.oracle_import("openai_harmony")

BIN = om.moeflow_binary()
assert BIN is not None, "moeflow binary not built"

CONVERSATIONS = [
    ("medium", [{"role": "user", "content": "Hi"}]),
    ("low", [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]),
    ("high", [{"role": "system", "content": "Talk like a pirate!"},
              {"role": "user", "content": "Arrr, how be you?"},
              {"role": "assistant", "content": "Shiver me timbers, fine!", "reasoning_content": "hm"},
              {"role": "user", "content": "Tell me of MoE.\nIn two lines, with ümlauts 🎉"}]),
    ("medium", [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"},
                {"role": "user", "content": ""}]),
]


def harmony_ids(effort: str, messages: list[dict]) -> list[int]:
    enc = H.load_harmony_encoding(H.HarmonyEncodingName.HARMONY_GPT_OSS)
    effort = {"low": H.ReasoningEffort.LOW, "medium": H.ReasoningEffort.MEDIUM,
              "high": H.ReasoningEffort.HIGH}[effort]
    msgs = [H.Message.from_role_and_content(H.Role.SYSTEM,
                                            H.SystemContent.new().with_reasoning_effort(effort))]
    sys_text = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    if sys_text:
        msgs.append(H.Message.from_role_and_content(
            H.Role.DEVELOPER, H.DeveloperContent.new().with_instructions(sys_text)))
    for m in messages:
        if m["role"] == "user":
            msgs.append(H.Message.from_role_and_content(H.Role.USER, m["content"]))
        elif m["role"] == "assistant":
            if m.get("reasoning_content"):
                msgs.append(H.Message.from_role_and_content(H.Role.ASSISTANT, m["reasoning_content"])
                            .with_channel("analysis"))
            msgs.append(H.Message.from_role_and_content(H.Role.ASSISTANT, m["content"])
                        .with_channel("final"))
    return enc.render_conversation_for_completion(H.Conversation.from_messages(msgs), H.Role.ASSISTANT)


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    d = tmp_path_factory.mktemp("harmony")
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(o200k.encodings_dir(d))
    return o200k.write_vocab_gguf(d / "o200k.gguf")


@pytest.mark.parametrize("i", range(len(CONVERSATIONS)))
def test_chat_prompt_matches_openai_harmony(vocab, tmp_path, i):
    effort, messages = CONVERSATIONS[i]
    path = tmp_path / "messages.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    r = subprocess.run([BIN, "tokenize", "-m", str(vocab), "--chat", str(path), "--reasoning-effort",
                        effort], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in r.stdout.split()] == harmony_ids(effort, messages)
