"""`POST /tokenize` and `POST /detokenize`: vLLM's names and bodies, so a user can see the
prompt a model sees.

Bodies follow vLLM's `TokenizeChatRequest` / `TokenizeCompletionRequest` / `DetokenizeRequest`
(`vllm/entrypoints/serve/tokenize/protocol.py`): a chat body (`messages`, with `tools`,
`tool_choice`, `chat_template_kwargs`, `reasoning_effort`) is rendered exactly as
`/v1/chat/completions` renders it; a `prompt` body is encoded as `/v1/completions` encodes it.
Both are subclasses of the chat and completion requests, so the router validates and routes
them by the same policy. `return_prompt: true` adds the rendered prompt text.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, model_validator

from deployments.protocol.requests import INT32_MAX, ChatCompletionRequest, CompletionRequest


class TokenizeChatRequest(ChatCompletionRequest):
    """`POST /tokenize` with `messages`: the chat prompt's token ids."""

    return_prompt: bool = False
    return_token_strs: bool = False


class TokenizeCompletionRequest(CompletionRequest):
    """`POST /tokenize` with `prompt` (one string): its token ids.

    `add_special_tokens` (vLLM's default is true) adds the tokenizer's BOS where it has one;
    false (what `/v1/completions` prefills here) encodes the text alone.
    """

    prompt: str
    add_special_tokens: bool = True
    return_prompt: bool = False
    return_token_strs: bool = False


class DetokenizeRequest(CompletionRequest):
    """`POST /detokenize`: `tokens` -> text (routed by the policy as a prompt of these ids).

    `prompt` is not read from the body: it is set to `tokens` once they are valid, so errors
    name `tokens[i]`, the field the client sent.
    """

    tokens: list[Annotated[int, Field(ge=0, le=INT32_MAX)]] = Field(min_length=1)
    prompt: list[int] = Field(default_factory=list)  # = tokens, for the router's features

    @model_validator(mode="before")
    @classmethod
    def _no_prompt(cls, data: Any) -> Any:
        if isinstance(data, dict) and "prompt" in data:
            data = {k: v for k, v in data.items() if k != "prompt"}
        return data

    @model_validator(mode="after")
    def _prompt_is_tokens(self) -> DetokenizeRequest:
        self.prompt = list(self.tokens)
        return self


def tokenize_schema(body: Any) -> type[TokenizeChatRequest] | type[TokenizeCompletionRequest]:
    """The request model for a `/tokenize` body: chat when it has `messages`."""
    if isinstance(body, dict) and "messages" in body:
        return TokenizeChatRequest
    return TokenizeCompletionRequest


class TokenizeResponse(BaseModel):
    """Answer of `POST /tokenize` (vLLM's fields, plus `prompt` with `return_prompt`).

    Attributes:
        count: number of tokens.
        max_model_len: the model's context length, in tokens.
        tokens: the token ids the engine would prefill.
        token_strs: each id's token string (with `return_token_strs`).
        prompt: the rendered prompt text (with `return_prompt`).
    """

    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None
    prompt: str | None = None


class DetokenizeResponse(BaseModel):
    """Answer of `POST /detokenize`: the text of the ids (special tokens kept)."""

    prompt: str
