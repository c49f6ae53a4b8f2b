"""Requests -> engine inputs: legacy completion prompts and sampling parameters."""

from __future__ import annotations

from typing import Any

from deployments.protocol.errors import OpenAIError
from deployments.protocol.requests import ChatCompletionRequest, CompletionRequest
from engine.constraints import TokenConstraint
from engine.sampling_params import SamplingParams


def encode_text(
    tokenizer: Any, text: str, param: str, add_special_tokens: bool = False
) -> list[int]:
    """Token ids of `text`; with `add_special_tokens`, the tokenizer's own (such as BOS) too.

    Raises:
        OpenAIError: 400 naming `param` when the text is not valid Unicode (JSON's `\\ud800`
            escapes decode to lone UTF-16 surrogates, which no tokenizer can encode).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = ord(text[exc.start])
        raise OpenAIError(
            f"the text contains a lone UTF-16 surrogate (U+{bad:04X}), which is not a Unicode "
            "character: send the pair, or the character itself",
            param=param,
        ) from None
    return list(tokenizer.encode(text, add_special_tokens=add_special_tokens))


def check_token_ids(ids: list[int], vocab_size: int, param: str) -> None:
    """Check that every id is a row of the model's vocabulary.

    Raises:
        OpenAIError: 400 naming `param` and the first id outside `[0, vocab_size)`.
    """
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise OpenAIError(
            f"{param} token id {bad[0]} is outside the vocabulary [0, {vocab_size})", param=param
        )


def completion_prompts(
    tokenizer: Any, request: CompletionRequest, vocab_size: int
) -> list[list[int]]:
    """The legacy `prompt` field as one token list per prompt.

    Raises:
        OpenAIError: 400 for an empty prompt, or a token id outside `[0, vocab_size)`.
    """
    p = request.prompt
    if isinstance(p, str):
        prompts: list[str | list[int]] = [p]
    elif p and all(isinstance(x, int) for x in p):
        prompts = [list(p)]  # type: ignore[arg-type]
    else:
        prompts = list(p)  # type: ignore[arg-type]
    if not prompts:
        raise OpenAIError("prompt must not be empty", param="prompt")
    out = []
    for item in prompts:
        ids = encode_text(tokenizer, item, "prompt") if isinstance(item, str) else item
        if not ids:
            raise OpenAIError("prompt must not be empty", param="prompt")
        check_token_ids(ids, vocab_size, "prompt")
        out.append(list(ids))
    return out


def sampling_params(
    request: ChatCompletionRequest | CompletionRequest,
    prompt_len: int,
    max_model_len: int,
    vocab_size: int,
    choice_index: int = 0,
    constraint: TokenConstraint | None = None,
    lora: str | None = None,
) -> SamplingParams:
    """Engine sampling parameters for one choice of a request: the one exact context-length
    check (the router's estimate only routes).

    `lora`: the adapter the request runs under (None: the base model). `max_tokens` defaults
    to the rest of the context (vLLM behaviour); a seeded request with
    `n > 1` seeds choice `i` with `seed + i` so the choices differ but stay reproducible.

    Raises:
        OpenAIError: 400 naming the field for a prompt that fills the context, a `max_tokens`
            beyond it, or a `logit_bias` token outside the vocabulary.
    """
    limit = request.output_limit()
    param = (
        "max_completion_tokens" if getattr(request, "max_completion_tokens", None) else "max_tokens"
    )
    if prompt_len >= max_model_len:
        raise OpenAIError(
            f"this model's maximum context length is {max_model_len} tokens, but the prompt "
            f"has {prompt_len} tokens: shorten the prompt",
            param="messages" if isinstance(request, ChatCompletionRequest) else "prompt",
            code="context_length_exceeded",
        )
    if limit is None:
        limit = max_model_len - prompt_len
    elif prompt_len + limit > max_model_len:
        raise OpenAIError(
            f"this model's maximum context length is {max_model_len} tokens; the prompt has "
            f"{prompt_len} tokens and {param}={limit} ({prompt_len + limit} in all): lower "
            f"{param} to at most {max_model_len - prompt_len}",
            param=param,
            code="context_length_exceeded",
        )
    bias = {int(key): value for key, value in (request.logit_bias or {}).items()}
    check_token_ids(list(bias), vocab_size, "logit_bias")
    if isinstance(request, ChatCompletionRequest):
        logprobs = (request.top_logprobs or 0) if request.logprobs else None
        prompt_lp = None
    else:
        logprobs = request.logprobs
        prompt_lp = request.logprobs if request.echo and request.logprobs is not None else None
    seed = None if request.seed is None else request.seed + choice_index
    return SamplingParams(
        max_tokens=limit,
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        top_k=request.top_k or 0,
        seed=seed,
        stop_token_ids=tuple(request.stop_token_ids or ()),
        ignore_eos=bool(request.ignore_eos),
        logprobs=logprobs,
        prompt_logprobs=prompt_lp,
        logit_bias=bias,
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        constraint=constraint,
        lora=lora,
        priority=request.priority,
    )
