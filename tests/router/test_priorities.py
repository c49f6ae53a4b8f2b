"""Which priority a request runs at (`configs.priorities`, `router.priorities`): placement by
tenant, key and default; asking lower only; an unknown level is a 400; no config, priority 0;
and the router forwards the priority it resolved."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fake_models import FakeHandle
from pydantic import ValidationError

from configs.model_config import RouterAppConfig
from configs.priorities import Priorities
from deployments.protocol.errors import ErrorResponse, OpenAIError
from deployments.protocol.requests import ChatCompletionRequest
from router.dispatch import Routed
from router.gateway import Gateway
from router.priorities import resolve_priority

PRIORITIES: dict[str, Any] = {
    "levels": ["interactive", "standard", "batch"],
    "default": "standard",
    "tenants": {"acme": {"level": "interactive", "weight": 3}, "nightly": {"level": "batch"}},
    "keys": {"batch-jobs": {"api_key": "sk-batch", "level": "batch"}},
}
CONFIG = Priorities.model_validate(PRIORITIES)


@pytest.mark.parametrize(
    ("tenant", "key", "placed"),
    [
        ("acme", None, 0),
        ("acme", "sk-batch", 0),  # the tenant's entry comes first
        ("nightly", None, 2),
        (None, "sk-batch", 2),
        ("other", "sk-batch", 2),
        ("other", "sk-other", 1),  # default
        (None, None, 1),
    ],
)
def test_a_request_is_placed_by_tenant_then_key_then_default(
    tenant: str | None, key: str | None, placed: int
) -> None:
    assert resolve_priority(CONFIG, tenant, key, None, 0) == placed


@pytest.mark.parametrize(
    ("tenant", "header", "body", "runs_at"),
    [
        (None, "batch", 0, 2),  # lower: granted
        (None, None, 2, 2),
        (None, "interactive", 0, 1),  # higher: stays at its placed level
        (None, None, -5, 1),
        ("acme", "standard", 0, 1),
        ("acme", "interactive", 2, 2),  # the least urgent ask wins
        (None, None, 99, 2),  # past the last level: the last
    ],
)
def test_a_request_may_ask_to_run_lower_never_higher(
    tenant: str | None, header: str | None, body: int, runs_at: int
) -> None:
    assert resolve_priority(CONFIG, tenant, None, header, body) == runs_at


def test_an_unknown_level_is_a_400_naming_the_levels() -> None:
    with pytest.raises(OpenAIError, match=r"'urgent' is not a priority level.*'interactive'") as e:
        resolve_priority(CONFIG, None, None, "urgent", 0)
    assert e.value.status_code == 400 and e.value.code == "invalid_priority"


def test_without_priorities_every_request_runs_at_zero() -> None:
    assert resolve_priority(None, "acme", "sk-batch", "anything", 7) == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"default": "low"}, "priorities.default is 'low', not a level"),
        ({"tenants": {"t": {"level": "low"}}}, "priorities.tenants.t.level is 'low'"),
        ({"keys": {"k": {"api_key": "x", "level": "low"}}}, "priorities.keys.k.level is 'low'"),
        ({"levels": ["a", "a"], "default": "a"}, "repeat a name"),
        (
            {
                "keys": {
                    "k": {"api_key": "x", "level": "batch"},
                    "j": {"api_key": "x", "level": "batch"},
                }
            },
            "priorities.keys.j and priorities.keys.k name the same api_key",
        ),
        ({"tenants": {"t": {"weight": 0}}}, "greater than or equal to 1"),
    ],
)
def test_bad_priorities_fail_naming_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Priorities.model_validate(PRIORITIES | change)


def app_config(**args: Any) -> RouterAppConfig:
    model = {"model_id": "a", "source": {"path": "/nowhere"}, "engine": {"max_model_len": 4096}}
    return RouterAppConfig.model_validate({"models": [model], **args})


def test_a_priority_key_must_be_an_accepted_api_key() -> None:
    with pytest.raises(ValidationError, match=r"priorities.keys.batch-jobs.api_key is not one"):
        app_config(priorities=PRIORITIES, api_keys=["sk-other"])
    app_config(priorities=PRIORITIES, api_keys=["sk-batch"])
    app_config(priorities=PRIORITIES)  # keys may come from the environment


async def route(gateway: Gateway, headers: dict[str, str], **body: Any) -> Routed | ErrorResponse:
    request = {"messages": [{"role": "user", "content": "hi"}], **body}
    return await gateway.route("chat", ChatCompletionRequest, request, headers)


@pytest.mark.parametrize(
    ("priorities", "headers", "body", "sent"),
    [
        (PRIORITIES, {"x-ascend-router-tenant": "nightly"}, {}, 2),
        (PRIORITIES, {"authorization": "Bearer sk-batch"}, {}, 2),
        (PRIORITIES, {"x-ascend-router-priority": "batch"}, {}, 2),
        (PRIORITIES, {}, {"priority": -1}, 1),
        (None, {"x-ascend-router-priority": "free-form"}, {"priority": 5}, 0),
    ],
)
def test_the_router_forwards_the_priority_it_resolved(
    priorities: dict[str, Any] | None, headers: dict[str, str], body: dict[str, Any], sent: int
) -> None:
    handle = FakeHandle("a")
    gateway = Gateway(app_config(priorities=priorities), {"a": handle})  # type: ignore[dict-item]
    outcome = asyncio.run(route(gateway, headers, **body))
    assert isinstance(outcome, Routed) and outcome.status == 200
    assert handle.sent()[0].request.priority == sent


def test_an_unknown_level_header_is_a_400_in_openais_shape() -> None:
    gateway = Gateway(app_config(priorities=PRIORITIES), {"a": FakeHandle("a")})  # type: ignore[dict-item]
    outcome = asyncio.run(route(gateway, {"x-ascend-router-priority": "asap"}))
    assert isinstance(outcome, ErrorResponse) and outcome.status_code == 400
    assert outcome.error.code == "invalid_priority" and "'batch'" in outcome.error.message


RULED = {
    "rules": [
        {"name": "bulk", "when": {"max_tokens_lte": 4}, "targets": ["a"], "priority": "batch"}
    ],
    "default_targets": ["a"],
}


@pytest.mark.parametrize(
    ("headers", "body", "sent"),
    [
        ({}, {"max_tokens": 4}, 2),  # the rule's level
        ({}, {"max_tokens": 64}, 1),  # no rule: default
        ({"x-ascend-router-tenant": "acme"}, {"max_tokens": 4}, 0),  # the tenant's entry wins
    ],
)
def test_a_policy_rule_places_what_it_decides(
    headers: dict[str, str], body: dict[str, Any], sent: int
) -> None:
    handle = FakeHandle("a")
    config = app_config(priorities=PRIORITIES, policy=RULED)
    gateway = Gateway(config, {"a": handle})  # type: ignore[dict-item]
    outcome = asyncio.run(route(gateway, headers, **body))
    assert isinstance(outcome, Routed) and outcome.status == 200
    assert handle.sent()[0].request.priority == sent


def test_a_rule_priority_must_be_a_level() -> None:
    with pytest.raises(ValidationError, match=r"rule 'bulk': priority 'batch' is not one of"):
        app_config(policy=RULED)


def test_reserved_slots_must_leave_the_other_levels_a_slot() -> None:
    deployment = {"max_ongoing_requests": 2}
    model = {"model_id": "a", "source": {"path": "/x"}, "deployment": deployment}
    args = {"models": [model], "priorities": PRIORITIES | {"reserved_slots": 2}}
    with pytest.raises(ValidationError, match=r"reserved_slots \(2\) leaves model 'a' no slot"):
        RouterAppConfig.model_validate(args)
