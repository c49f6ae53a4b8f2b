"""The fuzzer's bodies and local verdicts for Anthropic's Messages and OpenAI's Responses APIs:
hand-written bodies are valid, the verdict runs each edge's own translation, the mutators apply
to every endpoint they are registered for, and the drawn examples are mostly invalid and cheap."""

from __future__ import annotations

import copy
import json
import random
from collections import Counter
from typing import Any

import pytest

from load_tests.fuzz_agent_bodies import MESSAGES_BODIES, RESPONSES_BODIES
from load_tests.fuzz_agent_mutators import AGENT_MUTATORS
from load_tests.fuzz_checks import run_examples
from load_tests.fuzz_mutators import MUTATORS
from load_tests.fuzz_requests import (
    AGENT_ENDPOINTS,
    CHEAP_MAX_TOKENS,
    REJECTED_MAX_TOKENS,
    FuzzExample,
    classify,
    fuzz_examples,
    hand_written_examples,
    make_example,
)
from load_tests.fuzz_verdict import EDGE_FAILURE, Endpoint, local_verdict

MODELS = ["smollm2-fast", "smollm2-long"]
HI = [{"role": "user", "content": "Hi"}]


def with_limit(endpoint: Endpoint, body: dict[str, Any]) -> dict[str, Any]:
    """`body` naming a served model, with a cheap output limit where the endpoint has one."""
    out = {**copy.deepcopy(body), "model": MODELS[1]}
    if endpoint == "messages":
        out["max_tokens"] = 2
    elif endpoint == "responses":
        out["max_output_tokens"] = 2
    return out


def verdict(endpoint: Endpoint, body: dict[str, Any]) -> tuple[bool, str]:
    invalid, reason, _ = local_verdict(endpoint, json.dumps(body).encode(), MODELS)
    return invalid, reason


def test_hand_written_bodies_are_valid() -> None:
    examples = hand_written_examples(MODELS[1])
    assert len(examples) == 2 * len(MESSAGES_BODIES) + len(RESPONSES_BODIES)
    assert [(e.path, e.reason) for e in examples if e.expected_invalid] == []


@pytest.mark.parametrize(
    ("endpoint", "body", "says"),
    [
        (  # the edge's cross-field rule
            "messages",
            {"messages": HI, "thinking": {"type": "enabled", "budget_tokens": 1024}},
            "thinking.budget_tokens (1024) must be less than max_tokens",
        ),
        ("messages", {"messages": HI, "tool_choice": {"type": "any"}}, "needs tools"),
        (
            "messages",
            {"messages": [{"role": "user", "content": [{"type": "tool_use"}]}]},
            "messages[0].content[0]",
        ),
        (  # the local store is empty: a 404
            "responses",
            {"input": "Hi", "previous_response_id": "resp_1"},
            "response 'resp_1' was not found",
        ),
        ("responses", {"input": [{"type": "file_search"}]}, "input[0].type"),
        (
            "responses",
            {"input": "Hi", "tools": [{"type": "file_search"}]},
            "has type 'file_search'",
        ),
        (  # valid for the edge; the chat validation (with the request limits) refuses it
            "responses",
            {"input": "Hi", "tools": [{"type": "function", "name": f"f{i}"} for i in range(257)]},
            "request_limits.max_tools",
        ),
    ],
)
def test_the_verdict_runs_the_edge_then_the_chat_validation(
    endpoint: Endpoint, body: dict[str, Any], says: str
) -> None:
    invalid, reason = verdict(endpoint, with_limit(endpoint, body))
    assert invalid and says in reason and not reason.startswith(EDGE_FAILURE), reason


def test_count_tokens_needs_no_output_limit_and_an_unknown_model_is_refused() -> None:
    assert verdict("count_tokens", {"model": MODELS[0], "messages": HI}) == (False, "")
    invalid, reason = verdict("messages", {"model": "gpt-9", "max_tokens": 1, "messages": HI})
    assert invalid and reason == "unknown model 'gpt-9'"


def test_a_server_tool_type_with_a_lone_surrogate_is_a_400_not_a_failure() -> None:
    """Found by fuzzing: pydantic could not render the error naming the type (a 500)."""
    tool = {"type": "\ud800", "name": "f", "input_schema": {"type": "object"}}
    invalid, reason = verdict("messages", with_limit("messages", {"messages": HI, "tools": [tool]}))
    assert invalid and "tool type '\\ud800' is an Anthropic server tool" in reason, reason


@pytest.mark.parametrize(
    ("name", "endpoints"), [(name, eps) for name, (_, _, eps) in MUTATORS.items()]
)
def test_every_mutator_applies_to_each_of_its_endpoints(
    name: str, endpoints: tuple[Endpoint, ...]
) -> None:
    mutator = MUTATORS[name][0]
    for endpoint in endpoints:
        bodies = {
            "messages": MESSAGES_BODIES,
            "count_tokens": MESSAGES_BODIES,
            "responses": RESPONSES_BODIES,
        }.get(endpoint, [{"messages": HI, "prompt": "Hi"}])
        for seed in range(12):
            rng = random.Random(seed)
            body = with_limit(endpoint, rng.choice(bodies))
            out = mutator(rng, body, endpoint)
            raw = out if isinstance(out, bytes) else json.dumps(out).encode()
            example = make_example(endpoint, raw, MODELS, (name,))
            assert not example.reason.startswith(EDGE_FAILURE), (endpoint, example.reason)


def test_agent_examples_are_mostly_invalid_cheap_and_cover_every_family() -> None:
    examples: list[FuzzExample] = []
    run_examples(fuzz_examples(MODELS, AGENT_ENDPOINTS), examples.append, 400)
    share = sum(e.expected_invalid for e in examples) / len(examples)
    assert share >= 0.8, f"invalid share {share:.1%}"
    assert {e.endpoint for e in examples} == set(AGENT_ENDPOINTS)
    assert set(AGENT_MUTATORS) <= set(Counter(classify(e) for e in examples))
    for example in examples:
        assert not example.reason.startswith(EDGE_FAILURE), example.reason
        if example.expected_invalid or example.endpoint == "count_tokens":
            continue
        _, _, request = local_verdict(example.endpoint, example.body, MODELS)
        limit = request.output_limit() if request is not None else None
        assert limit is not None and not CHEAP_MAX_TOKENS < limit < REJECTED_MAX_TOKENS
