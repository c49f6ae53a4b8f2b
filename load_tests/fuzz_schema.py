"""Hypothesis strategies of the values a request model's JSON Schema describes.

A pydantic model's JSON Schema is adapted so that hypothesis-jsonschema can draw from it and
examples stay cheap (`adapt_schema`): `$ref`s inlined, annotations and pydantic's
`discriminator` dropped, lists and strings capped, open objects (`parameters`, `schema`,
`arguments`, `logit_bias`, Anthropic's `input_schema`, ...) replaced by a few realistic values.
Objects are composed here (`schema_strategy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

VOCAB_SIZE = 49152
"""SmolLM2's vocabulary: token ids in base bodies stay below it."""
STRING_CAP = 16

SAMPLE_SCHEMAS: list[dict[str, Any]] = [
    {"type": "object"},
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0}, "tags": {"type": "array"}},
        "additionalProperties": False,
    },
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "x": {"enum": ["a", "b"]}}},
]
"""Valid JSON Schemas used for tool parameters and output formats in base bodies."""

_DROP = frozenset({"title", "description", "default", "discriminator", "examples"})
LIST_CAPS = {
    "messages": (1, 3),
    "input": (1, 3),
    "tools": (0, 2),
    "tool_calls": (0, 2),
    "stop": (0, 2),
    "stop_sequences": (0, 2),
}
"""(minItems, maxItems) of arrays by property name; other arrays hold 0..3 items."""

_TOKEN_IDS = {"type": "integer", "minimum": 0, "maximum": VOCAB_SIZE - 1}
_PROMPT_STRING = {"type": "string", "minLength": 1, "maxLength": STRING_CAP}
OPENAI_OVERRIDES: dict[str, dict[str, Any]] = {
    "parameters": {"anyOf": [{"enum": SAMPLE_SCHEMAS}, {"type": "null"}]},
    "schema": {"enum": SAMPLE_SCHEMAS},
    "arguments": {"enum": ["{}", '{"city": "Paris"}', "", {}, {"city": "Paris"}]},
    "logit_bias": {"anyOf": [{"enum": [{}, {"1": 0.5}, {"42": -100}]}, {"type": "null"}]},
    "seed": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 2**31 - 1}, {"type": "null"}]},
    "n": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 2}, {"type": "null"}]},
    "best_of": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 2}, {"type": "null"}]},
    "stop_token_ids": {
        "anyOf": [{"type": "array", "maxItems": 2, "items": _TOKEN_IDS}, {"type": "null"}]
    },
    "prompt": {
        "anyOf": [
            _PROMPT_STRING,
            {"type": "array", "minItems": 1, "maxItems": 2, "items": _PROMPT_STRING},
            {"type": "array", "minItems": 1, "maxItems": 4, "items": _TOKEN_IDS},
        ]
    },
}
"""Chat and completions: property name -> the schema drawn instead."""

ANTHROPIC_OVERRIDES: dict[str, dict[str, Any]] = {
    "input_schema": {"enum": SAMPLE_SCHEMAS},
    "schema": {"enum": SAMPLE_SCHEMAS},
    "input": {"enum": [{}, {"city": "Paris"}]},
    "url": {"enum": ["https://example.com/cat.png"]},
    "top_k": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 50}, {"type": "null"}]},
}
"""Anthropic Messages: `input` is a `tool_use` block's arguments object."""

RESPONSES_OVERRIDES: dict[str, dict[str, Any]] = {
    "parameters": OPENAI_OVERRIDES["parameters"],
    "schema": {"enum": SAMPLE_SCHEMAS},
    "arguments": {"enum": ["{}", '{"city": "Paris"}', ""]},
    "metadata": {"anyOf": [{"enum": [{}, {"session": "s1"}]}, {"type": "null"}]},
    "image_url": {"anyOf": [{"enum": ["https://example.com/cat.png"]}, {"type": "null"}]},
}
"""OpenAI Responses: `input` stays the request's own union (string or items)."""


def adapt_schema(schema: dict[str, Any], overrides: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """A pydantic model's JSON Schema in a form hypothesis-jsonschema draws from cheaply.

    `$ref`s into `$defs` are inlined (the request models are not recursive), annotations and
    `discriminator` dropped, arrays (`LIST_CAPS`) and strings capped and the properties named in
    `overrides` replaced, at any depth.
    """
    defs = schema.get("$defs", {})

    def walk(node: Any, name: str | None) -> Any:
        if isinstance(node, list):
            return [walk(item, name) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return walk(defs[node["$ref"].rsplit("/", 1)[-1]], name)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DROP or key == "$defs":
                continue
            if key == "properties":
                out[key] = {p: overrides.get(p) or walk(v, p) for p, v in value.items()}
            else:
                out[key] = walk(value, name)
        if out.get("type") == "array":
            low, high = LIST_CAPS.get(name or "", (0, 3))
            out["minItems"] = max(out.get("minItems", 0), low)
            out["maxItems"] = high
        if out.get("type") == "string" and "enum" not in out and "const" not in out:
            out["maxLength"] = STRING_CAP
        return out

    return walk(schema, None)


def _has_object(node: Any) -> bool:
    if isinstance(node, list):
        return any(_has_object(n) for n in node)
    if not isinstance(node, dict):
        return False
    if node.get("type") == "object" or "properties" in node:
        return True
    return any(_has_object(v) for k, v in node.items() if k not in ("enum", "const"))


def schema_strategy(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values of an adapted schema (`adapt_schema`).

    Sub-schemas without objects are drawn by `hypothesis_jsonschema.from_schema`; objects,
    and the arrays and unions around them, are composed here with `st.fixed_dictionaries`,
    `st.lists` and `st.one_of`, because hypothesis-jsonschema 0.23's object generation calls a
    hypothesis internal (`cu.many(...).more()`) that newer hypothesis releases removed. Open
    objects without `properties` come out empty.
    """
    if not _has_object(schema):
        return from_schema(schema)
    for union in ("anyOf", "oneOf"):  # any member will do: the verdict comes after
        if union in schema:
            return st.one_of([schema_strategy(s) for s in schema[union]])
    if schema.get("type") == "array":
        items = schema_strategy(schema.get("items", {}))
        return st.lists(items, min_size=schema.get("minItems", 0), max_size=schema["maxItems"])
    props = schema.get("properties", {})
    required = set(schema.get("required", ()))
    return st.fixed_dictionaries(
        {k: schema_strategy(v) for k, v in props.items() if k in required},
        optional={k: schema_strategy(v) for k, v in props.items() if k not in required},
    )
