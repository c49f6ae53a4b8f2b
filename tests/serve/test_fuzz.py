"""Property-based fuzzing of the request path (`load_tests.fuzz_*`) against the shared app.

Every drawn body (mostly invalid: wrong types, out-of-range numbers, deep nesting, huge sizes,
hostile strings, malformed tools/tool_choice/response_format/histories; for Anthropic's Messages
and OpenAI's Responses APIs also blocks and items of the wrong type or without their call, bad
thinking configs, unknown `previous_response_id`s) must get no 5xx, on a 4xx the error object of
its API (Anthropic's on `/v1/messages*`, else OpenAI's), leave `/health` unchanged, and be
followed by a served request.
"""

from __future__ import annotations

import time
from collections import Counter

import httpx
import pytest
from serve_helpers import FAST, MODEL

from load_tests.fuzz_checks import LoadStreams, RequestPathChecker, Violation, run_examples
from load_tests.fuzz_mutators import MUTATORS
from load_tests.fuzz_requests import (
    AGENT_ENDPOINTS,
    OPENAI_ENDPOINTS,
    Endpoint,
    FuzzExample,
    classify,
    fuzz_examples,
    hand_written_examples,
    make_example,
)
from load_tests.fuzz_verdict import EDGE_FAILURE

MODELS = [FAST, MODEL]
AGENT_EXAMPLES = 32
"""Few: the Ray suite is the CI's critical path (each example is a request, a health check and
a probe)."""
HI = [{"role": "user", "content": "Hi"}]
SERVER_TOOL = {"type": "\ud800", "name": "f", "input_schema": {"type": "object"}}
FOUND = [  # bodies that got a 5xx, found by fuzzing
    pytest.param("chat", {"messages": HI, "max_tokens": 2, "top_k": 2**63}, id="top_k-2^63"),
    pytest.param(
        "completions",
        {"prompt": "0", "max_tokens": 2, "model": MODEL, "top_k": 10**30},
        id="top_k-1e30",
    ),
    pytest.param("chat", {"messages": HI, "max_tokens": 2, "seed": 2**64}, id="seed-2^64"),
    pytest.param("chat", {"messages": HI, "max_tokens": 2, "seed": -(2**63) - 1}, id="seed-neg"),
    pytest.param(
        "chat",
        {"messages": [{"role": "user", "content": "\ud800"}], "max_tokens": 2},
        id="lone-surrogate-content",
    ),
    pytest.param(
        "completions",
        {"prompt": ["\udc00\ud800"], "max_tokens": 2, "model": MODEL},
        id="lone-surrogate-prompt",
    ),
    pytest.param(  # pydantic could not render the edge's error message naming the type: 500
        "messages",
        {"model": MODEL, "max_tokens": 2, "messages": HI, "tools": [SERVER_TOOL]},
        id="anthropic-tool-type-surrogate",
    ),
    pytest.param(  # the Response echoes `metadata`, which UTF-8 JSON could not carry: 500
        "responses",
        {"model": FAST, "input": "Hi", "max_output_tokens": 2, "metadata": {"k": "\udfff"}},
        id="responses-metadata-surrogate",
    ),
    pytest.param(
        "responses",
        {"model": FAST, "input": "Hi", "max_output_tokens": 2, "user": "\ud800", "store": False},
        id="responses-user-surrogate",
    ),
]


def _report(violations: list[Violation], limit: int = 8) -> str:
    kinds = Counter(v.kind for v in violations)
    lines = [f"{len(violations)} violation(s) {dict(kinds)}:"]
    for v in violations[:limit]:
        lines.append(f"- {v.kind} status={v.status} family={v.family} {v.path}: {v.detail[:300]}")
        lines.append(f"  body: {v.body[:1200]}")
    return "\n".join(lines)


def test_strategy_is_mostly_invalid() -> None:
    """>= 80 % of the drawn bodies fail the router's own edge checks, none by raising anything
    but an OpenAI error (a 500 on the server); every family and every endpoint is drawn."""
    examples: list[FuzzExample] = []
    run_examples(fuzz_examples(MODELS), examples.append, 1000)
    share = sum(e.expected_invalid for e in examples) / len(examples)
    assert share >= 0.8, f"invalid share {share:.1%}"
    families = Counter(classify(e) for e in examples)
    assert set(families) == {*MUTATORS, "valid_base", "extra_fields"}, families
    assert {e.endpoint for e in examples} == {*OPENAI_ENDPOINTS, *AGENT_ENDPOINTS}
    failures = [(e.path, e.reason) for e in examples if e.reason.startswith(EDGE_FAILURE)]
    assert not failures, failures[:5]
    # no runaway generation: the huge-size mutator goes just over the 8 MiB limit, and other
    # mutations stacked on it add little (after some earlier tests of a full run, one drawn body
    # exceeded 8 MiB + 8 KiB; its cause is not known yet, so the bound is generous)
    bound = 4 * 8 * 1024 * 1024
    oversized = [(len(e.body), classify(e)) for e in examples if len(e.body) > bound]
    assert not oversized, oversized[:5]


@pytest.mark.serve
def test_fuzzed_requests_get_4xx_and_leave_the_server_serving(http: httpx.Client) -> None:
    checker = RequestPathChecker(http, MODELS, check_every=1, probe_max_tokens=1)
    run_examples(fuzz_examples(MODELS, OPENAI_ENDPOINTS), checker.check, 120)
    stats = checker.stats
    assert stats.examples == 120 and stats.valid_checks == 120
    assert not stats.violations, _report(stats.violations)


@pytest.mark.serve
def test_fuzzed_agent_api_requests_get_their_4xx_and_leave_the_server_serving(
    http: httpx.Client,
) -> None:
    """`/v1/messages`, `/v1/messages/count_tokens` and `/v1/responses`: Anthropic's or OpenAI's
    error objects, clean streams that end as their API ends them, no 5xx, health unchanged
    (mostly refusals: `test_hand_written_agent_bodies_are_served_in_their_api_shapes` makes sure
    of served ones)."""
    checker = RequestPathChecker(http, MODELS, check_every=1, probe_max_tokens=1)
    run_examples(fuzz_examples(MODELS, AGENT_ENDPOINTS), checker.check, AGENT_EXAMPLES)
    stats = checker.stats
    assert stats.examples == AGENT_EXAMPLES and stats.valid_checks == AGENT_EXAMPLES
    assert not stats.violations, _report(stats.violations)


@pytest.mark.serve
def test_hand_written_agent_bodies_are_served_in_their_api_shapes(http: httpx.Client) -> None:
    """Tools, tool_use/tool_result blocks, function_call items, streams: each served (200) in
    its API's shape (a stream ending as its API ends one)."""
    examples = hand_written_examples(MODEL)
    checker = RequestPathChecker(http, MODELS, check_every=len(examples), probe_max_tokens=1)
    for example in examples:
        checker.check(example)
    assert not checker.stats.violations, _report(checker.stats.violations)
    assert checker.stats.statuses == {"2xx": len(examples)}, checker.stats.summary()


@pytest.mark.serve
@pytest.mark.parametrize(("endpoint", "body"), FOUND)
def test_values_found_by_fuzzing_are_refused_or_served(
    http: httpx.Client, endpoint: Endpoint, body: dict[str, object]
) -> None:
    checker = RequestPathChecker(http, MODELS, probe_max_tokens=1)
    checker.check(make_example(endpoint, body, MODELS, ("found",)))
    assert not checker.stats.violations, _report(checker.stats.violations)


@pytest.mark.serve
def test_values_found_by_fuzzing_do_not_fail_concurrent_streams(
    http: httpx.Client, serve_url: str
) -> None:
    """A request a model cannot serve fails alone, not the streams decoding beside it."""
    checker = RequestPathChecker(http, MODELS, check_every=len(FOUND), probe_max_tokens=1)
    with LoadStreams(serve_url, MODELS, per_model=1, max_tokens=32) as load:
        time.sleep(2)  # the streams are decoding
        for endpoint, body in (param.values for param in FOUND):
            checker.check(make_example(endpoint, body, MODELS, ("found",)))  # type: ignore[arg-type]
    assert load.records and not load.errors, load.summary()


@pytest.mark.serve
def test_steady_streams_see_no_errors_while_fuzzing(http: httpx.Client, serve_url: str) -> None:
    checker = RequestPathChecker(http, MODELS, check_every=4, probe_max_tokens=1)
    with LoadStreams(serve_url, MODELS, per_model=2, max_tokens=32) as load:
        run_examples(fuzz_examples(MODELS), checker.check, 40, seed=1)
    assert load.records and not load.errors, load.summary()
    assert not checker.stats.violations, _report(checker.stats.violations)
