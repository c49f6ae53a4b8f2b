"""The request body before parsing: size, nesting depth (no recursion), and JSON the parser
refuses, each a 4xx OpenAI error."""

from __future__ import annotations

import pytest

from configs.request_limits import RequestLimits
from deployments.protocol.errors import OpenAIError
from deployments.protocol.limits import json_depth_ok, parse_body

LIMITS = RequestLimits(max_body_bytes=1 << 20, max_json_depth=8)


@pytest.mark.parametrize(
    ("body", "ok"),
    [
        (b'{"a": [[[]]]}', True),
        (b"[" * 9 + b"]" * 9, False),
        (b'{"a": "[[[[[[[[[[[[[[[[[[[[[[["}', True),  # brackets inside a string do not nest
        (b'{"a": "\\"[[[[[[[[[[[[[[[[[[[["}', True),  # nor after an escaped quote
        (b"[" * 200_000, False),
    ],
)
def test_depth_is_scanned_without_recursion(body: bytes, ok: bool) -> None:
    assert json_depth_ok(body, LIMITS.max_json_depth) is ok


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"x" * ((1 << 20) + 1), 413, "request_too_large"),
        (b"[" * 50 + b"]" * 50, 400, "nesting_too_deep"),
        (b'{"max_tokens": ' + b"9" * 5000 + b"}", 400, "invalid_json"),  # over 4,300 digits
        (b"\xff\xfe", 400, "invalid_json"),
        (b"{", 400, "invalid_json"),
    ],
    ids=["too-large", "too-deep", "huge-integer", "not-utf8", "truncated"],
)
def test_bad_bodies_are_4xx(body: bytes, status: int, code: str) -> None:
    with pytest.raises(OpenAIError) as info:
        parse_body(body, LIMITS)
    assert (info.value.status_code, info.value.code) == (status, code)


def test_grammar_errors_reach_the_client_without_compiler_internals(tokenizer: object) -> None:
    from deployments.prompting.structured_output import GrammarFactory

    grammars = GrammarFactory(tokenizer, 49152)
    for schema in (
        {"type": "object", "properties": {"x": {"$ref": "#/nope"}}},
        {"type": "integer", "minimum": 1e308, "maximum": 1e308},
    ):
        with pytest.raises(OpenAIError) as info:
            grammars.constraint(schema, "response_format")
        message = str(info.value)
        assert ".cc:" not in message and "Check failed" not in message, message
        assert info.value.param == "response_format"
