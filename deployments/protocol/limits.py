"""Bounded work per request: the body's size and nesting depth, and the counts and schema sizes
of a parsed request (`configs.request_limits.RequestLimits`)."""

from __future__ import annotations

import json
import re

from configs.request_limits import RequestLimits
from deployments.protocol.errors import OpenAIError
from deployments.protocol.requests import ChatCompletionRequest, CompletionRequest
from deployments.protocol.tools import response_format_schema

# A JSON string (escapes included) or one bracket; strings are matched whole so that brackets
# inside them do not count. RFC 8259 section 7 string grammar.
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_OPEN = frozenset(b"[{")


def json_depth_ok(body: bytes, max_depth: int) -> bool:
    """Whether no array or object in `body` nests deeper than `max_depth`.

    Iterative (a regex scan, no recursion), so a body of 100,000 `[` costs one linear pass;
    `json.loads` would recurse once per level. Malformed JSON is left to the parser.
    """
    depth = 0
    for match in _TOKENS.finditer(body):
        char = match.group()
        if len(char) != 1:
            continue
        if char[0] in _OPEN:
            depth += 1
            if depth > max_depth:
                return False
        else:
            depth -= 1
    return True


def check_body_size(size: int, limits: RequestLimits) -> None:
    """Check a body's size in bytes (its `Content-Length` before reading it, then its length).

    Raises:
        OpenAIError: 413 `request_too_large` over `max_body_bytes`.
    """
    if size > limits.max_body_bytes:
        raise OpenAIError(
            f"the request body has {size} bytes, over the limit of "
            f"{limits.max_body_bytes} (request_limits.max_body_bytes)",
            status_code=413,
            code="request_too_large",
        )


def parse_body(body: bytes, limits: RequestLimits) -> object:
    """Decode an HTTP request body within the limits.

    Raises:
        OpenAIError: 413 `request_too_large` over `max_body_bytes`; 400 `nesting_too_deep` past
            `max_json_depth`; 400 `invalid_json` for a body that is not UTF-8 JSON.
    """
    check_body_size(len(body), limits)
    if not json_depth_ok(body, limits.max_json_depth):
        raise OpenAIError(
            f"the request body nests arrays/objects deeper than {limits.max_json_depth} levels "
            "(request_limits.max_json_depth)",
            code="nesting_too_deep",
        )
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise OpenAIError(
            f"the request body is not valid JSON: {exc}", code="invalid_json"
        ) from None


def _over(what: str, count: int, limit: int, field: str, param: str) -> OpenAIError:
    return OpenAIError(
        f"{what} has {count}, over the limit of {limit} (request_limits.{field})",
        param=param,
        code="limit_exceeded",
    )


def check_limits(request: ChatCompletionRequest | CompletionRequest, limits: RequestLimits) -> None:
    """Check a parsed request's sizes.

    Raises:
        OpenAIError: 400 `limit_exceeded` naming the field and the limit.
    """
    if isinstance(request, CompletionRequest):
        prompt = request.prompt
        if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
            if len(prompt) > limits.max_prompt_items:
                raise _over(
                    "prompt", len(prompt), limits.max_prompt_items, "max_prompt_items", "prompt"
                )
        return
    if len(request.messages) > limits.max_messages:
        raise _over(
            "messages", len(request.messages), limits.max_messages, "max_messages", "messages"
        )
    tools = request.tools or []
    if len(tools) > limits.max_tools:
        raise _over("tools", len(tools), limits.max_tools, "max_tools", "tools")
    schemas = [
        (f"tools[{i}].function.parameters", t.function.parameters) for i, t in enumerate(tools)
    ]
    schemas.append(
        ("response_format.json_schema.schema", response_format_schema(request.response_format))
    )
    for param, schema in schemas:
        size = len(json.dumps(schema, separators=(",", ":"))) if schema is not None else 0
        if size > limits.max_schema_bytes:
            raise _over(
                f"{param} (bytes)", size, limits.max_schema_bytes, "max_schema_bytes", param
            )
