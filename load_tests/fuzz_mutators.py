"""Mutators that turn a valid-ish request body into a hostile or invalid one.

A mutator takes a seeded `random.Random` (see `fuzz_requests.mutation_rng`), a body (a dict it
may change in place) and the endpoint, and returns the new body: a dict, or final `bytes` when
the body cannot be built as a Python object first (nesting deeper than `json` recurses, `NaN`
literals, malformed JSON, raw lone surrogates). `MUTATORS` lists each family with its weight
and the endpoints it applies to. Hostile strings, nesting and sizes live in
`fuzz_hostile_mutators`, the chat-only families in `fuzz_chat_mutators` (image and audio parts
in `fuzz_media_mutators`), the Messages and
Responses ones in `fuzz_agent_mutators`, the building blocks in `fuzz_bodies`.
"""

from __future__ import annotations

import json
import random
from typing import Any

from load_tests.fuzz_agent_mutators import AGENT_MUTATORS
from load_tests.fuzz_bodies import (
    FIELDS,
    TOOL,
    TURNS,
    Body,
    Mutator,
    field_path,
    get_at,
    json_kind,
    pick,
    set_at,
    with_raw,
)
from load_tests.fuzz_chat_mutators import (
    mutate_bad_content_part,
    mutate_bad_role,
    mutate_malformed_history,
    mutate_malformed_response_format,
    mutate_malformed_tool_choice,
    mutate_malformed_tools,
)
from load_tests.fuzz_hostile_mutators import (
    mutate_deep_nesting,
    mutate_hostile_strings,
    mutate_huge_sizes,
)
from load_tests.fuzz_media_mutators import mutate_media_parts

WRONG_VALUES: dict[str, list[Any]] = {
    "str": [{"k": "v"}, [1, "a"], 1.5, True, -1, [], {}],
    "int": [{"k": "v"}, "x", [1], "1.5", 1.5, "", [], {}],
    "float": [{"k": "v"}, "x", [1.0], "", [], {}, "NaN"],
    "bool": [{"k": "v"}, "x", [True], 2, 0.5, "maybe", []],
    "list": [{"k": "v"}, 1, 1.5, True, [[["x"]]], [{"k": 1}], [None]],
    "dict": [[1, "a"], "x", 1, 1.5, True, [], [{}]],
    "none": [{"k": "v"}, [1, "a"], [[]], 1.5, "x", True, {}],
}
"""Values of another JSON type than the current one's (never `null`: it means the default)."""


def mutate_wrong_type(rng: random.Random, body: Body, endpoint: str) -> Body:
    """Any field (top level or nested) gets a value of another JSON type."""
    path = field_path(rng, body, endpoint)
    try:
        current = get_at(body, path)
    except (KeyError, IndexError, TypeError):
        current = None
    set_at(body, path, pick(rng, WRONG_VALUES[json_kind(current)]))
    return body


_BIG = [2**63, 2**64, 10**30, -(2**63) - 1]
# fmt: off
OUT_OF_RANGE: dict[str, list[Any]] = {
    "max_tokens": [0, -1, 1.5, 2.7, "NaN", "1e999", "-1", 1e308, *_BIG],
    "max_completion_tokens": [0, -5, 0.5, "inf", *_BIG],
    "temperature": [-0.01, 2.0001, 1e308, -1e308, "NaN", "inf", "-inf", 10**400],
    "top_p": [-0.5, 1.5, 1e300, "nan"],
    "top_k": [-2, 0.5, *_BIG],
    "n": [0, -1, 17, 10**9, 1.5, "2"],
    "top_logprobs": [-1, 21, 10**6, 0.5],
    "logprobs": [-1, 21, 2**40, 0.5, "true"],
    "presence_penalty": [-2.5, 2.5, 1e300, "NaN"],
    "frequency_penalty": [-2.0001, 9.0, -1e300],
    "seed": [2**64, -(2**63) - 1, 10**40, -1, 1.5, "NaN", 2**63 - 1],
    "best_of": [0, -1, 10**9, 1.5],
    "logit_bias": [{"x": 1}, {"1": 101}, {"1": -1e9}, {"-1": 1}, {"99999999999": 1},
                   {"1": "NaN"}, {str(2**70): 1}, {"1.5": 1}, {"": 0}],
    "stop_token_ids": [[-1], [2**63], [10**9], [1.5], [2**70]],
    "stop": [["s"] * 17, [""] * 40],
    "stop_sequences": [["s"] * 17, [""] * 40, "\n", [1]],
    "max_output_tokens": [0, -1, 1.5, "1", *_BIG],
}
# fmt: on
_RAW_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "-0", "1e1", "00", "1.", ".5"]


def mutate_out_of_range(rng: random.Random, body: Body, endpoint: str) -> Body | bytes:
    """A number out of its range, a float where an int goes, or a non-finite literal."""
    field = pick(rng, [f for f in OUT_OF_RANGE if f in FIELDS[endpoint]])
    if rng.randint(0, 3) == 0:
        return with_raw(body, (field,), pick(rng, _RAW_NUMBERS))
    body[field] = pick(rng, OUT_OF_RANGE[field])
    return body


_MISSING_MESSAGES: list[Any] = [
    "messages",
    "model",
    "max_tokens",
    None,
    [],
    [{"content": "Hi"}],
    [{"role": "user"}],
    [{"role": "user", "content": [{"type": "text"}]}],
    [{"role": "user", "content": [{"type": "image", "source": {"type": "base64"}}]}],
    [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}],
    [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}],
]
_MISSING_RESPONSES: list[Any] = [
    "input",
    None,
    [],
    "",
    [{"content": "Hi"}],
    [{"role": "user"}],
    [{"type": "message"}],
    [{"type": "function_call", "name": "f", "arguments": "{}"}],
    [{"type": "function_call_output", "output": "x"}],
    [{"type": "function_call_output"}],
    [{"role": "user", "content": [{"type": "input_text"}]}],
]
"""A top-level field to drop, or a conversation missing something (`messages` / `input`)."""


def mutate_missing_required(rng: random.Random, body: Body, endpoint: str) -> Body:
    """The prompt or conversation missing, null or empty, or a message, part, block or item
    missing a key; the model or output limit missing where the API requires it."""
    if endpoint == "completions":
        variant = pick(rng, ["drop", "drop", None, [[]], [None], {"text": "hi"}, [], ""])
        if variant == "drop":
            body.pop("prompt", None)
        else:
            body["prompt"] = variant
        return body
    if endpoint != "chat":
        variant = pick(rng, _MISSING_RESPONSES if endpoint == "responses" else _MISSING_MESSAGES)
        if isinstance(variant, str) and variant in FIELDS[endpoint]:
            body.pop(variant, None)
        else:
            body[TURNS[endpoint]] = variant
        return body
    msgs = body["messages"] = [{"role": "user", "content": "Hi"}]
    variant = rng.randint(0, 6)
    if variant == 0:
        body.pop("messages")
    elif variant == 1:
        body["messages"] = None
    elif variant == 2:
        body["messages"] = []
    elif variant == 3:
        msgs[0] = {"content": "Hi"}
    elif variant == 4:
        msgs[0]["content"] = [{"type": "text"}]
    elif variant == 5:
        msgs.append({"role": "assistant", "tool_calls": [{"type": "function"}]})
    else:
        body["tools"] = [{"type": "function"}]
    return body


# fmt: off
EXTRA_FIELDS: list[tuple[str, Any]] = [
    ("foo", 1), ("x-unknown", {"nested": [1, 2]}), ("", None), ("functions", [TOOL]),
    ("guided_json", {"type": "bogus"}), ("metadata", {"k": "v"}), ("store", True),
    ("reasoning_effort", "high"), ("modalities", ["text", "audio"]), ("prediction", {}),
]
# fmt: on


def mutate_invalid_json(rng: random.Random, body: Body, endpoint: str) -> bytes:
    """Not a JSON object: empty, truncated, trailing garbage, bad bytes, another JSON type."""
    text = json.dumps(body)
    # fmt: off
    return pick(rng, [
        b"", b"{", b"}", text[: len(text) // 2].encode(), (text + "}").encode(),
        (text + " x").encode(), b"\xff\xfe\xfd", b"null", b"[]", b'"string"', b"1", b"true",
        text.encode("utf-16"), b"\xef\xbb\xbf" + text.encode(), text.replace('"', "'").encode(),
        text.encode() + b"\x00", b'{"messages": [}', b'{"a":1,}', b"[" + text.encode() + b"]",
    ])
    # fmt: on


def mutate_extra_fields(rng: random.Random, body: Body, endpoint: str) -> Body:
    """Unknown fields at the top level or inside messages, input items or tools (ignored)."""
    key, value = pick(rng, EXTRA_FIELDS)
    targets = [body]
    for field in ("messages", "tools", "input"):
        items = body.get(field)
        targets += [m for m in items if isinstance(m, dict)] if isinstance(items, list) else []
    rng.choice(targets)[key] = value
    return body


_ANY = ("chat", "completions", "messages", "count_tokens", "responses")
MUTATORS: dict[str, tuple[Mutator, int, tuple[str, ...]]] = {
    "missing_required": (mutate_missing_required, 3, _ANY),
    "wrong_type": (mutate_wrong_type, 7, _ANY),
    "out_of_range": (mutate_out_of_range, 4, tuple(e for e in _ANY if e != "count_tokens")),
    "hostile_strings": (mutate_hostile_strings, 2, _ANY),
    "deep_nesting": (mutate_deep_nesting, 4, _ANY),
    "huge_sizes": (mutate_huge_sizes, 1, _ANY),
    "invalid_json": (mutate_invalid_json, 3, _ANY),
    "malformed_tools": (mutate_malformed_tools, 3, ("chat",)),
    "malformed_tool_choice": (mutate_malformed_tool_choice, 3, ("chat",)),
    "malformed_response_format": (mutate_malformed_response_format, 2, ("chat",)),
    "malformed_history": (mutate_malformed_history, 2, ("chat",)),
    "bad_role": (mutate_bad_role, 3, ("chat",)),
    "bad_content_part": (mutate_bad_content_part, 2, ("chat",)),
    "media_parts": (mutate_media_parts, 3, ("chat",)),
    **AGENT_MUTATORS,
}
"""Family name -> (mutator, weight, endpoints)."""
