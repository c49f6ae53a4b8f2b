"""Routing policy: feature extraction, `decide` and start-up validation, as pure functions.

The case tables are kept one case per row (`fmt: off`) so that each reads as a spec line.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from configs.policy_config import ModelCapabilities, PolicyConfig
from configs.policy_validation import check_policy
from deployments.protocol.errors import OpenAIError
from deployments.protocol.requests import ChatCompletionRequest, CompletionRequest
from deployments.protocol.validation import parse_request
from router.policy import (
    Decision,
    ModelState,
    NoHealthyModel,
    NoModelCanServe,
    RequestFeatures,
    UnknownModel,
    decide,
    extract_features,
)


def caps(context: int, tools: bool, structured: bool, streaming: bool = True) -> ModelCapabilities:
    return ModelCapabilities(
        context_length=context,
        supports_tools=tools,
        supports_structured_output=structured,
        supports_streaming=streaming,
    )


MODELS = {
    "small": caps(4096, tools=False, structured=False),
    "mid": caps(32768, tools=True, structured=True),
    "big": caps(131072, tools=True, structured=True),
    "nostream": caps(8192, tools=False, structured=False, streaming=False),
}
ALIASES = {
    "auto": ["small", "mid", "big"],
    "fast": ["small", "mid"],
    "batch": ["nostream", "small"],
}


def rule(name: str, targets: list[str], pick: str = "ordered", **when: Any) -> dict[str, Any]:
    return {"name": name, "when": when, "targets": targets, "pick": pick}


RULES = [
    rule("tenant-acme", ["big"], tenant=["acme"]),
    rule("tenant-beta", ["small", "mid"], tenant=["beta"]),
    rule("urgent", ["mid", "big"], pick="least_loaded", priority=["high"]),
    rule("fast-json", ["mid"], model=["fast"], response_format=["json_object"]),
    rule("json", ["big", "mid"], response_format=["json_object", "json_schema"]),
    rule("forced-tools", ["big"], tool_choice=["required", "named"]),
    rule("tools", ["mid", "big"], has_tools=True),
    rule("long-prompt", ["big", "mid"], prompt_tokens_gt=3000),
    rule("greedy-short", ["small"], temperature_lte=0.2, prompt_tokens_lte=500),
    rule("creative", ["big"], temperature_gte=1.5, top_p_lte=0.95),
    rule("short-answer", ["small", "mid"], max_tokens_lte=64),
    rule("long-answer", ["big"], max_tokens_gte=8192),
    rule("streaming", ["small", "mid"], stream=True),
]


def make_policy(**overrides: Any) -> PolicyConfig:
    raw: dict[str, Any] = {"aliases": ALIASES, "rules": RULES, "default_targets": ["mid", "small"]}
    return PolicyConfig.model_validate(raw | overrides)


POLICY = make_policy()
BUSY = {"mid": ModelState(in_flight=3, queued=2), "big": ModelState(in_flight=1)}
MID_DOWN = {"mid": ModelState(healthy=False)}
ALL_DOWN = {"mid": ModelState(healthy=False), "small": ModelState(healthy=False)}
SMALL_FULL = {"small": ModelState(in_flight=8, queued=4, queue_limit=4)}
TOOLS: dict[str, Any] = {"has_tools": True, "tool_choice": "auto"}


def case(
    case_id: str,
    rule_name: str,
    candidates: list[str],
    rejected: tuple[str, ...] = (),
    states: dict[str, ModelState] | None = None,
    **features: Any,
) -> Any:
    """One `decide` case: request features → (rule, candidates, rejected models)."""
    expected = (rule_name, tuple(candidates), tuple(sorted(rejected)))
    return pytest.param(RequestFeatures(**features), states or {}, expected, id=case_id)


# fmt: off
DECIDE_CASES = [
    case("omitted-model-is-auto", "default", ["mid", "small"]),
    case("explicit-auto", "default", ["mid", "small"], model="auto"),
    case("alias-without-rule-match", "alias:fast", ["small", "mid"], model="fast"),
    case("tenant-header", "tenant-acme", ["big"], tenant="acme"),
    case("priority-least-loaded", "urgent", ["big", "mid"], states=BUSY, priority="high"),
    case("least-loaded-stable-ties", "urgent", ["mid", "big"], priority="high"),
    case("model-condition", "fast-json", ["mid"], model="fast", response_format="json_object"),
    case("response-format", "json", ["big", "mid"], response_format="json_schema"),
    case("targets-within-alias", "json", ["mid"], model="fast", response_format="json_schema"),
    case("tool-choice-named", "forced-tools", ["big"], has_tools=True, tool_choice="named"),
    case("has-tools", "tools", ["mid", "big"], **TOOLS),
    case("prompt-tokens-gt", "long-prompt", ["big", "mid"], estimated_prompt_tokens=5000),
    case("prompt-gt-is-strict", "default", ["mid", "small"], estimated_prompt_tokens=3000),
    case("temp-and-prompt-lte", "greedy-short", ["small"], temperature=0.1,
         estimated_prompt_tokens=100),
    case("prompt-lte-fails", "default", ["mid", "small"], temperature=0.1,
         estimated_prompt_tokens=900),
    case("temperature-gte-top-p", "creative", ["big"], temperature=1.6, top_p=0.9),
    case("unsent-top-p-fails", "default", ["mid", "small"], temperature=1.6),
    case("max-tokens-lte", "short-answer", ["small", "mid"], max_tokens=32),
    case("max-tokens-gte", "long-answer", ["big"], max_tokens=10000),
    case("max-tokens-between", "default", ["mid", "small"], max_tokens=1000),
    case("stream", "streaming", ["small", "mid"], stream=True),
    case("stream-within-alias", "streaming", ["small"], model="batch", stream=True),
    case("rule-outside-alias-skipped", "alias:batch", ["nostream", "small"], model="batch",
         temperature=1.6, top_p=0.9),
    case("exact-model-pins", "model:small", ["small"], model="small"),
    case("exact-model-skips-rules", "model:mid", ["mid"], model="mid", tenant="acme"),
    case("context-filter", "default", ["mid"], ("small",), estimated_prompt_tokens=2500,
         max_tokens=2000),
    case("tools-filter", "tenant-beta", ["mid"], ("small",), tenant="beta", **TOOLS),
    case("structured-output-filter", "tenant-beta", ["mid"], ("small",), tenant="beta",
         response_format="json_object"),
    case("unhealthy-dropped", "default", ["small"], ("mid",), states=MID_DOWN),
    case("saturated-kept", "default", ["mid", "small"], states=SMALL_FULL),
    # the prompt estimate only routes: with no context fitting it, the longest context is tried
    # (its replica counts exactly and gives the 400)
    case("estimate-beyond-pinned", "model:small", ["small"], ("small",), model="small",
         estimated_prompt_tokens=5000),
    case("estimate-beyond-completions", "model:small", ["small"], ("small",), model="small",
         estimated_prompt_tokens=5000, input_field="prompt"),
    case("estimate-plus-max-tokens", "model:small", ["small"], ("small",), model="small",
         estimated_prompt_tokens=3000, max_tokens=2000),
    case("estimate-beyond-rule-targets", "tenant-acme", ["big"], ("big",), tenant="acme",
         estimated_prompt_tokens=200000),
    case("estimate-beyond-all-longest-first", "long-prompt", ["big", "mid"], ("big", "mid"),
         estimated_prompt_tokens=10**9),
]
# fmt: on


@pytest.mark.parametrize(("features", "states", "expected"), DECIDE_CASES)
def test_decide(
    features: RequestFeatures,
    states: dict[str, ModelState],
    expected: tuple[str, tuple[str, ...], tuple[str, ...]],
) -> None:
    decision = decide(features, MODELS, states, POLICY)
    assert isinstance(decision, Decision)
    got = (decision.rule, decision.candidates, tuple(sorted(decision.rejected)))
    assert got == expected, decision.reason
    assert decision.reason


def error(
    case_id: str,
    exc: type[Exception],
    param: str,
    fragment: str,
    states: dict[str, ModelState] | None = None,
    **features: Any,
) -> Any:
    """One failing `decide` case: the exception, its `param` and a message fragment."""
    return pytest.param(RequestFeatures(**features), states or {}, exc, param, fragment, id=case_id)


# fmt: off
ERROR_CASES = [
    error("unknown-model", UnknownModel, "model", "'gpt-4' does not exist", model="gpt-4"),
    error("pinned-without-tools", NoModelCanServe, "tools", "small: does not support tools",
          model="small", **TOOLS),
    error("pinned-without-streaming", NoModelCanServe, "stream", "streaming", model="nostream",
          stream=True),
    error("pinned-without-structured", NoModelCanServe, "response_format", "structured output",
          model="small", response_format="json_schema"),
    error("alias-all-incapable", NoModelCanServe, "response_format",
          "nostream: does not support structured", model="batch", response_format="json_object"),
    error("all-unhealthy", NoHealthyModel, "model", "mid: unhealthy; small: unhealthy",
          states=ALL_DOWN),
    error("capable-ones-unhealthy", NoHealthyModel, "model", "mid: unhealthy", states=MID_DOWN,
          tenant="beta", **TOOLS),
]
# fmt: on


@pytest.mark.parametrize(("features", "states", "exc", "param", "fragment"), ERROR_CASES)
def test_decide_errors(
    features: RequestFeatures,
    states: dict[str, ModelState],
    exc: type[Exception],
    param: str,
    fragment: str,
) -> None:
    with pytest.raises(exc) as info:
        decide(features, MODELS, states, POLICY)
    assert getattr(info.value, "param", None) == param
    assert fragment in str(info.value)
    # A 503 (nothing healthy) is the server's fault, so not a ValueError; every 4xx is.
    assert isinstance(info.value, ValueError) == (exc is not NoHealthyModel)


def test_auto_implied_by_default_targets() -> None:
    policy = PolicyConfig(default_targets=["mid", "big"])
    check_policy(policy, MODELS)
    decision = decide(RequestFeatures(), MODELS, {}, policy)
    assert (decision.rule, decision.candidates) == ("default", ("mid", "big"))


def test_policy_needs_auto_or_default_targets() -> None:
    with pytest.raises(ValueError, match="needs `aliases.auto` or `default_targets`"):
        PolicyConfig(aliases={"fast": ["small"]})


def bad(case_id: str, pattern: str, *rules: dict[str, Any], **overrides: Any) -> Any:
    """One start-up error: the base policy with `rules`/`overrides` → message pattern."""
    return pytest.param(overrides | ({"rules": list(rules)} if rules else {}), pattern, id=case_id)


# fmt: off
VALIDATION_CASES = [
    bad("unknown-rule-target", r"rule 'r1' targets names unknown model 'huge'",
        rule("r1", ["huge"])),
    bad("unknown-alias-model", r"alias 'auto' names unknown model 'ghost'",
        aliases={"auto": ["small", "ghost"]}),
    bad("unknown-default-target", r"default_targets names unknown model 'ghost'",
        default_targets=["ghost"]),
    bad("default-outside-auto", r"not in alias 'auto'", default_targets=["nostream"]),
    bad("alias-collides-with-model", r"alias 'small' has the same name as a served model",
        aliases={**ALIASES, "small": ["mid"]}),
    bad("negative-max-tokens", r"rule 'neg': when.max_tokens_lte is -1",
        rule("neg", ["mid"], max_tokens_lte=-1)),
    bad("negative-prompt-tokens", r"rule 'neg': when.prompt_tokens_gt is -5",
        rule("neg", ["mid"], prompt_tokens_gt=-5)),
    bad("temperature-out-of-range", r"rule 'hot'.*temperature must be in \[0, 2\]",
        rule("hot", ["mid"], temperature_gte=2.5)),
    bad("top-p-out-of-range", r"rule 'p'.*top_p must be in \[0, 1\]",
        rule("p", ["mid"], top_p_lte=1.5)),
    bad("temperature-empty-range", r"rule 't': when.temperature_lte 0.2 < when.temperature_gte",
        rule("t", ["mid"], temperature_lte=0.2, temperature_gte=0.8)),
    bad("max-tokens-empty-range", r"rule 'm': when.max_tokens_lte 10 < when.max_tokens_gte 100",
        rule("m", ["mid"], max_tokens_lte=10, max_tokens_gte=100)),
    bad("prompt-tokens-empty-range", r"rule 'p': when.prompt_tokens_lte 100",
        rule("p", ["mid"], prompt_tokens_gt=100, prompt_tokens_lte=100)),
    bad("after-unconditional", r"rule 'later' is unreachable: earlier rule 'catch-all' \(uncond",
        rule("catch-all", ["mid"]), rule("later", ["big"], stream=True)),
    bad("duplicate-condition", r"rule 'tools-2' is unreachable.*'tools-1'",
        rule("tools-1", ["mid"], has_tools=True), rule("tools-2", ["big"], has_tools=True)),
    bad("implied-by-broader", r"rule 'cold' is unreachable.*'cool'",
        rule("cool", ["mid"], temperature_lte=0.5),
        rule("cold", ["big"], temperature_lte=0.2, stream=True)),
    bad("model-id-in-when-model", r"rule 'm': when.model names model id 'small'",
        rule("m", ["mid"], model=["small"])),
    bad("unknown-alias-in-when-model", r"rule 'm': when.model names unknown alias 'slow'",
        rule("m", ["mid"], model=["slow"])),
    bad("empty-list-condition", r"rule 'e': when.tenant is empty", rule("e", ["mid"], tenant=[])),
    bad("duplicate-rule-name", r"rule 'r' is defined twice",
        rule("r", ["mid"], stream=True), rule("r", ["big"], has_tools=True)),
    bad("no-targets", r"rule 'none' targets lists no models", rule("none", [])),
    bad("duplicate-target", r"rule 'dup' targets lists model 'mid' more than once",
        rule("dup", ["mid", "mid"])),
    bad("targets-outside-aliases", r"rule 'b': none of its targets \['big'\]",
        rule("b", ["big"], model=["batch"])),
    bad("tools-rule-without-tools", r"rule 't': none of its targets \['small'\] has supports_t",
        rule("t", ["small"], has_tools=True)),
    bad("json-rule-without-structured", r"rule 'j'.*supports_structured_output",
        rule("j", ["small"], response_format=["json_schema"])),
    bad("prompt-rule-beyond-context", r"rule 'long'.*context fitting",
        rule("long", ["small"], prompt_tokens_gt=5000)),
    bad("name-pattern-to-nothing", r"pattern 'claude-\*' maps to 'opus', which is neither",
        model_names=[{"pattern": "claude-*", "model": "opus"}]),
]
# fmt: on


@pytest.mark.parametrize(("overrides", "pattern"), VALIDATION_CASES)
def test_check_policy_rejects(overrides: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        check_policy(make_policy(**overrides), MODELS)


# fmt: off
VALID_CASES = [
    pytest.param({}, id="base-policy"),
    # `catch-all` only fires for aliases holding `mid`; `b` is the only rule for alias `batch`.
    pytest.param({"aliases": {"auto": ["mid", "big"], "batch": ["small"]}, "default_targets": None,
                  "rules": [rule("catch-all", ["mid"]), rule("b", ["small"], stream=True)]},
                 id="unconditional-in-other-alias-scope"),
    pytest.param({"rules": [rule("tools-stream", ["mid"], has_tools=True, stream=True),
                            rule("tools", ["big"], has_tools=True)]},
                 id="broader-after-narrower"),
]
# fmt: on


@pytest.mark.parametrize("overrides", VALID_CASES)
def test_check_policy_accepts(overrides: dict[str, Any]) -> None:
    check_policy(make_policy(**overrides), MODELS)


NAMES = [
    {"pattern": "claude-*haiku*", "model": "fast"},
    {"pattern": "gpt-*-mini", "model": "small"},
    {"pattern": "claude-*", "model": "auto"},
]


# fmt: off
@pytest.mark.parametrize(("requested", "rule_label", "pattern"), [
    ("claude-haiku-4-5-20251001", "alias:fast", "claude-*haiku*"),  # first match wins
    ("claude-opus-4-8[1m]", "default", "claude-*"),  # Claude Code's default, with its suffix
    ("gpt-5-mini", "model:small", "gpt-*-mini"),  # a pattern may pin a served model
    ("fast", "alias:fast", None),  # names that are served ids or aliases are never mapped
    ("small", "model:small", None),
])
# fmt: on
def test_model_name_patterns_route_hard_coded_names(
    requested: str, rule_label: str, pattern: str | None
) -> None:
    policy = make_policy(rules=[], model_names=NAMES)
    check_policy(policy, MODELS)
    decision = decide(RequestFeatures(model=requested), MODELS, {}, policy)
    assert decision.rule == rule_label
    assert (f"matched model_names pattern {pattern!r}" in decision.reason) == (pattern is not None)


def test_a_name_no_pattern_matches_is_unknown() -> None:
    policy = make_policy(model_names=NAMES)
    with pytest.raises(UnknownModel, match="'gpt-4o' does not exist"):
        decide(RequestFeatures(model="gpt-4o"), MODELS, {}, policy)


TOOL_DEFS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
TOOL_CHARS = len(json.dumps(TOOL_DEFS, separators=(",", ":")))
CALL = {"id": "1", "type": "function", "function": {"name": "get", "arguments": '{"a":1}'}}
IMAGE = {"type": "image_url", "image_url": {"url": "https://x/y.png"}}
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def chat(content: Any, *history: dict[str, Any], **body: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": [*history, {"role": "user", "content": content}], **body}


# fmt: off
FEATURE_CASES = [
    pytest.param(chat("x" * 10), {}, {
        "model": "auto", "estimated_prompt_tokens": 3, "input_field": "messages", "stream": False,
        "tool_choice": "none", "response_format": "text", "max_tokens": None, "tenant": None,
    }, id="chat-string"),
    pytest.param(chat([{"type": "text", "text": "abcdefgh"}, IMAGE]), {},
                 {"estimated_prompt_tokens": 2, "media": {"image": "messages[0].content[1]"}},
                 id="chat-text-parts-skip-images"),
    pytest.param(chat("abcd", {"role": "assistant", "content": None, "tool_calls": [CALL]},
                      tools=TOOL_DEFS), {},
                 {"has_tools": True, "tool_choice": "auto",
                  "estimated_prompt_tokens": math.ceil((4 + 3 + 7 + TOOL_CHARS) / 4)},
                 id="chat-tool-calls-and-tool-definitions"),
    pytest.param({"prompt": "abcdefghi"}, {},
                 {"model": None, "estimated_prompt_tokens": 3, "input_field": "prompt"},
                 id="completions-string"),
    pytest.param({"prompt": [1, 2, 3, 4, 5]}, {}, {"estimated_prompt_tokens": 5},
                 id="completions-token-ids"),
    pytest.param({"prompt": ["a" * 40, "b" * 8]}, {}, {"estimated_prompt_tokens": 10},
                 id="completions-batch-longest"),
    pytest.param({"prompt": [[1, 2], [3, 4, 5]]}, {}, {"estimated_prompt_tokens": 3},
                 id="completions-token-batches"),
    pytest.param(chat("hi", max_tokens=100, max_completion_tokens=50), {}, {"max_tokens": 50},
                 id="max-completion-tokens-wins"),
    pytest.param(chat("hi", max_tokens=100), {}, {"max_tokens": 100}, id="max-tokens"),
    pytest.param(chat("hi"), {"X-Ascend-Router-Tenant": " acme ", "x-ascend-router-priority": "hi"},
                 {"tenant": "acme", "priority": "hi"}, id="headers-case-insensitive"),
    pytest.param(chat("hi"), {"x-ascend-router-tenant": ""}, {"tenant": None},
                 id="empty-header-is-none"),
    pytest.param(chat("hi", tools=TOOL_DEFS, tool_choice=NAMED), {}, {"tool_choice": "named"},
                 id="tool-choice-named"),
    pytest.param(chat("hi", tools=TOOL_DEFS, tool_choice="required"), {},
                 {"tool_choice": "required"}, id="tool-choice-required"),
    pytest.param(chat("hi", response_format={"type": "json_schema",
                                             "json_schema": {"schema": {"type": "object"}}}), {},
                 {"response_format": "json_schema"}, id="response-format"),
    pytest.param(chat("hi", temperature=1, top_p=0.5, stream=True), {},
                 {"temperature": 1.0, "top_p": 0.5, "stream": True}, id="sampling-and-stream"),
]
# fmt: on


def parsed(body: dict[str, Any]) -> ChatCompletionRequest | CompletionRequest:
    """A body validated as the router validates it before extracting features."""
    return parse_request(ChatCompletionRequest if "messages" in body else CompletionRequest, body)


@pytest.mark.parametrize(("body", "headers", "expected"), FEATURE_CASES)
def test_extract_features(
    body: dict[str, Any], headers: dict[str, str], expected: dict[str, Any]
) -> None:
    features = extract_features(parsed(body), headers)
    assert {name: getattr(features, name) for name in expected} == expected


# Routing-relevant fields are validated once, with the request (400 naming the field).
# fmt: off
BAD_BODIES = [
    pytest.param(chat("hi", temperature="hot"), "temperature", id="temperature-not-number"),
    pytest.param(chat("hi", max_tokens=-1), "max_tokens", id="negative-max-tokens"),
    pytest.param(chat("hi", max_completion_tokens=1.5), "max_completion_tokens",
                 id="fractional-max-completion-tokens"),
    pytest.param(chat("hi", tool_choice="always"), "tool_choice", id="bad-tool-choice"),
    pytest.param(chat("hi", response_format={"type": "xml"}), "response_format.type",
                 id="bad-response-format"),
    pytest.param(chat("hi", response_format="json"), "response_format.type",
                 id="response-format-not-object"),
    pytest.param(chat("hi", stream="true"), "stream", id="stream-not-bool"),
    pytest.param({"model": 5, "prompt": "x"}, "model", id="model-not-string"),
    pytest.param({"model": "auto"}, "prompt", id="no-messages-or-prompt"),
    pytest.param({"prompt": {"text": "x"}}, "prompt", id="prompt-object"),
    pytest.param({"messages": "hi"}, "messages", id="messages-not-list"),
]
# fmt: on


@pytest.mark.parametrize(("body", "param"), BAD_BODIES)
def test_routing_fields_are_validated_with_the_request(body: dict[str, Any], param: str) -> None:
    with pytest.raises(OpenAIError) as info:
        parsed(body)
    assert info.value.status_code == 400 and info.value.param == param


@pytest.mark.parametrize(
    ("state", "saturated"),
    [
        pytest.param(ModelState(queued=10), False, id="unbounded-queue"),
        pytest.param(ModelState(queued=3, queue_limit=4), False, id="below-limit"),
        pytest.param(ModelState(queued=4, queue_limit=4), True, id="at-limit"),
    ],
)
def test_model_state_saturated(state: ModelState, saturated: bool) -> None:
    assert state.saturated is saturated
