"""`POST /tokenize` and `/detokenize`: request models and the prompt path of the handler."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest

from deployments.handlers.tokenize import TokenizeHandler
from deployments.protocol.errors import OpenAIError
from deployments.protocol.tokenize import DetokenizeRequest, TokenizeCompletionRequest
from deployments.protocol.validation import parse_request

T = TypeVar("T")


@pytest.mark.parametrize(
    ("tokens", "param", "fragment"),
    [
        ([1, "a"], "tokens[1]", "valid integer"),
        ([1.5], "tokens[0]", "fractional part"),
        ([-1], "tokens[0]", "greater than or equal to 0"),
        ([2**40], "tokens[0]", "less than or equal to 2147483647"),
        ([], "tokens", "at least 1 item"),
        ("12", "tokens", "valid list"),
    ],
)
def test_detokenize_errors_name_the_tokens(tokens: Any, param: str, fragment: str) -> None:
    """`prompt` mirrors `tokens` for the router; its errors used to be reported as `prompt[i]`
    (a field the client never sent) or, for a range error, with no field at all."""
    with pytest.raises(OpenAIError) as info:
        parse_request(DetokenizeRequest, {"model": "m", "tokens": tokens})
    assert info.value.status_code == 400 and info.value.param == param
    assert fragment in str(info.value)


def test_detokenize_prompt_is_the_tokens_whatever_the_body_says() -> None:
    body = {"model": "m", "tokens": [5, 6], "prompt": "ignored"}
    request = parse_request(DetokenizeRequest, body)
    assert request.tokens == request.prompt == [5, 6]


class _Tokenizer:
    """Counts encodes; a BOS of 1 with `add_special_tokens`."""

    def __init__(self) -> None:
        self.calls: list[bool] = []

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self.calls.append(add_special_tokens)
        return [1] * add_special_tokens + [ord(c) for c in text]


class _Preparer:
    """Runs work inline, recording that it went through the preparer."""

    def __init__(self, tokenizer: _Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.encodes_inside = 0

    async def run(self, fn: Callable[[], T]) -> T:
        before = len(self.tokenizer.calls)
        out = fn()
        self.encodes_inside += len(self.tokenizer.calls) - before
        return out


def _tokenize(body: dict[str, Any]) -> tuple[Any, _Tokenizer, _Preparer]:
    tokenizer = _Tokenizer()
    chat = SimpleNamespace(tokenizer=tokenizer, engine=SimpleNamespace(max_model_len=64))
    preparer = _Preparer(tokenizer)
    handler = TokenizeHandler(chat, preparer)  # type: ignore[arg-type]
    request = parse_request(TokenizeCompletionRequest, {"model": "m", **body})
    return asyncio.run(handler.tokenize(request)), tokenizer, preparer


@pytest.mark.parametrize(("special", "ids"), [(True, [1, 104, 105]), (False, [104, 105])])
def test_prompt_is_encoded_once_off_the_event_loop(special: bool, ids: list[int]) -> None:
    """The Unicode check used to tokenize the whole text a first time on the event loop."""
    response, tokenizer, preparer = _tokenize({"prompt": "hi", "add_special_tokens": special})
    assert response.tokens == ids and response.count == len(ids)
    assert tokenizer.calls == [special] and preparer.encodes_inside == 1


def test_prompt_with_a_lone_surrogate_is_a_400() -> None:
    with pytest.raises(OpenAIError) as info:
        _tokenize({"prompt": "a\ud800"})
    assert info.value.status_code == 400 and info.value.param == "prompt"
