"""Fallback, saturation, health and the decision headers, on scripted model handles (no Ray).

The real stack is exercised in tests/serve/test_fallback.py; here every failure kind is
produced on cue, stream and non-stream.
"""

from __future__ import annotations

import asyncio
from typing import Any
from unittest.mock import ANY

import pytest
from fake_models import Answer, Behaviour, FakeHandle, is_error
from ray.serve._private.common import DeploymentStatus, DeploymentStatusTrigger
from ray.serve.schema import (
    ApplicationStatus,
    ApplicationStatusOverview,
    DeploymentStatusOverview,
    ServeStatus,
)

from configs.model_config import RouterAppConfig
from deployments.protocol.errors import ErrorResponse
from deployments.protocol.requests import ChatCompletionRequest
from router.deployment_status import UNKNOWN, DeploymentStatusView
from router.dispatch import FALLBACK_HEADER, MODEL_HEADER, RULE_HEADER, Routed
from router.gateway import Gateway
from router.model_stream import ModelStream

HI = [{"role": "user", "content": "hi"}]


def make_config(context: int | None = 4096, **overrides: Any) -> RouterAppConfig:
    models = [
        {
            "model_id": model,
            "source": {"path": "/nowhere"},
            "engine": {"max_model_len": context},
            "deployment": {"max_ongoing_requests": 1, "max_queued_requests": 1},
        }
        for model in ("a", "b")
    ]
    args = {
        "models": models,
        "policy": {"aliases": {"auto": ["a", "b"]}},
        "first_token_timeout_s": 0.05,
        "health_probe_timeout_s": 0.05,
        "health_cooldown_s": 0.05,
        "response_timeout_s": 2,
        "retry_after_s": 3,
    }
    return RouterAppConfig.model_validate(args | overrides)


def make_gateway(a: Behaviour = "ok", b: Behaviour = "ok", **config: Any) -> Gateway:
    handles = {"a": FakeHandle("a", a, delay_s=0.2), "b": FakeHandle("b", b, delay_s=0.2)}
    return Gateway(make_config(**config), handles)  # type: ignore[arg-type]


async def route(gateway: Gateway, stream: bool = False) -> Routed | ErrorResponse:
    body = {"messages": HI, "stream": stream}
    return await gateway.route("chat", ChatCompletionRequest, body, {})


async def answer(outcome: Routed | ErrorResponse) -> Any:
    """The non-streamed result, or a stream's first item after draining it."""
    assert isinstance(outcome, Routed), outcome
    if isinstance(outcome.result, ModelStream):
        items = [item async for item in outcome.result.items()]
        return items[0]
    return outcome.result


# fmt: off
FALLBACK_CASES = [
    # behaviour of a, of b -> status, model header, fallback header, Retry-After, a marked down
    ("ok", "ok", 200, "a", None, None, False),
    ("slow", "ok", 200, "a", None, None, False),
    ("backpressure", "ok", 200, "b", "a", None, False),
    ("crash", "ok", 200, "b", "a", None, True),
    ("dead", "ok", 200, "b", "a", None, True),
    ("error500", "ok", 200, "b", "a", None, False),
    ("engine_dead", "ok", 200, "b", "a", None, True),
    # a request's own failure is answered as it is: no fallback, no health change
    ("raises", "ok", 500, "a", None, None, False),
    ("internal", "ok", 500, "a", None, None, False),
    ("context", "ok", 200, "b", "a", None, False),
    ("context", "context", 400, "b", "a", None, False),
    ("backpressure", "backpressure", 429, "b", "a", "3", False),
    ("backpressure", "dead", 429, "b", "a", "3", False),
    ("crash", "crash", 503, "b", "a", None, True),
    ("dead", "dead", 503, "b", "a", None, True),
    # a replica with no preparation thread free: load, so the next candidate, else a 429
    ("busy", "ok", 200, "b", "a", None, False),
    ("busy", "busy", 429, "b", "a", "1", False),
]
# fmt: on


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(
    ("a", "b", "status", "model", "fallback", "retry_after", "a_down"), FALLBACK_CASES
)
def test_fallback(
    a: Behaviour,
    b: Behaviour,
    status: int,
    model: str,
    fallback: str | None,
    retry_after: str | None,
    a_down: bool,
    stream: bool,
) -> None:
    async def run() -> None:
        gateway = make_gateway(a, b)
        outcome = await route(gateway, stream)
        assert isinstance(outcome, Routed)
        headers = outcome.headers()
        assert outcome.status == status, await answer(outcome)
        assert (headers[MODEL_HEADER], headers[RULE_HEADER]) == (model, "default")
        assert headers.get(FALLBACK_HEADER) == fallback
        result = await answer(outcome)
        sent = result.retry_after_s if isinstance(result, ErrorResponse) else None
        assert (None if sent is None else str(sent)) == retry_after
        assert result == Answer(model=model) if status == 200 else is_error(result, status)
        assert gateway.caller.health.healthy("a") is not a_down
        assert sum(gateway.caller.load.counts.values()) == 0, "in-flight counts leaked"
        if a in ("crash", "dead"):
            assert gateway.caller.handles["a"].sent()[0].cancelled  # type: ignore[attr-defined]
        if status == 500:
            assert result.error.code == "internal_error" and "Error" not in result.error.message

    asyncio.run(run())


def test_own_queue_limit_saturates_before_sending() -> None:
    async def run() -> None:
        gateway = make_gateway("slow", "slow")  # a takes 1 running + 1 queued from this router
        held = [asyncio.ensure_future(route(gateway)) for _ in range(4)]
        await asyncio.sleep(0.01)
        assert gateway.caller.states(starting_ok=False)["a"].queued == 1
        outcomes = await asyncio.gather(*held, route(gateway))
        models = [o.headers()[MODEL_HEADER] for o in outcomes if isinstance(o, Routed)]
        assert [o.status for o in outcomes if isinstance(o, Routed)] == [200] * 4 + [429]
        assert models[:4] == ["a", "a", "b", "b"]
        assert outcomes[2].headers()[FALLBACK_HEADER] == "a"  # type: ignore[union-attr]
        assert len(gateway.caller.handles["a"].sent()) == 2, "a saturated model is not called"  # type: ignore[attr-defined]

    asyncio.run(run())


def test_down_model_is_skipped_then_probed_back() -> None:
    async def run() -> None:
        gateway = make_gateway("crash", "ok")
        first = await route(gateway)
        assert isinstance(first, Routed) and first.fallback == ("a",)
        skipped = await route(gateway)
        assert isinstance(skipped, Routed) and (skipped.model, skipped.fallback) == ("b", ())
        assert "unhealthy" in skipped.reason
        gateway.caller.handles["a"].behaviour = "ok"  # type: ignore[attr-defined]
        await asyncio.sleep(0.2)  # > cool-down: the probe succeeds
        back = await route(gateway)
        assert isinstance(back, Routed) and back.model == "a"

    asyncio.run(run())


def test_no_healthy_model_is_503_before_any_call() -> None:
    async def run() -> None:
        gateway = make_gateway("crash", "crash")
        assert isinstance(await route(gateway), Routed)
        outcome = await route(gateway, stream=True)
        assert is_error(outcome, 503) and "no healthy model" in outcome.error.message  # type: ignore[union-attr]

    asyncio.run(run())


def test_unknown_context_is_learned_from_a_probe() -> None:
    async def run() -> None:
        gateway = make_gateway(context=None)
        await gateway.start()
        assert not gateway.caller.health.healthy("a")
        await asyncio.sleep(0.2)
        assert gateway.caller.health.healthy("a") and gateway.catalog.context_length("a") == 4096
        assert gateway.catalog.capabilities["a"].context_length == 4096
        assert gateway.model_list(0).data[0].max_model_len == 4096

    asyncio.run(run())


def test_metrics_count_decisions_and_fallbacks() -> None:
    async def run() -> None:
        gateway = make_gateway("backpressure", "ok")
        await route(gateway)
        text = gateway.metrics.render().decode()
        assert 'ascend_router_requests_total{model="b",rule="default",status="200"} 1.0' in text
        assert 'ascend_router_fallbacks_total{model="a",reason="saturated"} 1.0' in text

    asyncio.run(run())


def test_model_list_has_ids_then_aliases() -> None:
    listed = make_gateway().model_list(7)
    assert [(c.id, c.max_model_len) for c in listed.data] == [
        ("a", 4096),
        ("b", 4096),
        ("auto", None),
    ]


def _snapshot(**phases: tuple[str, dict[str, int]]) -> ServeStatus:
    """A controller snapshot: model -> (deployment status, replica states)."""
    deployments = {
        model: DeploymentStatusOverview(
            status=DeploymentStatus(status),
            status_trigger=DeploymentStatusTrigger.UNSPECIFIED,
            replica_states=replicas,
            message=f"{model} is {status.lower()}",
        )
        for model, (status, replicas) in phases.items()
    }
    app = ApplicationStatusOverview(
        status=ApplicationStatus.DEPLOYING,
        message="",
        last_deployed_time_s=0,
        deployments=deployments,
    )
    return ServeStatus(proxies={}, applications={"fake": app})


def test_starting_models_are_waited_for_only_when_no_model_serves() -> None:
    async def run() -> None:
        gateway = make_gateway("slow", "ok")  # `a` answers after 0.2 s: 4x first_token_timeout_s
        snapshot = _snapshot(a=("UPDATING", {"STARTING": 1}), b=("DEPLOY_FAILED", {}))
        gateway.caller.deployments = DeploymentStatusView(
            gateway.caller.handles, poll_s=0.01, read_status=lambda: snapshot
        )
        await gateway.start()
        assert gateway.caller.starting() == ["a"]
        assert gateway.caller.unavailable() == {"b": "deployment failed: b is deploy_failed"}
        waited = await route(gateway)  # nothing serves: wait for `a`, skip the failed `b`
        assert isinstance(waited, Routed) and (waited.model, waited.fallback) == ("a", ())
        assert gateway.caller.handles["a"].sent("info") == []  # no probe while starting
        assert gateway.caller.handles["b"].sent() == []

        snapshot = _snapshot(a=("UPDATING", {"STARTING": 1}), b=("HEALTHY", {"RUNNING": 1}))
        await asyncio.sleep(0.05)
        assert gateway.caller.unavailable() == {}
        served = await route(gateway)  # `b` serves: the starting `a` is passed over
        assert isinstance(served, Routed) and served.model == "b"
        assert "a: unhealthy" in served.reason and gateway.caller.handles["a"].sent() == [ANY]

    asyncio.run(run())


def test_a_model_scaled_to_zero_is_routed_to_and_waited_for() -> None:
    """`min_replicas: 0` and no traffic: the controller reports the deployment `HEALTHY` with no
    replica. It stays a candidate (not down, not starting), and a call to it waits for the
    replica Serve starts instead of probing it (a probe would queue just the same)."""

    async def run() -> None:
        gateway = make_gateway("slow", "ok")  # `a` answers after 4x first_token_timeout_s
        snapshot = _snapshot(a=("HEALTHY", {}), b=("HEALTHY", {"RUNNING": 2}))
        gateway.caller.deployments = DeploymentStatusView(
            gateway.caller.handles, poll_s=0.01, read_status=lambda: snapshot
        )
        await gateway.start()
        assert gateway.caller.deployments.get("a").phase == "idle"
        assert (gateway.caller.deployments.get("b").replicas, gateway.caller.starting()) == (2, [])
        assert gateway.caller.unavailable() == {}
        waited = await route(gateway)
        assert isinstance(waited, Routed) and waited.model == "a"
        assert gateway.caller.handles["a"].sent("info") == []  # waited, not probed

    asyncio.run(run())


def test_calls_queued_behind_busy_live_replicas_are_waited_for_not_probed() -> None:
    """`a` runs 1 call at a time and answers slowly: a second call queues in the handle. A probe
    would queue behind them and time out, marking a busy model down; while the controller
    reports `a`'s replica running (its own health checks), both calls just wait."""

    async def run() -> None:
        gateway = make_gateway("slow", "ok")  # first_token_timeout_s 0.05, answers after 0.2 s
        snapshot = _snapshot(a=("HEALTHY", {"RUNNING": 1}), b=("HEALTHY", {"RUNNING": 1}))
        gateway.caller.deployments = DeploymentStatusView(
            gateway.caller.handles, poll_s=0.01, read_status=lambda: snapshot
        )
        await gateway.start()
        body = {"model": "a", "messages": HI}
        both = await asyncio.gather(
            *(gateway.route("chat", ChatCompletionRequest, body, {}) for _ in range(2))
        )
        assert [isinstance(r, Routed) and r.model for r in both] == ["a", "a"]
        assert gateway.caller.handles["a"].sent("info") == [] and gateway.caller.health.down == {}

    asyncio.run(run())


def test_a_probe_refused_for_backpressure_finds_the_model_busy_not_down() -> None:
    """No controller report here, so a call past `first_token_timeout_s` is followed by a probe;
    the handle refuses the probe (its queue is full): the model is busy, and the call waits on."""

    async def run() -> None:
        gateway = make_gateway("slow", "ok")
        handle = gateway.caller.handles["a"]
        handle.probe_backpressure = True
        await gateway.start()
        routed = await route(gateway)
        assert isinstance(routed, Routed) and routed.model == "a"
        assert handle.sent("info") and gateway.caller.health.down == {}

    asyncio.run(run())


def test_without_a_serve_controller_every_deployment_is_unknown() -> None:
    async def run() -> None:
        gateway = make_gateway()
        await gateway.start()  # no Ray in this process: probes and timeouts alone
        assert set(gateway.caller.deployments.states.values()) == {UNKNOWN}
        assert isinstance(await route(gateway), Routed)

    asyncio.run(run())


@pytest.mark.parametrize(
    ("stream", "http", "sse"),
    [(True, True, True), (True, False, False), (False, True, False)],
    ids=["http-stream", "python-stream", "http-json"],
)
def test_only_http_streams_ask_the_replica_for_sse_bytes(
    stream: bool, http: bool, sse: bool
) -> None:
    """HTTP streams are relayed as the replica's SSE bytes; `DeploymentHandle` callers get typed
    chunks, and unary calls take no stream option."""

    async def run() -> None:
        gateway = make_gateway()
        body = {"messages": HI, "stream": stream}
        outcome = await gateway.route("chat", ChatCompletionRequest, body, {}, sse=http)
        await answer(outcome)
        (call,) = gateway.caller.handles["a"].sent()  # type: ignore[attr-defined]
        assert call.sse is sse

    asyncio.run(run())
