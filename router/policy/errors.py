"""Errors raised while routing a request; each maps to one OpenAI error status.

The mapping to HTTP happens in exactly one place (the router's error handler); these classes only
carry what it needs: the message and the offending request field (`param`).
"""

from __future__ import annotations


class PolicyError(ValueError):
    """Base class: a request the policy cannot route.

    Attributes:
        param: The request field the client should change (OpenAI error body's `param`), e.g.
            `"model"`, `"max_tokens"`, `"tools"`; `None` when no single field is at fault.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class UnknownModel(PolicyError):
    """The request's `model` is neither a served model id nor an alias (HTTP 404)."""


class NoModelCanServe(PolicyError):
    """Every candidate lacks a capability the request needs (HTTP 400).

    Attributes:
        rejected: Model id → why it cannot serve this request, in preference order.
    """

    def __init__(self, message: str, param: str | None, rejected: dict[str, str]) -> None:
        super().__init__(message, param)
        self.rejected = rejected


class NoHealthyModel(RuntimeError):
    """Some model could serve the request, but none of those is healthy (HTTP 503).

    A server-side condition, so deliberately not a `ValueError`: the client did nothing wrong.

    Attributes:
        param: Always `"model"`, for symmetry with `PolicyError`.
        rejected: Model id → why it was dropped, in preference order.
    """

    def __init__(self, message: str, rejected: dict[str, str]) -> None:
        super().__init__(message)
        self.param = "model"
        self.rejected = rejected
