"""Structured output from `moeflow serve`: response_format json_schema and json_object through the
official `openai` client, every output parsed and validated against its schema with the
`jsonschema` package (an oracle independent of moeflow's grammar compiler).

Schemas with nested objects, arrays with item counts, enums, const, required and optional
properties, anyOf and $ref; chat plain and streamed, several choices and seeds, and completions
with the same field. Strings carry maxLength so that a small model's output always closes within
max_tokens: the outputs must end with finish_reason "stop" and validate.

The openai and jsonschema packages and the demo model are required: missing, the module skips
locally and FAILS under CI=true (scripts/setup-deps.sh installs the packages).
"""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import oracle_models as om
from serve_process import serve
from oracle_import import require, require_module

ROOT = Path(__file__).resolve().parents[2]
MODEL = Path(os.environ.get("MOEFLOW_DEMO_MODEL", ROOT / "models" / "demo-moe.gguf"))
BIN = om.moeflow_binary()
ALIAS = "demo"

openai = require_module("openai", "the official OpenAI client")
jsonschema = require_module("jsonschema", "JSON schema validation of structured output")
require(BIN is not None, "moeflow binary not built")
require(MODEL.exists(), f"demo model {MODEL} missing")

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer"},
        "role": {"enum": ["admin", "user", "guest"]},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 16},
                           "zip": {"type": "string", "minLength": 5, "maxLength": 5}},
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 1, "maxItems": 3},
        "score": {"type": ["number", "null"]},
        "active": {"type": "boolean"},
        "nickname": {"type": "string", "maxLength": 10},
    },
    "required": ["name", "age", "role", "address", "tags", "active"],
    "additionalProperties": False,
}

SHAPES = {
    "$defs": {
        "point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                  "required": ["x", "y"], "additionalProperties": False},
    },
    "type": "object",
    "properties": {
        "kind": {"const": "polygon"},
        "points": {"type": "array", "items": {"$ref": "#/$defs/point"}, "minItems": 3, "maxItems": 4},
        "label": {"anyOf": [{"type": "string", "maxLength": 12}, {"type": "null"}]},
        "matrix": {"type": "array", "maxItems": 2,
                   "items": {"type": "array", "items": {"type": "integer"}, "maxItems": 2}},
    },
    "required": ["kind", "points", "label", "matrix"],
    "additionalProperties": False,
}

MESSAGES = [{"role": "system", "content": "Reply with JSON only."},
            {"role": "user", "content": "Describe a person as JSON."}]


@pytest.fixture(scope="module")
def server():
    yield from serve(BIN, MODEL, ALIAS, ["-c", "2048"])


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="none", max_retries=0, timeout=120)


def schema_format(name, schema):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def check(text, schema, finish_reason):
    assert finish_reason == "stop", f"the output did not close: {text!r}"
    value = json.loads(text)
    jsonschema.validate(value, schema)
    return value


@pytest.mark.parametrize("name,schema", [("person", PERSON), ("shapes", SHAPES)])
def test_chat_json_schema_validates(client, name, schema):
    for seed, temperature in [(1, 0.0), (2, 0.8), (3, 1.0), (4, 1.5)]:
        r = client.chat.completions.create(model=ALIAS, messages=MESSAGES, seed=seed, temperature=temperature,
                                           max_tokens=600, response_format=schema_format(name, schema))
        c = r.choices[0]
        check(c.message.content, schema, c.finish_reason)


def test_several_choices_and_streaming_validate(client):
    r = client.chat.completions.create(model=ALIAS, messages=MESSAGES, seed=9, temperature=1.0, n=3,
                                       max_tokens=600, response_format=schema_format("person", PERSON))
    assert len(r.choices) == 3
    for c in r.choices:
        check(c.message.content, PERSON, c.finish_reason)
    chunks = list(client.chat.completions.create(model=ALIAS, messages=MESSAGES, seed=9, temperature=1.0,
                                                 max_tokens=600, stream=True,
                                                 response_format=schema_format("person", PERSON)))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert text == r.choices[0].message.content  # same seed: choice 0 is what n = 1 gives
    check(text, PERSON, finish[-1])


def test_json_object_is_an_object(client):
    # Any object: strings are unbounded here, so a run cut by max_tokens is possible; the ones
    # that stop must parse as objects, and most must stop.
    stopped = 0
    for seed in range(4):
        r = client.chat.completions.create(model=ALIAS, messages=MESSAGES, seed=seed, temperature=0.7,
                                           max_tokens=400, response_format={"type": "json_object"})
        c = r.choices[0]
        if c.finish_reason == "stop":
            stopped += 1
            assert isinstance(json.loads(c.message.content), dict), c.message.content
    assert stopped >= 2


def test_completions_take_response_format_too(server):
    body = {"model": ALIAS, "prompt": "The shape as JSON:", "max_tokens": 600, "temperature": 0.9,
            "seed": 5, "response_format": schema_format("shapes", SHAPES)}
    req = urllib.request.Request(server + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        c = json.load(resp)["choices"][0]
    check(c["text"], SHAPES, c["finish_reason"])


def test_unsupported_schemas_are_400s_naming_the_keyword(client):
    for schema, keyword in [({"type": "string", "format": "email"}, "format"),
                            ({"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}}, "maximum"),
                            ({"type": "array", "uniqueItems": True}, "uniqueItems")]:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=ALIAS, messages=MESSAGES, response_format=schema_format("x", schema))
        assert e.value.body["param"] == "response_format"
        assert f"'{keyword}'" in e.value.body["message"], e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=ALIAS, messages=MESSAGES, response_format={"type": "yaml"})
    assert e.value.body["param"] == "response_format"
