"""Hypothesis strategies of request bodies for fuzzing `/v1/chat/completions` and `/v1/completions`.

A base body is drawn from the request model's own JSON Schema (`ChatCompletionRequest` /
`CompletionRequest`) with `hypothesis_jsonschema.from_schema` (objects are composed here, see
`schema_strategy`), the schema adapted so that hypothesis-jsonschema can use it and examples
stay cheap: `$ref`s inlined, annotations and pydantic's
`discriminator` dropped, lists and strings capped, open objects (`parameters`, `schema`,
`arguments`, `logit_bias`) replaced by a few realistic values. Every valid body gets
`max_tokens` 1..4 and a served model id (or no `model`), so serving one costs little.

Most examples (>= 80 %) are then made invalid by one of the mutators of
`load_tests.fuzz_mutators`. Each example is sent as raw `bytes` (deep nesting cannot go through
Python's recursive `json`), with `expected_invalid` computed locally by the router's own edge
checks: `limits.parse_body` (size, depth, JSON), `validation.parse_request` with the default
`RequestLimits` (schema, counts, schema sizes) and an unknown `model`.
"""

from __future__ import annotations

import copy
import json
import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from configs.request_limits import RequestLimits
from deployments.protocol.errors import OpenAIError
from deployments.protocol.limits import parse_body
from deployments.protocol.requests import ChatCompletionRequest, CompletionRequest
from deployments.protocol.validation import parse_request
from load_tests.fuzz_bodies import Mutator
from load_tests.fuzz_mutators import MUTATORS, mutate_extra_fields

Endpoint = Literal["chat", "completions"]

PATHS: dict[Endpoint, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
SCHEMAS = {"chat": ChatCompletionRequest, "completions": CompletionRequest}
VOCAB_SIZE = 49152
"""SmolLM2's vocabulary: token ids in base bodies stay below it."""
CHEAP_MAX_TOKENS = 4
UNMUTATED_SHARE = 0.05
EXTRA_FIELDS_ONLY_SHARE = 0.02
SECOND_MUTATOR_SHARE = 0.35
REJECTED_MAX_TOKENS = 2**31
"""An output limit this large exceeds every context, so the router refuses it unserved."""

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
"""Valid JSON Schemas used for `parameters` and `json_schema.schema` in base bodies."""

_DROP = frozenset({"title", "description", "default", "discriminator", "examples"})
_LIST_CAPS = {"messages": (1, 3), "tools": (0, 2), "tool_calls": (0, 2), "stop": (0, 2)}
_STRING_CAP = 16
_OVERRIDES: dict[str, dict[str, Any]] = {
    "parameters": {"anyOf": [{"enum": SAMPLE_SCHEMAS}, {"type": "null"}]},
    "schema": {"enum": SAMPLE_SCHEMAS},
    "arguments": {"enum": ["{}", '{"city": "Paris"}', "", {}, {"city": "Paris"}]},
    "logit_bias": {"anyOf": [{"enum": [{}, {"1": 0.5}, {"42": -100}]}, {"type": "null"}]},
    "seed": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 2**31 - 1}, {"type": "null"}]},
    "n": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 2}, {"type": "null"}]},
    "best_of": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 2}, {"type": "null"}]},
    "stop_token_ids": {
        "anyOf": [
            {
                "type": "array",
                "maxItems": 2,
                "items": {"type": "integer", "minimum": 0, "maximum": VOCAB_SIZE - 1},
            },
            {"type": "null"},
        ]
    },
    "prompt": {
        "anyOf": [
            {"type": "string", "minLength": 1, "maxLength": _STRING_CAP},
            {
                "type": "array",
                "minItems": 1,
                "maxItems": 2,
                "items": {"type": "string", "minLength": 1, "maxLength": _STRING_CAP},
            },
            {
                "type": "array",
                "minItems": 1,
                "maxItems": 4,
                "items": {"type": "integer", "minimum": 0, "maximum": VOCAB_SIZE - 1},
            },
        ]
    },
}


def adapt_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic model's JSON Schema in a form hypothesis-jsonschema draws from cheaply.

    `$ref`s into `$defs` are inlined (the request models are not recursive), annotations and
    `discriminator` dropped, arrays and strings capped and a few open-ended properties replaced
    (`_OVERRIDES`).
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
                out[key] = {p: _OVERRIDES.get(p) or walk(v, p) for p, v in value.items()}
            else:
                out[key] = walk(value, name)
        if out.get("type") == "array":
            low, high = _LIST_CAPS.get(name or "", (0, 3))
            out["minItems"] = max(out.get("minItems", 0), low)
            out["maxItems"] = high
        if out.get("type") == "string" and "enum" not in out and "const" not in out:
            out["maxLength"] = _STRING_CAP
        return out

    return walk(schema, None)


@dataclass(frozen=True)
class FuzzExample:
    """One request to send.

    Attributes:
        endpoint: `chat` or `completions`.
        body: The exact HTTP body.
        mutators: The mutator families applied, primary first; empty for an unmutated body.
        expected_invalid: The router's own edge checks refuse the body (computed locally).
        reason: Why it is invalid (the local error message), else "".
    """

    endpoint: Endpoint
    body: bytes
    mutators: tuple[str, ...]
    expected_invalid: bool
    reason: str = ""

    @property
    def path(self) -> str:
        """The route to POST to."""
        return PATHS[self.endpoint]

    @property
    def family(self) -> str:
        """The primary mutator family (see `classify`)."""
        return classify(self)

    def preview(self, limit: int = 600) -> str:
        """The body as text, cut to `limit` characters (with its total size when cut)."""
        text = self.body[:limit].decode("utf-8", errors="backslashreplace")
        more = f"... ({len(self.body)} bytes)" if len(self.body) > limit else ""
        return text + more


def classify(example: FuzzExample) -> str:
    """The mutator family of an example, for reporting: its primary mutator, or `valid_base`."""
    return example.mutators[0] if example.mutators else "valid_base"


def local_verdict(
    endpoint: Endpoint,
    body: bytes,
    models: Sequence[str],
    aliases: Sequence[str] = ("auto",),
    limits: RequestLimits | None = None,
) -> tuple[bool, str, ChatCompletionRequest | CompletionRequest | None]:
    """Whether the router's edge checks refuse `body`, and why.

    Returns:
        (invalid, reason, the parsed request when valid).
    """
    limits = limits or RequestLimits()
    try:
        obj = parse_body(body, limits)
        request = parse_request(SCHEMAS[endpoint], obj, limits)
    except OpenAIError as exc:
        return True, str(exc)[:300], None
    except (RecursionError, ValueError, TypeError) as exc:  # beyond what Python can parse
        return True, f"{type(exc).__name__}: {exc}"[:300], None
    if request.model is not None and request.model not in (*models, *aliases):
        return True, f"unknown model {request.model!r}"[:300], None
    return False, "", request


def _cheap(request: ChatCompletionRequest | CompletionRequest) -> bool:
    limit = request.output_limit()
    return limit is not None and (limit <= CHEAP_MAX_TOKENS or limit >= REJECTED_MAX_TOKENS)


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
    hypothesis internal (`cu.many(...).more()`) that newer hypothesis releases removed.
    """
    if not _has_object(schema):
        return from_schema(schema)
    for union in ("anyOf", "oneOf"):  # the request models' unions have disjoint members
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


@lru_cache(maxsize=None)
def _schema_strategy(endpoint: Endpoint) -> st.SearchStrategy[dict[str, Any]]:
    return schema_strategy(adapt_schema(SCHEMAS[endpoint].model_json_schema()))


def _repair_tool_choice(draw: st.DrawFn, body: dict[str, Any]) -> None:
    names = [t["function"]["name"] for t in body.get("tools") or []]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        if names:
            choice["function"]["name"] = draw(st.sampled_from(names))
        else:
            body.pop("tool_choice")
    elif choice == "required" and not names:
        body["tool_choice"] = "auto"


@st.composite
def base_bodies(draw: st.DrawFn, endpoint: Endpoint, models: Sequence[str]) -> dict[str, Any]:
    """A schema-drawn body, made valid-ish and cheap: `max_tokens` 1..4, a served model or none.

    Args:
        endpoint: `chat` or `completions`.
        models: Served model ids; `model` is one of them or omitted.
    """
    body = copy.deepcopy(draw(_schema_strategy(endpoint)))
    body.pop("max_completion_tokens", None)
    body["max_tokens"] = draw(st.integers(1, CHEAP_MAX_TOKENS))
    model = draw(st.sampled_from([*models, None]))
    body.pop("model", None)
    if model is not None:
        body["model"] = model
    if endpoint == "chat":
        _repair_tool_choice(draw, body)
        if draw(st.booleans()):  # half the bodies end with a plain user turn, as clients send
            body["messages"] = [{"role": "user", "content": draw(st.sampled_from(["Hi", "2+2?"]))}]
    return body


def _serialize(body: dict[str, Any] | bytes) -> bytes:
    if isinstance(body, bytes):
        return body
    return json.dumps(body).encode()


def mutation_rng(draw: st.DrawFn, base: dict[str, Any]) -> random.Random:
    """The seeded `Random` that picks and drives the mutators of one example.

    hypothesis draws 0 far more often than uniformly (its integers, `randoms()`, and often a
    whole zeroed example), which would pin every choice to the first option. Mixing drawn bits
    with a hash of the base body spreads the choices evenly and stays reproducible.
    """
    bits = draw(st.randoms(use_true_random=False)).getrandbits(32)
    return random.Random(bits ^ zlib.crc32(json.dumps(base, sort_keys=True).encode()))


def pick_mutators(rng: random.Random, endpoint: Endpoint) -> list[tuple[str, Mutator]]:
    """None (`UNMUTATED_SHARE`), `extra_fields` alone, or one or two weighted families."""
    roll = rng.random()
    if roll < UNMUTATED_SHARE:
        return []
    if roll < UNMUTATED_SHARE + EXTRA_FIELDS_ONLY_SHARE:
        return [("extra_fields", mutate_extra_fields)]
    names = [name for name, (_, _, eps) in MUTATORS.items() if endpoint in eps]
    weights = [MUTATORS[name][1] for name in names]
    count = 2 if rng.random() < SECOND_MUTATOR_SHARE else 1
    return [(name, MUTATORS[name][0]) for name in rng.choices(names, weights, k=count)]


@st.composite
def fuzz_examples(
    draw: st.DrawFn,
    models: Sequence[str],
    endpoints: Sequence[Endpoint] = ("chat", "chat", "chat", "completions"),
) -> FuzzExample:
    """One example: a base body, usually mutated, serialized, and classified locally.

    Args:
        models: Served model ids (base bodies name one of them or none).
        endpoints: Endpoints to draw from (repeat one to weight it).
    """
    endpoint: Endpoint = draw(st.sampled_from(list(endpoints)))
    base = draw(base_bodies(endpoint, models))
    body: dict[str, Any] | bytes = copy.deepcopy(base)
    names: list[str] = []
    rng = mutation_rng(draw, base)
    for name, mutator in pick_mutators(rng, endpoint):
        if isinstance(body, bytes):
            break  # raw bodies are final
        body = mutator(rng, body, endpoint)
        names.append(name)
    raw = _serialize(body)
    invalid, reason, request = local_verdict(endpoint, raw, models)
    if request is not None and not _cheap(request):
        if isinstance(body, dict):  # a mutator unset or enlarged `max_tokens`: keep it cheap
            body.pop("max_completion_tokens", None)
            body["max_tokens"] = CHEAP_MAX_TOKENS
            raw = _serialize(body)
        else:
            raw, names = _serialize(base), []
    return make_example(endpoint, raw, models, tuple(names))


def make_example(
    endpoint: Endpoint,
    body: dict[str, Any] | bytes,
    models: Sequence[str],
    mutators: tuple[str, ...] = (),
) -> FuzzExample:
    """An example from a given body (e.g. a regression found by fuzzing), classified locally."""
    raw = _serialize(body)
    invalid, reason, _ = local_verdict(endpoint, raw, models)
    return FuzzExample(endpoint, raw, mutators, invalid, reason)


def valid_request(model: str, max_tokens: int = 2) -> dict[str, Any]:
    """The probe request that must be served after each example."""
    return {
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": max_tokens,
        "model": model,
    }
