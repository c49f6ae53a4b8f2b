"""Bounded work per request, before it is parsed: the body's size and nesting depth
(`configs.request_limits.RequestLimits`; counts and schema sizes are checked while the request
is validated, see `deployments.protocol.validation.parse_request`)."""

from __future__ import annotations

import json
import re

from configs.request_limits import RequestLimits
from deployments.protocol.errors import OpenAIError

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
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an int over 4,300 digits
        raise OpenAIError(
            f"the request body is not valid JSON: {exc}", code="invalid_json"
        ) from None
