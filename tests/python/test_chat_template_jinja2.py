"""moeflow's chat-template engine (src/chat_template/) against jinja2, live.

The real chat templates of the supported families -- the published ones in
tests/chat_template/templates/*.jinja and the tokenizer.chat_template of the shared llama.cpp
vocabularies (DBRX, Phi-3) -- are rendered for several conversations (with and without a
system message, several turns, the last turn the assistant's, <think> reasoning, tools and tool
calls in both the OpenAI shape (arguments a JSON string, content null, call ids) and the
transformers shape (arguments an object), add_generation_prompt on and off) by jinja2 configured
as Hugging Face transformers
configures it for apply_chat_template (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, a raise_exception global, tojson = json.dumps with
ensure_ascii=False) and by `moeflow chat-template`. Both must give the same text, or both must
refuse with the same raise_exception message (or both with a type error, where a template
concatenates tool-call arguments of the shape it does not expect: TYPE_ERRORS).

None of these renderings differs. Where moeflow deliberately differs from jinja2 (outside what
published templates do), DIFFERENCES lists the case with its reason and the test asserts both
sides of it, so a difference is never silently skipped.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

import oracle_models as om
from oracle_import import require, require_module

jinja2 = require_module("jinja2", "the reference renderer of chat templates")
import jinja2.ext  # noqa: E402  (after the oracle check: loopcontrols)
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

BIN = om.moeflow_binary()
require(BIN is not None and om.moeflow_has_command(BIN, "chat-template"),
        "moeflow binary with the chat-template command not built")

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "tests" / "chat_template" / "templates"
SHARED = Path(os.environ.get("MOEFLOW_SHARED_DATA", ROOT.parent / "shared" / "data"))
VOCABS = SHARED / "tokenizers" / "llamacpp_vocab"
GGUF_TEMPLATES = ["dbrx", "phi-3"]  # the vocabularies whose GGUF carries a chat template


# ---- jinja2 as transformers uses it (transformers/utils/chat_template_utils.py) ----------------

class TemplateError(Exception):
    pass


class TypeMismatch(Exception):
    """An operation on values of the wrong types: Python's TypeError in jinja2 (which is no
    TemplateError, so its text is Python's own) and moeflow's "unsupported operand types"."""


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


def jinja2_render(source: str, context: dict) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source).render(**context)
    except jinja2.exceptions.TemplateError as e:
        raise TemplateError(str(e)) from e
    except TypeError as e:
        raise TypeMismatch(str(e)) from e


def moeflow_render(source: str, context: dict, tmp: Path) -> str:
    t, c = tmp / "template.jinja", tmp / "context.json"
    t.write_bytes(source.encode())
    c.write_text(json.dumps(context, ensure_ascii=False), encoding="utf-8")
    r = subprocess.run([BIN, "chat-template", "-t", str(t), "-c", str(c)], capture_output=True, timeout=60)
    if r.returncode != 0:
        err = r.stderr.decode("utf-8", "replace").strip()
        prefix = "chat template: "
        assert prefix in err, f"moeflow failed without a template error (status {r.returncode}): {err}"
        message = err[err.index(prefix) + len(prefix):]
        if message.startswith("unsupported operand types") or \
                message.startswith("items: can only get item pairs from a mapping"):
            raise TypeMismatch(message)
        raise TemplateError(message)
    return r.stdout.decode("utf-8")


# ---- the templates --------------------------------------------------------------------------

def gguf_chat_template(path: Path) -> str | None:
    """tokenizer.chat_template of a GGUF, found by its key. The vocabularies repeat some keys,
    which gguf-py's reader refuses, so the one string is read directly (as make_corpus.py does)."""
    b = path.read_bytes()
    key = b"tokenizer.chat_template"
    i = b.find(struct.pack("<Q", len(key)) + key)
    if i < 0:
        return None
    i += 8 + len(key)
    (vtype,) = struct.unpack_from("<I", b, i)
    (n,) = struct.unpack_from("<Q", b, i + 4)
    return b[i + 12:i + 12 + n].decode("utf-8") if vtype == 8 else None  # 8: GGUF string


def load_templates() -> dict[str, str]:
    out = {p.stem: p.read_text(encoding="utf-8") for p in sorted(TEMPLATES.glob("*.jinja"))}
    for name in GGUF_TEMPLATES:
        path = VOCABS / f"ggml-vocab-{name}.gguf"
        require(path.exists(), f"{path} missing (the shared data)")
        t = gguf_chat_template(path)
        assert t, f"{path} has no tokenizer.chat_template"
        out["gguf_" + name] = t
    return out


TEMPLATE_SOURCES = load_templates()

# The texts of BOS/EOS each family's vocabulary has (what `chat`/`serve` pass as bos_token and
# eos_token).
SPECIAL = {
    "olmoe": ("<|endoftext|>", "<|endoftext|>"),
    "deepseek_v2": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "phi35moe": ("<s>", "<|endoftext|>"),
    "gguf_phi-3": ("<s>", "<|endoftext|>"),
    "gguf_dbrx": ("<|endoftext|>", "<|endoftext|>"),
    "qwen2": ("<|endoftext|>", "<|im_end|>"),
    "qwen15moe": ("<|endoftext|>", "<|im_end|>"),
    "qwen3": ("<|endoftext|>", "<|im_end|>"),
    "llama31": ("<|begin_of_text|>", "<|eot_id|>"),
    "hermes3_tool_use": ("<|begin_of_text|>", "<|im_end|>"),
    "deepseek_v31": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "glm46": ("[gMASK]", "<|endoftext|>"),
    "qwen35": ("<|endoftext|>", "<|im_end|>"),
    "gemma4": ("<bos>", "<eos>"),
    "gemma4_interleaved": ("<bos>", "<eos>"),
    "minimax_m2": ("]~!b[", "[e~["),
}

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city, in °C",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}},
         # Parameters of every JSON-schema shape the templates turn into text (Hermes writes
         # Python types for them: list[...], dict, Union[...] for a list of types).
         {"type": "function", "function": {
             "name": "book_trip", "description": "Books a trip",
             "parameters": {"type": "object", "properties": {
                 "to": {"type": "object", "description": "Where",
                        "properties": {"city": {"type": "string"}, "zip": {"type": ["string", "null"]}}},
                 "class": {"type": "string", "enum": ["economy", "business"]},
                 "nights": {"type": "integer", "description": "How many"},
                 "guests": {"type": "array", "items": {"type": "string"}},
                 "budget": {"type": ["number", "string"]}, "tags": {"type": "object", "additionalProperties": {"type": "boolean"}}},
                 "required": ["to", "class"]}}}]

# An assistant turn with tool calls as OpenAI clients send it back (and as the server gives it
# to the template): content null, arguments a JSON string, ids (9 alphanumerics, what Mistral's
# template requires), and tool results that name their call.
OPENAI_CALLS = [
    {"id": "a1B2c3D4e", "type": "function",
     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}},
    {"id": "Z9y8X7w6v", "type": "function",
     "function": {"name": "book_trip", "arguments": "{\"to\": {\"city\": \"Nice\"}, \"class\": \"economy\"}"}},
]


def _with_object_arguments(calls):
    return [{**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}} for c in calls]


def _round_trip(calls):
    return [{"role": "system", "content": "Sys"}, {"role": "user", "content": "Weather in Paris, then a trip?"},
            {"role": "assistant", "content": None, "tool_calls": calls},
            *[{"role": "tool", "tool_call_id": c["id"], "content": f"result {k} °C"} for k, c in enumerate(calls)],
            {"role": "assistant", "content": "Done."}, {"role": "user", "content": "Thanks"}]

# name -> (messages, extra variables)
CONVERSATIONS = {
    "user": ([{"role": "user", "content": "Hello"}], {}),
    "system_user": ([{"role": "system", "content": "You are terse."},
                     {"role": "user", "content": "Hi é 🦙\nsecond line"}], {}),
    "multi_turn": ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2+2?"}], {}),
    "no_system": ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                   {"role": "user", "content": "c"}], {}),
    "last_assistant": ([{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}], {}),
    "empty_system": ([{"role": "system", "content": ""}, {"role": "user", "content": "Hi"}], {}),
    "think": ([{"role": "user", "content": "q1"},
               {"role": "assistant", "content": "<think>\nreason\n</think>\n\nanswer"},
               {"role": "user", "content": "q2"}], {}),
    "no_thinking": ([{"role": "user", "content": "Hi"}], {"enable_thinking": False}),
    "user_twice": ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], {}),
    "tools": ([{"role": "system", "content": "Sys"}, {"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "content": "",
                "tool_calls": [{"type": "function", "function": {
                    "name": "get_weather", "arguments": {"city": "Paris", "days": 2, "metric": True}}}]},
               {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "tool", "content": "sunny"}],
              {"tools": TOOLS}),
    "tools_no_call": ([{"role": "user", "content": "Weather?"}], {"tools": TOOLS}),
    # The OpenAI shape: one call, then two parallel calls; the same with object arguments.
    "tool_call_openai": (_round_trip(OPENAI_CALLS[:1])[:4], {"tools": TOOLS}),
    "tool_calls_openai": (_round_trip(OPENAI_CALLS), {"tools": TOOLS}),
    "tool_call_object_args": (_round_trip(_with_object_arguments(OPENAI_CALLS[:1]))[:4], {"tools": TOOLS}),
    "tool_calls_object_args": (_round_trip(_with_object_arguments(OPENAI_CALLS)), {"tools": TOOLS}),
}

ROUND_TRIPS = {"tool_call_openai", "tool_calls_openai", "tool_call_object_args", "tool_calls_object_args"}
# The templates with tool calling, and where each of them is a type error in jinja2 as in
# moeflow: DeepSeek's concatenates the arguments as text (`... + tool['function']['arguments']
# + ...`), so object arguments cannot be rendered. (GLM's refuses string arguments with a
# raise_exception of its own.) The templates without tools concatenate `content`, so the
# round trips' null content is a type error for them.
# Qwen3.5's writes each argument as <parameter=K> from `arguments|items`, which is a type error
# on string arguments (MiniMax-M2's calls `arguments.items()`, an undefined-method error in both).
TOOL_TEMPLATES = {"qwen3", "mistral_nemo", "llama31", "hermes3_tool_use", "deepseek_v31", "glm46",
                  "qwen35", "gemma4", "gemma4_interleaved", "minimax_m2"}
TOOL_TYPE_ERRORS = ({("deepseek_v31", c) for c in ("tools", "tool_call_object_args", "tool_calls_object_args")} |
                    {("qwen35", c) for c in ("tool_call_openai", "tool_calls_openai")})


def type_error_expected(template: str, conversation: str) -> bool | None:
    """True/False where the outcome must (not) be a type error; None: either (a template
    without tools may refuse a round trip with a raise_exception of its own first)."""
    if template in TOOL_TEMPLATES:
        return (template, conversation) in TOOL_TYPE_ERRORS
    return None if conversation in ROUND_TRIPS else False

def context(template: str, conversation: str, add_generation_prompt: bool) -> dict:
    messages, extra = CONVERSATIONS[conversation]
    bos, eos = SPECIAL.get(template, ("<s>", "</s>"))
    # The order of `chat`/`serve` (ChatTemplate::apply): the four standard variables, then extras.
    return {"messages": messages, "add_generation_prompt": add_generation_prompt, "bos_token": bos,
            "eos_token": eos, **extra}


def outcome(render, *args):
    try:
        return ("text", render(*args))
    except TemplateError as e:
        return ("error", str(e))
    except TypeMismatch:
        return ("type error", "")  # the texts are Python's and moeflow's own


CASES = [(t, c, g) for t in TEMPLATE_SOURCES for c in CONVERSATIONS for g in (True, False)]


@pytest.mark.parametrize("template,conversation,add_generation_prompt", CASES)
def test_rendering_matches_jinja2(template, conversation, add_generation_prompt, tmp_path):
    src = TEMPLATE_SOURCES[template]
    ctx = context(template, conversation, add_generation_prompt)
    want = outcome(jinja2_render, src, ctx)
    got = outcome(moeflow_render, src, ctx, tmp_path)
    assert got == want
    expected = type_error_expected(template, conversation)
    assert expected is None or (want[0] == "type error") == expected, want


def test_the_cases_exercise_both_outcomes_and_tools(tmp_path):
    """The comparison above is only worth something if the conversations reach the templates'
    branches: some renderings refuse (raise_exception), tools reach the tools section, and the
    generation prompt changes the text."""
    qwen3 = TEMPLATE_SOURCES["qwen3"]
    with_tools = moeflow_render(qwen3, context("qwen3", "tools", True), tmp_path)
    assert "<tools>" in with_tools and '"name": "get_weather"' in with_tools
    assert moeflow_render(qwen3, context("qwen3", "user", True), tmp_path) != \
        moeflow_render(qwen3, context("qwen3", "user", False), tmp_path)
    kinds = {outcome(jinja2_render, TEMPLATE_SOURCES[t], context(t, c, g))[0] for t, c, g in CASES}
    assert kinds == {"text", "error", "type error"}
    # Each tool-calling family's tool sections are reached, with the tools and the calls.
    marks = {
        "qwen3": ("<tool_call>", "<tool_response>"),
        "mistral_nemo": ("[AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[TOOL_RESULTS]", '"id": "Z9y8X7w6v"'),
        "llama31": ("Environment: ipython", '"name": "book_trip"', '"parameters": {"city": "Paris", "days": 2}'),
        "hermes3_tool_use": ("<tools>", "budget: Union[float,str]", "tags: dict[str, bool]", "<tool_response>",
                             "guests: list[Union[]]"),  # sic: the template's `json_spec|items`
        "deepseek_v31": ("<｜tool▁calls▁begin｜>", '<｜tool▁sep｜>{"city": "Paris", "days": 2}',
                         "<｜tool▁output▁begin｜>"),
        "glm46": ("<arg_key>city</arg_key>", "<arg_value>Paris</arg_value>", "<tool_response>"),
        "qwen35": ("<function=get_weather>", "<parameter=city>\nParis\n</parameter>", "<tool_response>"),
        "minimax_m2": ('<invoke name="book_trip">', '<parameter name="to">{"city": "Nice"}</parameter>'),
        # Gemma 4 writes the parameters and arguments sorted by key (dictsort).
        "gemma4": ("<|tool>declaration:get_weather{", "<|tool_call>call:book_trip{class:<|\"|>economy<|\"|>,to:{",
                   "<|tool_response>"),
        "gemma4_interleaved": ("<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:2}",),
    }
    for t, want in marks.items():
        # Llama's template takes one call per turn (and writes string arguments as a JSON
        # string); DeepSeek's takes string arguments only.
        conv = {"llama31": "tool_call_object_args", "deepseek_v31": "tool_calls_openai"}.get(t, "tool_calls_object_args")
        text = moeflow_render(TEMPLATE_SOURCES[t], context(t, conv, True), tmp_path)
        for w in want:
            assert w in text, (t, w)
    with pytest.raises(TemplateError, match="Conversation roles must alternate"):
        moeflow_render(TEMPLATE_SOURCES["mixtral_v01"], context("mixtral_v01", "user_twice", True), tmp_path)


def test_jinja2_is_configured_as_transformers_does():
    """The settings the comparison relies on: trim_blocks/lstrip_blocks, loop controls, tojson
    with non-ASCII kept, raise_exception."""
    assert jinja2_render("{% if true %}\n  a\n{% endif %}\nb\n", {}) == "  a\nb"
    assert jinja2_render("{% for x in [1, 2] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}) == "1"
    assert jinja2_render("{{ {'k': 'é'} | tojson }}", {}) == '{"k": "é"}'
    with pytest.raises(TemplateError, match="boom"):
        jinja2_render("{{ raise_exception('boom') }}", {})


# Deliberate differences: (template, context, jinja2's outcome, moeflow's outcome, why).
DIFFERENCES = [
    ("[{{ missing.attr }}]", {}, ("error", "'missing' is undefined"), ("text", "[]"),
     "moeflow's undefined is lenient all the way down (an attribute of undefined is undefined), "
     "like llama.cpp's engine; jinja2's default Undefined raises on attribute access. Published "
     "templates test `is defined` first, so this only makes sloppy templates render."),
    ("{{ 9223372036854775807 + 1 }}", {}, ("text", "9223372036854775808"),
     ("error", "integer overflow in '+'"),
     "moeflow's integers are 64-bit and overflow is an error (never undefined behaviour); Python's "
     "are unbounded. No chat template computes with numbers near 2**63."),
]


@pytest.mark.parametrize("source,ctx,jinja2_outcome,moeflow_outcome,why", DIFFERENCES,
                         ids=[d[0] for d in DIFFERENCES])
def test_deliberate_differences(source, ctx, jinja2_outcome, moeflow_outcome, why, tmp_path):
    assert outcome(jinja2_render, source, ctx) == jinja2_outcome, why
    assert outcome(moeflow_render, source, ctx, tmp_path) == moeflow_outcome, why
