"""Tool calling through `moeflow serve`, driven by the official `openai` client, over the published
chat templates of the tool-calling families (tests/chat_template/templates/: Qwen3, Mistral Nemo,
Llama 3.1, Hermes 3, GLM-4.6, and the 2026 families Qwen3.5/3.6 (XML calls), Gemma 4 and
MiniMax-M2; provenance in its README.md). DeepSeek V3.1's template is not
among them: it renders tool calls and results but never the `tools` themselves (DeepSeek leaves
describing them to the caller), so the server refuses tools with it as with any template that
does not render them.

One server per template (a module-scoped fixture) serves a random-weight model written by
`moeflow gen-model`, with `--chat-template-file`. Such a model writes whatever the grammar lets
it, so what a test can require of its tool calls is exactly what constrained decoding
guarantees:

  * `tool_choice` naming a function, or "required": `finish_reason` "tool_calls", calls of
    type "function" with non-empty ids unique in the response, naming the function (one of the
    tools), whose `arguments` are a JSON string valid against that tool's `parameters`
    (checked with the `jsonschema` package, an oracle independent of moeflow's grammar
    compiler); the schemas have a nested object, an enum, integers and an array;
  * "none": no tool calls; "auto" (the default): a well-formed answer, content or calls;
  * streaming: the `delta.tool_calls` chunks, put together by `index` as OpenAI's documentation
    does (id, type and name from an index's first delta, the arguments concatenated), give the
    calls of the same request unstreamed, and the last chunk's finish_reason is "tool_calls";
  * a round trip: the assistant message with its `tool_calls` (content null) and a `tool`
    message sent back render through the template (each family wants the arguments in its own
    shape: Qwen3's and Hermes' take either, GLM's, Qwen3.5's and MiniMax's iterate them as a
    mapping, Gemma 4's writes a mapping in its own notation (a string would go in as it is),
    Llama's writes them with tojson (a string would come out quoted), and Mistral's wants the
    call ids as 9 alphanumerics) and get an answer;
  * the 400s: an unknown function in `tool_choice`, "required" without tools, and tools given to
    a template that does not render them (`tools_not_supported`).

Strings in the schemas carry maxLength and arrays maxItems, so that a call always closes within
max_tokens. The openai and jsonschema packages are required: missing, the module skips locally
and FAILS under CI=true (scripts/setup-deps.sh installs them).
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import oracle_models as om
from oracle_import import require, require_module
from serve_process import serve

openai = require_module("openai", "the official OpenAI client")
jsonschema = require_module("jsonschema", "JSON schema validation of tool-call arguments")

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "tests" / "chat_template" / "templates"
BIN = om.moeflow_binary()
require(BIN is not None and om.moeflow_has_command(BIN, "gen-model"),
        "moeflow binary with the gen-model command not built")
ALIAS = "tools"

# The templates that render tools, one per family (deepseek_v31.jinja renders no `tools`: above).
FAMILIES = ["qwen3", "mistral_nemo", "llama31", "hermes3_tool_use", "glm46",
            "qwen35", "gemma4", "minimax_m2"]
# One that does not (Mixtral 8x7B Instruct v0.1: user/assistant turns only).
NO_TOOLS_TEMPLATE = "mixtral_v01"

WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "description": "The weather forecast for a place",
    "parameters": {
        "type": "object",
        "properties": {
            "location": {"type": "object",
                         "properties": {"city": {"type": "string", "maxLength": 12},
                                        "country": {"type": "string", "minLength": 2, "maxLength": 2}},
                         "required": ["city", "country"], "additionalProperties": False},
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer"},
            "hours": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
        },
        "required": ["location", "unit", "days"],
        "additionalProperties": False,
    }}}
BOOK = {"type": "function", "function": {
    "name": "book_table",
    "description": "Books a table at a restaurant",
    "parameters": {
        "type": "object",
        "properties": {
            "guests": {"type": "integer"},
            "time": {"type": "string", "maxLength": 5},
            "wishes": {"type": "array", "items": {"enum": ["window", "quiet", "terrace"]}, "maxItems": 2},
        },
        "required": ["guests", "time"],
        "additionalProperties": False,
    }}}
TOOLS = [WEATHER, BOOK]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}

MESSAGES = [{"role": "system", "content": "You help with plans."},
            {"role": "user", "content": "What is the weather in Paris for the next two days?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
# One forced call of these schemas took 65-293 tokens on the 512-piece vocabulary (GLM's syntax
# the most); "required" with parallel calls allowed makes up to 4 of them.
MAX_TOKENS = 640
MAX_TOKENS_PARALLEL = 4 * MAX_TOKENS


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("tools_model") / "tiny-mixtral.gguf"
    r = subprocess.run([BIN, "gen-model", "--arch", "mixtral", "--preset", "tiny", "--seed", "7",
                        "-t", "1", "-q", "-o", str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return path


def start(model, template: str):
    return serve(BIN, model, ALIAS, ["-c", "4096", "--chat-template-file", str(TEMPLATES / f"{template}.jinja")])


@pytest.fixture(scope="module", params=FAMILIES)
def client(request, model):
    """A client of a server for each family's template (pytest runs a family's tests together,
    so each server starts once)."""
    gen = start(model, request.param)
    base = next(gen)
    yield openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=120)
    next(gen, None)  # SIGTERM, and the exit status checked


def create(client, **kw):
    kw.setdefault("max_tokens", MAX_TOKENS)
    kw.setdefault("temperature", 1.0)
    return client.chat.completions.create(model=ALIAS, messages=kw.pop("messages", MESSAGES), **kw)


def check_calls(choice, allowed_names):
    """The checks constrained decoding guarantees; returns [(name, arguments as parsed)]."""
    assert choice.finish_reason == "tool_calls", (choice.finish_reason, choice.message)
    calls = choice.message.tool_calls
    assert calls, choice.message
    ids = [c.id for c in calls]
    assert all(isinstance(i, str) and i for i in ids), ids
    assert len(set(ids)) == len(ids), f"tool call ids repeat: {ids}"
    out = []
    for c in calls:
        assert c.type == "function"
        assert c.function.name in allowed_names, c.function.name
        assert isinstance(c.function.arguments, str), c.function.arguments
        args = json.loads(c.function.arguments)
        jsonschema.validate(args, SCHEMAS[c.function.name])
        out.append((c.function.name, args))
    return out


def test_named_tool_choice_gives_valid_calls_of_that_function(client):
    for seed in (1, 2):
        r = create(client, tools=TOOLS, tool_choice=NAMED, seed=seed)
        check_calls(r.choices[0], {"get_weather"})


def test_required_tool_choice_calls_one_of_the_tools(client):
    for seed, parallel in [(4, False), (5, False), (6, True)]:
        r = create(client, tools=TOOLS, tool_choice="required", seed=seed, parallel_tool_calls=parallel,
                   max_tokens=MAX_TOKENS_PARALLEL if parallel else MAX_TOKENS)
        calls = check_calls(r.choices[0], {"get_weather", "book_table"})
        if not parallel:
            assert len(calls) == 1, calls


def test_tool_choice_none_gives_no_calls(client):
    r = create(client, tools=TOOLS, tool_choice="none", seed=7, max_tokens=48)
    c = r.choices[0]
    assert c.finish_reason in ("stop", "length"), c.finish_reason
    assert not c.message.tool_calls
    assert c.message.content is not None


def test_auto_tool_choice_is_a_well_formed_answer(client):
    for seed, kw in [(8, {}), (9, {"tool_choice": "auto"}), (10, {"parallel_tool_calls": False})]:
        r = create(client, tools=TOOLS, seed=seed, max_tokens=64, **kw)
        c = r.choices[0]
        assert c.message.role == "assistant"
        if c.message.tool_calls:  # the model wrote a call the parser recognised
            assert c.finish_reason == "tool_calls"
            for t in c.message.tool_calls:
                assert t.type == "function" and t.id and isinstance(t.function.arguments, str)
        else:
            assert c.finish_reason in ("stop", "length"), c.finish_reason
            assert c.message.content is not None


def test_streamed_calls_equal_the_unstreamed_ones(client):
    plain = create(client, tools=TOOLS, tool_choice=NAMED, seed=11)
    want = check_calls(plain.choices[0], {"get_weather"})
    calls: dict[int, dict] = {}
    finish = []
    for chunk in create(client, tools=TOOLS, tool_choice=NAMED, seed=11, stream=True):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        if ch.finish_reason:
            finish.append(ch.finish_reason)
        for d in ch.delta.tool_calls or []:
            if d.index not in calls:
                # An index's first delta carries the id, the type and the name ...
                assert d.id and d.type == "function" and d.function and d.function.name, d
                calls[d.index] = {"id": d.id, "name": d.function.name,
                                  "arguments": d.function.arguments or ""}
            else:
                # ... and the later ones only argument text: clients that concatenate every
                # field (as some do) would otherwise double the id or the name.
                assert not d.id and not (d.function and d.function.name), d
                calls[d.index]["arguments"] += (d.function.arguments or "") if d.function else ""
    assert finish and finish[-1] == "tool_calls", finish
    assert sorted(calls) == list(range(len(calls))), sorted(calls)
    got = [(calls[i]["name"], json.loads(calls[i]["arguments"])) for i in sorted(calls)]
    assert got == want
    assert len({c["id"] for c in calls.values()}) == len(calls)


def test_round_trip_with_the_tool_result(client):
    first = create(client, tools=TOOLS, tool_choice=NAMED, seed=12)
    check_calls(first.choices[0], {"get_weather"})
    # The call sent back as a client sends it (content null, arguments the JSON string it got,
    # the server's id); the first call only, as Llama 3.1's template takes one call per turn.
    call = first.choices[0].message.tool_calls[0]
    messages = MESSAGES + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call.id, "type": "function",
                         "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21, "sky": "clear"})},
    ]
    second = create(client, messages=messages, tools=TOOLS, seed=13, max_tokens=48)
    c = second.choices[0]
    assert c.finish_reason in ("stop", "length", "tool_calls"), c.finish_reason
    assert c.message.content is not None or c.message.tool_calls
    assert second.usage.prompt_tokens > first.usage.prompt_tokens, (second.usage, first.usage)
    # The same conversation without tools still renders (tool_choice "none": tools not passed).
    third = create(client, messages=messages, tools=TOOLS, tool_choice="none", seed=13, max_tokens=8)
    assert third.choices[0].finish_reason in ("stop", "length")


def test_bad_tool_choices_are_400s(client):
    with pytest.raises(openai.BadRequestError) as e:
        create(client, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "send_mail"}})
    assert e.value.status_code == 400 and "send_mail" in e.value.body["message"], e.value.body
    with pytest.raises(openai.BadRequestError) as e:
        create(client, tool_choice="required")
    assert e.value.status_code == 400, e.value.body


def test_a_template_without_tools_refuses_them(model):
    gen = start(model, NO_TOOLS_TEMPLATE)
    base = next(gen)
    try:
        c = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=120)
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model=ALIAS, messages=messages, tools=TOOLS, max_tokens=4)
        assert e.value.body["code"] == "tools_not_supported", e.value.body
        assert e.value.body["param"] == "tools", e.value.body
    finally:
        next(gen, None)
