"""The harmony chat format (gpt-oss) of `chat`/`serve` against openai-harmony, OpenAI's own
renderer (render_conversation_for_completion with its default system content), run offline on
the o200k ranks of o200k.py (TIKTOKEN_ENCODINGS_BASE). For each conversation `moeflow tokenize
--chat` must give the very token ids openai-harmony gives: OpenAI-style system messages become
the developer message's instructions, earlier answers the final channel, reasoning_content an
analysis message (dropped before the first answer once the last assistant message is an answer),
the generation prompt <|start|>assistant; reasoning effort low/medium/high. With OpenAI `tools`
(the chat file {"messages", "tools"}): the system message's line on the commentary channel and
the developer message's "# Tools" namespace with each function's JSON schema as TypeScript;
assistant tool_calls as messages to=functions.NAME (a content beside them a commentary
preamble), tool replies as messages from functions.NAME.
"""
from __future__ import annotations

import json
import os
import random
import subprocess

import pytest

import oracle_models as om
import o200k

om.oracle_import("bpe_openai")
om.oracle_import("gguf")
H = om.oracle_import("openai_harmony")

BIN = om.moeflow_binary()
assert BIN is not None, "moeflow binary not built"

def fn(name: str, description: str | None, parameters: dict | None = None) -> dict:
    f = {"name": name}
    if description is not None:
        f["description"] = description
    if parameters is not None:
        f["parameters"] = parameters
    return {"type": "function", "function": f}


GET_WEATHER = fn("get_weather", "Gets the current weather in a city.\nUse it before answering "
                 "about the weather.", {
                     "type": "object",
                     "properties": {
                         "location": {"type": "string", "description": "City and country, e.g. Paris, France"},
                         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                         "days": {"type": "integer", "description": "Days of forecast", "default": 1},
                     },
                     "required": ["location"],
                 })
SEARCH = fn("search_docs", "Full-text search over the documentation.", {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "Words to look for"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
        "tags": {"type": "array", "items": {"type": "string"}, "description": "Only pages with these tags"},
        "exact": {"type": "boolean", "default": False},
        "min_score": {"type": "number", "default": 0.5},
    },
    "required": ["query", "limit"],
    "additionalProperties": False,
})
CREATE_EVENT = fn("create_event", "Creates a calendar event.\n\nThe organizer is the user.", {
    "type": "object",
    "description": "The event",
    "properties": {
        "title": {"type": "string", "title": "Title", "examples": ["Standup", "1:1"]},
        "place": {
            "type": "object",
            "description": "Where it happens",
            "properties": {
                "room": {"type": "string"},
                "address": {"type": "object", "properties": {"street": {"type": "string"},
                                                             "zip": {"type": "string", "default": "00000"}},
                            "required": ["street"]},
            },
            "required": ["room"],
        },
        "attendees": {"type": "array", "items": {
            "type": "object", "properties": {"email": {"type": "string"},
                                             "optional": {"type": "boolean"}},
            "required": ["email"]}},
        "when": {"type": ["string", "null"], "description": "ISO 8601 start, null for now"},
        "duration": {"oneOf": [{"type": "integer", "description": "Minutes"},
                               {"type": "string", "enum": ["all-day"], "default": "all-day"}],
                     "description": "How long"},
        "priority": {"type": "integer", "enum": [1, 2, 3], "nullable": True},
        "reminder": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
        "color": {"type": "string", "enum": ["red", "green"], "default": "red"},
    },
    "required": ["title", "attendees"],
})
GET_TIME = fn("get_time", "Current UTC time")
NO_DESC = fn("ping", None, {"type": "object", "properties": {}})
UNION = fn("convert", "Unit conversion.", {"oneOf": [
    {"type": "object", "properties": {"meters": {"type": "number"}}, "description": "Length"},
    {"type": "object", "properties": {"grams": {"type": "number"}}, "nullable": True},
]})
TOOLS = [GET_WEATHER, SEARCH, CREATE_EVENT, GET_TIME, NO_DESC, UNION]


def call(id_: str, name: str, arguments: str) -> dict:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


WEATHER_TURN = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "reasoning_content": "Need get_weather.",
     "tool_calls": [call("call_1", "get_weather", '{"location":"Paris, France"}')]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21, "sky": "clear"}'},
]

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
    # Reasoning of a turn after the first answer is kept (openai-harmony drops only the analysis
    # before the first final message).
    ("medium", [{"role": "user", "content": "a"},
                {"role": "assistant", "content": "b", "reasoning_content": "r1"},
                {"role": "user", "content": "c"},
                {"role": "assistant", "content": "d", "reasoning_content": "r2"},
                {"role": "user", "content": "e"}]),
    # Tools, with and without instructions; an empty list is no tools.
    ("medium", {"messages": [{"role": "system", "content": "You help with travel."},
                             {"role": "user", "content": "Hi"}], "tools": TOOLS}),
    ("low", {"messages": [{"role": "user", "content": "What time is it?"}], "tools": [GET_TIME]}),
    ("high", {"messages": [{"role": "user", "content": "Hi"}], "tools": []}),
    # A call and its result: the turn goes on, its reasoning is kept.
    ("medium", {"messages": WEATHER_TURN, "tools": [GET_WEATHER, SEARCH]}),
    # The turn answered: its reasoning is dropped; the next question.
    ("medium", {"messages": [{"role": "system", "content": "Be brief."}, *WEATHER_TURN,
                             {"role": "assistant", "content": "21 °C and clear."},
                             {"role": "user", "content": "And tomorrow?"}],
                "tools": [GET_WEATHER]}),
    # Two calls in one message after a preamble, answered in order; then a call in a later turn.
    ("high", {"messages": [
        {"role": "user", "content": "Plan a meeting about the docs"},
        {"role": "assistant", "content": "Let me look that up first.",
         "tool_calls": [call("a", "search_docs", '{"query": "meeting", "limit": 3}'),
                        call("b", "get_time", "{}")]},
        {"role": "tool", "tool_call_id": "a", "content": "[]"},
        {"role": "tool", "tool_call_id": "b", "content": "12:00Z"},
        {"role": "assistant", "content": "Nothing found; it is noon.", "reasoning_content": "ok"},
        {"role": "user", "content": "Then create it"},
        {"role": "assistant", "content": "", "reasoning_content": "Create it.",
         "tool_calls": [call("c", "create_event",
                             '{"title": "Docs", "attendees": [{"email": "a@b.c"}]}')]},
        {"role": "tool", "tool_call_id": "c", "content": "created"}], "tools": TOOLS}),
]


def harmony_ids(effort: str, chat) -> list[int]:
    messages, tools = (chat["messages"], chat.get("tools")) if isinstance(chat, dict) else (chat, None)
    enc = H.load_harmony_encoding(H.HarmonyEncodingName.HARMONY_GPT_OSS)
    effort = {"low": H.ReasoningEffort.LOW, "medium": H.ReasoningEffort.MEDIUM,
              "high": H.ReasoningEffort.HIGH}[effort]
    msgs = [H.Message.from_role_and_content(H.Role.SYSTEM,
                                            H.SystemContent.new().with_reasoning_effort(effort))]
    sys_text = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    if sys_text or tools:
        dev = H.DeveloperContent.new()
        if sys_text:
            dev = dev.with_instructions(sys_text)
        if tools:
            dev = dev.with_function_tools([
                H.ToolDescription.new(t["function"]["name"], t["function"].get("description") or "",
                                      t["function"].get("parameters")) for t in tools])
        msgs.append(H.Message.from_role_and_content(H.Role.DEVELOPER, dev))
    names = {}
    for m in messages:
        if m["role"] == "user":
            msgs.append(H.Message.from_role_and_content(H.Role.USER, m["content"]))
        elif m["role"] == "assistant":
            if m.get("reasoning_content"):
                msgs.append(H.Message.from_role_and_content(H.Role.ASSISTANT, m["reasoning_content"])
                            .with_channel("analysis"))
            if m.get("tool_calls"):
                if m.get("content"):  # a preamble
                    msgs.append(H.Message.from_role_and_content(H.Role.ASSISTANT, m["content"])
                                .with_channel("commentary"))
                for c in m["tool_calls"]:
                    names[c["id"]] = c["function"]["name"]
                    msgs.append(H.Message.from_role_and_content(H.Role.ASSISTANT, c["function"]["arguments"])
                                .with_channel("commentary")
                                .with_recipient("functions." + c["function"]["name"])
                                .with_content_type("<|constrain|>json"))
            else:
                msgs.append(H.Message.from_role_and_content(H.Role.ASSISTANT, m["content"])
                            .with_channel("final"))
        elif m["role"] == "tool":
            author = H.Author.new(H.Role.TOOL, "functions." + names[m["tool_call_id"]])
            msgs.append(H.Message.from_author_and_content(author, m["content"])
                        .with_recipient("assistant").with_channel("commentary"))
    return enc.render_conversation_for_completion(H.Conversation.from_messages(msgs), H.Role.ASSISTANT)


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    d = tmp_path_factory.mktemp("harmony")
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(o200k.encodings_dir(d))
    return o200k.write_vocab_gguf(d / "o200k.gguf")


def assert_same_ids(r: subprocess.CompletedProcess, want: list[int]):
    assert r.returncode == 0, r.stderr
    got = [int(x) for x in r.stdout.split()]
    if got != want:  # the texts first: a readable difference
        enc = H.load_harmony_encoding(H.HarmonyEncodingName.HARMONY_GPT_OSS)
        assert enc.decode(got) == enc.decode(want)
    assert got == want


def tokenize(vocab, tmp_path, effort: str, chat) -> subprocess.CompletedProcess:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(chat), encoding="utf-8")
    return subprocess.run([BIN, "tokenize", "-m", str(vocab), "--chat", str(path), "--reasoning-effort",
                           effort], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("i", range(len(CONVERSATIONS)))
def test_chat_prompt_matches_openai_harmony(vocab, tmp_path, i):
    effort, chat = CONVERSATIONS[i]
    r = tokenize(vocab, tmp_path, effort, chat)
    assert_same_ids(r, harmony_ids(effort, chat))


def test_tool_reply_to_an_unknown_call_is_refused(vocab, tmp_path):
    chat = {"messages": [*WEATHER_TURN[:2], {"role": "tool", "tool_call_id": "call_9", "content": "x"}],
            "tools": [GET_WEATHER]}
    r = tokenize(vocab, tmp_path, "medium", chat)
    assert r.returncode != 0
    assert "call_9" in r.stderr


def random_schema(r: random.Random, depth: int = 0) -> dict:
    """A JSON schema mixing what openai-harmony reads (types, type lists, enums, oneOf, nested
    objects, arrays, title, description, examples, default, nullable) with what it does not
    (anyOf, numeric enums, unknown types), and odd values (multi-line and quoted strings, floats
    that print in exponent form)."""
    kinds = ["object", "string", "integer", "number", "boolean", "array", "null", "date", None, "list",
             "oneOf", "anyOf"] if depth < 3 else ["string", "integer", None, "list"]
    kind = r.choice(kinds)
    s: dict = {}
    if kind == "list":
        s["type"] = r.sample(["string", "integer", "null", "number", 5], r.randint(0, 3))
    elif kind in ("oneOf", "anyOf"):
        s[kind] = [random_schema(r, depth + 1) for _ in range(r.randint(0, 3))]
    elif kind is not None:
        s["type"] = kind
    if kind == "object" and r.random() < 0.9:
        s["properties"] = {f"{r.choice(['p', 'name', 'x_y'])}{i}": random_schema(r, depth + 1)
                           for i in range(r.randint(0, 4))}
        if r.random() < 0.7:
            s["required"] = [k for k in s["properties"] if r.random() < 0.5]
    if kind == "array" and r.random() < 0.8:
        s["items"] = random_schema(r, depth + 1)
    words = ["a", "two words", "x\ny", 'q"u', "é 🎉", "", "to=z"]
    if r.random() < 0.3:
        s["enum"] = r.sample(["a", "b", 1, None, "c d"], r.randint(0, 3))
    for k in ("description", "title"):
        if r.random() < 0.3:
            s[k] = r.choice(words)
    if r.random() < 0.15:
        s["examples"] = r.sample(["e1", 2, "e 3"], r.randint(0, 3))
    if r.random() < 0.3:
        s["default"] = r.choice([None, True, 0, -3, 1.5, 2.0, 0.1, 1e16, 1e15, 1e-5, 1e-6, 1e21, 123456.789,
                                 "s", 'q"x', "é\n", [1, "a"], {"k": [1.0]}])
    if r.random() < 0.15:
        s["nullable"] = r.choice([True, False])
    return s


@pytest.mark.parametrize("seed", range(3))
def test_random_tool_schemas_match_openai_harmony(vocab, tmp_path, seed):
    rng = random.Random(seed)
    tools = []
    for i in range(30):
        params = random_schema(rng)
        if rng.random() < 0.7:
            params = {"type": "object", "required": ["k0"],
                      "properties": {f"k{j}": random_schema(rng, 1) for j in range(rng.randint(0, 5))}}
        tools.append(fn(f"t{i}", rng.choice([None, "", "One line.", "Two\nlines\n", "a\r\nb", "\n"]),
                        params if rng.random() < 0.9 else None))
    chat = {"messages": [{"role": "user", "content": "Hi"}], "tools": tools}
    assert_same_ids(tokenize(vocab, tmp_path, "medium", chat), harmony_ids("medium", chat))
