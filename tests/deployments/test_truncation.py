"""Replica-side truncation on SmolLM2's real tokenizer and chat template: whole turns go,
tool-call exchanges stay intact, the system prompt and the last user turn are never dropped."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from configs.preprocessing import Truncation
from deployments.prompting.apply_plan import run_plan
from deployments.prompting.chat_template import ChatTemplate
from deployments.prompting.tool_history import normalize_history
from deployments.prompting.truncation import droppable_turns, truncate
from deployments.protocol.preprocess_plan import PreprocessPlan
from deployments.protocol.requests import ChatCompletionRequest

FILLER = "The quarterly report lists revenue, costs and margins for every region. " * 12
CALL = {"id": "c1", "type": "function",
        "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Summarise: " + FILLER},
    {"role": "assistant", "content": "Revenue grew. " + FILLER},
    {"role": "user", "content": "What is the weather in Paris? " + FILLER},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"},
    {"role": "assistant", "content": "It is sunny in Paris. " + FILLER},
    {"role": "user", "content": "Thanks! And tomorrow?"},
]


@pytest.fixture(scope="module")
def encode(tokenizer: Any) -> Any:
    template = ChatTemplate(tokenizer)

    def run(messages: list[dict[str, Any]]) -> tuple[str, list[int]]:
        text = template.render(messages, None)
        return text, tokenizer.encode(text, add_special_tokens=False)

    return run


def messages() -> list[dict[str, Any]]:
    return normalize_history(ChatCompletionRequest(messages=HISTORY).messages)


def intact(kept: list[dict[str, Any]]) -> bool:
    """Every tool message follows the assistant message that called it."""
    pending: set[str] = set()
    for m in kept:
        if m["role"] == "tool":
            if m["tool_call_id"] not in pending:
                return False
            pending.discard(m["tool_call_id"])
        else:
            pending = {c["id"] for c in m.get("tool_calls", [])}
    return not pending


def test_turns_group_tool_exchanges_and_skip_system_messages() -> None:
    assert droppable_turns(messages()) == [[1, 2], [3, 4, 5, 6]]
    assert droppable_turns([{"role": "system", "content": "s"}]) == []


def test_the_fewest_oldest_turns_are_dropped(encode: Any) -> None:
    full = len(encode(messages())[1])
    without_first = len(encode([m for i, m in enumerate(messages()) if i not in (1, 2)])[1])
    cut = truncate(messages(), encode, lambda n: n <= without_first)
    assert cut is not None and cut.dropped == 2 and len(cut.prompt) == without_first < full
    assert [m["role"] for m in cut.messages] == ["system", "user", "assistant", "tool",
                                                 "assistant", "user"]  # fmt: skip
    assert cut.messages[2]["tool_calls"][0]["id"] == "c1" and intact(cut.messages)


@settings(max_examples=25, deadline=None)
@given(budget=st.integers(min_value=0, max_value=1200))
def test_any_budget_keeps_system_last_turn_and_tool_pairs(encode: Any, budget: int) -> None:
    cut = truncate(messages(), encode, lambda n: n <= budget)
    assert cut is not None
    assert cut.messages[0]["role"] == "system" and cut.messages[-1] == messages()[-1]
    assert intact(cut.messages)
    assert len(cut.prompt) <= budget or cut.dropped == 6, "fits, or everything droppable went"


def plan(**truncation: Any) -> PreprocessPlan:
    return PreprocessPlan(truncation=Truncation(**truncation), fit_context=True)


def test_run_plan_fits_the_context_and_reports_tokens(encode: Any, tokenizer: Any) -> None:
    full = len(encode(messages())[1])
    count = lambda t: len(tokenizer.encode(t, add_special_tokens=False))  # noqa: E731
    text, prompt, report = run_plan(
        plan(min_output_tokens=64), messages(), encode, count, full + 32, None
    )
    assert len(prompt) + 64 <= full + 32 and encode(messages())[0] != text
    assert report.truncated_messages == 2 and report.tokens_saved == {
        "truncation": full - len(prompt)
    }
    assert report.header() == f"truncated_messages=2; tokens_saved={full - len(prompt)}"
    # max_tokens given: prompt + max_tokens must fit
    _, prompt, report = run_plan(plan(), messages(), encode, count, full + 32, 40)
    assert len(prompt) + 40 <= full + 32 and report.truncated_messages == 2


def test_a_prompt_that_fits_is_untouched_and_the_cap_applies_anyway(encode: Any) -> None:
    full = len(encode(messages())[1])
    count = len
    _, prompt, report = run_plan(plan(), messages(), encode, count, full + 256, None)
    assert len(prompt) == full and report.header() is None
    _, prompt, report = run_plan(
        plan(max_prompt_tokens=full - 1), messages(), encode, count, full + 256, None
    )
    assert len(prompt) < full and report.truncated_messages == 2
    # the cap alone, on a model with a longer-context candidate after it
    capped = PreprocessPlan(truncation=Truncation(max_prompt_tokens=full - 1), fit_context=False)
    _, prompt, report = run_plan(capped, messages(), encode, count, 10, None)
    assert len(prompt) < full and report.truncated_messages == 2


def test_when_the_last_turn_alone_does_not_fit_nothing_is_dropped(encode: Any) -> None:
    full = len(encode(messages())[1])
    _, prompt, report = run_plan(plan(min_output_tokens=1), messages(), encode, len, 20, None)
    assert len(prompt) == full and report.truncated_messages == 0, "the 400 stays"
    # and without fit_context, a prompt over the context is left to the context check
    no_fit = PreprocessPlan(truncation=Truncation(), fit_context=False)
    _, prompt, report = run_plan(no_fit, messages(), encode, len, full - 100, None)
    assert len(prompt) == full and report.header() is None
