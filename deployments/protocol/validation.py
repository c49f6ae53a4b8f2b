"""Request parsing with OpenAI-style errors."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from deployments.protocol.errors import OpenAIError

M = TypeVar("M", bound=BaseModel)


def parse_request(model: type[M], body: M | dict[str, Any]) -> M:
    """Validate a request body against its protocol model.

    Raises:
        OpenAIError: 400 naming the first bad field (dotted path) and what is wrong with it.
    """
    if isinstance(body, model):
        return body
    if not isinstance(body, dict):
        raise OpenAIError("the request body must be a JSON object", param=None)
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"] if not str(p).startswith("function-"))
        msg = first["msg"]
        more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
        raise OpenAIError(f"invalid value for '{loc}': {msg}{more}", param=loc or None) from None
