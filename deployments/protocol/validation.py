"""Request parsing with OpenAI-style errors: the one place a request body becomes a typed model."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from configs.request_limits import RequestLimits
from deployments.protocol.errors import OpenAIError
from deployments.protocol.tools import LIMIT_ERROR, TYPE_TAG_ERROR

M = TypeVar("M", bound=BaseModel)

# pydantic puts union members and validator wrappers in an error's `loc`
# (`str`, `list[...]`, `literal['a','b']`, `NamedToolChoice`, `function-after[...]`): they are
# not request fields, so `param` leaves them out.
_NOT_FIELDS = frozenset({"str", "int", "float", "bool", "dict", "list", "none"})


def _is_field(part: str | int) -> bool:
    if isinstance(part, int):
        return True
    return not (part in _NOT_FIELDS or part[:1].isupper() or "[" in part or "(" in part)


def error_param(loc: tuple[str | int, ...]) -> str:
    """A pydantic error location as an OpenAI `param`, e.g. `messages[2].tool_calls[0].id`."""
    out = ""
    for part in loc:
        if not _is_field(part):
            continue
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def _first_error(exc: ValidationError) -> tuple[str, str, str | None]:
    # the deepest location is the most specific: in a union it is the member that was meant
    errors = exc.errors(include_url=False, include_input=False)
    first = max(errors, key=lambda e: len([p for p in e["loc"] if _is_field(p)]))
    param = error_param(first["loc"])
    if first["type"] == TYPE_TAG_ERROR:  # a union discriminated on `type` (tools.by_type)
        param += ".type"
    return param, first["msg"], LIMIT_ERROR if first["type"] == LIMIT_ERROR else None


def parse_request(
    model: type[M], body: M | dict[str, Any] | Any, limits: RequestLimits | None = None
) -> M:
    """Validate a request body against its protocol model (a model instance passes as is).

    Args:
        model: The request model.
        body: The decoded JSON body, or an already validated model.
        limits: Counts and schema sizes to enforce while validating (the router's); None
            enforces none.

    Raises:
        OpenAIError: 400 naming the first bad field (e.g. `messages[1].tool_calls[0].id`) and
            what is wrong with it; code `limit_exceeded` when over one of `limits`.
    """
    if isinstance(body, model):
        return body
    if not isinstance(body, dict):
        raise OpenAIError("the request body must be a JSON object", param=None)
    try:
        return model.model_validate(body, context={"limits": limits})
    except ValidationError as exc:
        param, msg, code = _first_error(exc)
        more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
        raise OpenAIError(
            f"invalid value for '{param}': {msg}{more}", param=param or None, code=code
        ) from None


def wants_stream(body: BaseModel | dict[str, Any] | Any) -> bool:
    """Whether a request asks for a stream: its validated `stream` field or, for a body that
    failed validation, a literal `"stream": true` (so its error is delivered the same way)."""
    if isinstance(body, BaseModel):
        return bool(getattr(body, "stream", False))
    return isinstance(body, dict) and body.get("stream") is True
