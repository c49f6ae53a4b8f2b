"""`sampling_params`: the replica's one exact context check and the request -> engine mapping."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from deployments.prompting.engine_inputs import sampling_params
from deployments.protocol.errors import OpenAIError
from deployments.protocol.requests import ChatCompletionRequest, CompletionRequest

MAX_LEN = 100
VOCAB = 1000


def chat(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], **fields)


def completion(**fields: Any) -> CompletionRequest:
    return CompletionRequest(prompt="hi", **fields)


def refusal(request: ChatCompletionRequest | CompletionRequest, prompt_len: int) -> OpenAIError:
    with pytest.raises(OpenAIError) as info:
        sampling_params(request, prompt_len, MAX_LEN, VOCAB)
    assert info.value.status_code == 400
    return info.value


@pytest.mark.parametrize(("request_", "param"), [(chat(), "messages"), (completion(), "prompt")])
def test_a_prompt_that_fills_the_context_is_refused(request_, param) -> None:
    err = refusal(request_, MAX_LEN)
    assert (err.param, err.code) == (param, "context_length_exceeded")
    assert str(err) == (
        "this model's maximum context length is 100 tokens, but the prompt has 100 tokens: "
        "shorten the prompt"
    )


@pytest.mark.parametrize(
    ("request_", "param"),
    [
        (chat(max_tokens=41), "max_tokens"),
        (chat(max_completion_tokens=41), "max_completion_tokens"),
        (completion(max_tokens=41), "max_tokens"),
    ],
)
def test_an_output_limit_past_the_context_names_the_field_and_the_room(request_, param) -> None:
    err = refusal(request_, 60)
    assert (err.param, err.code) == (param, "context_length_exceeded")
    assert f"{param}=41 (101 in all): lower {param} to at most 40" in str(err)


def test_the_output_limit_may_fill_the_context_exactly() -> None:
    assert sampling_params(chat(max_tokens=40), 60, MAX_LEN, VOCAB).max_tokens == 40


def test_without_a_limit_the_output_gets_the_rest_of_the_context() -> None:
    params = sampling_params(completion(), 60, MAX_LEN, VOCAB)
    assert params.max_tokens == 40
    assert (params.temperature, params.top_p, params.top_k) == (1.0, 1.0, 0)
    assert (params.seed, params.logprobs, params.prompt_logprobs, params.lora) == (
        None,
        None,
        None,
        None,
    )


def test_a_logit_bias_outside_the_vocabulary_is_refused() -> None:
    err = refusal(chat(logit_bias={"5": 1.0, "1000": -100.0}), 10)
    assert err.param == "logit_bias"
    assert str(err) == "logit_bias token id 1000 is outside the vocabulary [0, 1000)"


def test_fields_reach_the_engine_parameters() -> None:
    request = chat(
        temperature=0.5,
        top_p=0.9,
        top_k=20,
        seed=41,
        stop_token_ids=[7, 8],
        ignore_eos=True,
        logit_bias={"5": 2.0},
        presence_penalty=0.25,
        frequency_penalty=-0.5,
        logprobs=True,
        top_logprobs=3,
    )
    params = sampling_params(request, 10, MAX_LEN, VOCAB, choice_index=2, lora="sql")
    assert (params.temperature, params.top_p, params.top_k) == (0.5, 0.9, 20)
    assert params.seed == 43, "choice i of a seeded request is seeded with seed + i"
    assert (params.stop_token_ids, params.ignore_eos) == ((7, 8), True)
    assert params.logit_bias == {5: 2.0}
    assert (params.presence_penalty, params.frequency_penalty) == (0.25, -0.5)
    assert (params.logprobs, params.prompt_logprobs, params.lora) == (3, None, "sql")


@pytest.mark.parametrize(
    ("request_", "logprobs", "prompt_logprobs"),
    [
        (chat(logprobs=False, top_logprobs=3), None, None),
        (chat(logprobs=True), 0, None),
        (completion(logprobs=2), 2, None),
        (completion(logprobs=2, echo=True), 2, 2),
        (completion(echo=True), None, None),
    ],
)
def test_logprobs_and_echoed_prompt_logprobs(request_, logprobs, prompt_logprobs) -> None:
    params = sampling_params(request_, 10, MAX_LEN, VOCAB)
    assert (params.logprobs, params.prompt_logprobs) == (logprobs, prompt_logprobs)


@pytest.mark.parametrize("make", [chat, completion])
def test_priority_reaches_the_engine_parameters(make) -> None:
    assert sampling_params(make(), 10, MAX_LEN, VOCAB).priority == 0, "vLLM's default"
    assert sampling_params(make(priority=-3), 10, MAX_LEN, VOCAB).priority == -3


@pytest.mark.parametrize("priority", [-(2**31) - 1, 2**31])
def test_a_priority_outside_int32_is_refused(priority: int) -> None:
    with pytest.raises(ValidationError, match="priority"):
        chat(priority=priority)
