"""Start-up: config and policy validation, capabilities, deployment options, API keys, limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from app_args import local_app_args
from pydantic import ValidationError

from configs.deployment_options import GRPC_MESSAGE_BYTES, GRPC_MESSAGE_ENV, DeploymentOptions
from configs.model_config import UNKNOWN_CONTEXT, RouterAppConfig
from configs.monitoring import MonitoringConfig
from deployments.metrics.board import METRICS_BOARD
from router.app import build_app
from router.auth import authorized
from router.load import LoadTracker, ModelLimits
from router.lora_registry import LORA_REGISTRY


def with_policy(**policy: Any) -> dict[str, Any]:
    auto = {"auto": ["smollm2-long", "smollm2-fast"]}
    return {**local_app_args(), "policy": {"aliases": auto, **policy}}


def test_local_capabilities_come_from_the_model_configs() -> None:
    config = RouterAppConfig.model_validate(local_app_args())
    caps = config.capabilities()
    assert (caps["smollm2-fast"].context_length, caps["smollm2-fast"].supports_tools) == (
        2048,
        False,
    )
    assert (caps["smollm2-long"].context_length, caps["smollm2-long"].supports_tools) == (
        8192,
        True,
    )
    assert config.default == "smollm2-long"


def test_context_without_max_model_len_is_learned() -> None:
    args = local_app_args()
    del args["models"][0]["engine"]["max_model_len"]
    config = RouterAppConfig.model_validate(args)
    assert config.capabilities()["smollm2-fast"].context_length == UNKNOWN_CONTEXT
    assert config.capabilities({"smollm2-fast": 2048})["smollm2-fast"].context_length == 2048


def test_no_policy_routes_auto_to_the_default_model() -> None:
    args = {k: v for k, v in local_app_args().items() if k != "policy"}
    config = RouterAppConfig.model_validate({**args, "default_model": "smollm2-fast"})
    assert config.routing_policy().fallback_targets() == ["smollm2-fast"]
    assert config.default == "smollm2-fast"


# fmt: off
BAD_POLICIES = [
    (with_policy(rules=[{"name": "to-nowhere", "targets": ["gpt-9"]}]),
     r"rule 'to-nowhere' targets names unknown model 'gpt-9'"),
    (with_policy(rules=[{"name": "tools-on-fast", "when": {"has_tools": True},
                         "targets": ["smollm2-fast"]}]),
     r"rule 'tools-on-fast'.*supports_tools"),
    (with_policy(rules=[{"name": "huge", "when": {"prompt_tokens_gt": 9000},
                         "targets": ["smollm2-long"]}]),
     r"rule 'huge'.*context"),
    (with_policy(rules=[{"name": "r", "targets": ["smollm2-long"]},
                        {"name": "r2", "when": {"stream": True}, "targets": ["smollm2-long"]}]),
     r"rule 'r2' is unreachable"),
    ({**local_app_args(), "default_model": "smollm2-fast"}, "give default_model or policy"),
    (with_policy(aliases={"auto": ["smollm2-long"], "smollm2-fast": ["smollm2-long"]}),
     "same name as a served model"),
]
# fmt: on


@pytest.mark.parametrize(("args", "message"), BAD_POLICIES)
def test_bad_policy_fails_in_build_app_naming_it(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        build_app(args)


def test_deployment_options_reach_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    args = local_app_args()
    args["models"][1]["deployment"] = {
        "autoscaling_config": {"min_replicas": 1, "max_replicas": 3},
        "max_ongoing_requests": 7,
        "max_queued_requests": 9,
        "ray_actor_options": {"num_cpus": 0.25, "resources": {"NPU": 1}},
    }
    monkeypatch.setenv("ASCEND_ROUTER_API_KEYS", "k1, k2")
    router = build_app(args)._bound_deployment  # Ray has no public accessor for this
    config_arg, models, registry = router.init_args
    assert registry is None  # no model allows runtime LoRA loading
    assert config_arg["api_keys"] == ["k1", "k2"]
    fast = models["smollm2-fast"]._bound_deployment
    long = models["smollm2-long"]._bound_deployment
    assert (fast.name, fast.num_replicas, fast.max_ongoing_requests) == (
        "model-smollm2-fast",
        1,
        16,
    )
    grpc = {"env_vars": {GRPC_MESSAGE_ENV: str(GRPC_MESSAGE_BYTES)}}
    assert fast.max_queued_requests == 32
    assert fast.ray_actor_options == {"num_cpus": 0.5, "runtime_env": grpc}
    assert long._deployment_config.autoscaling_config.max_replicas == 3
    assert (long.max_ongoing_requests, long.max_queued_requests) == (7, 9)
    assert long.ray_actor_options == {
        "num_cpus": 0.25,
        "resources": {"NPU": 1},
        "runtime_env": grpc,
    }


def test_every_model_reports_to_the_applications_one_metrics_board() -> None:
    _, models, _ = build_app(local_app_args())._bound_deployment.init_args
    boards = set()
    for model in models.values():
        _, board, monitoring, _ = model._bound_deployment.init_args
        boards.add(id(board))
        assert board._bound_deployment.name == METRICS_BOARD
        assert monitoring == MonitoringConfig().model_dump()
    assert len(boards) == 1


def test_runtime_lora_binds_one_registry_for_the_router_and_the_models(tmp_path: Path) -> None:
    args = local_app_args()
    lora = {"allow_runtime_lora": True, "lora_root": str(tmp_path)}
    args["models"][1]["engine"]["lora"] = lora
    _, models, registry = build_app(args)._bound_deployment.init_args
    assert registry._bound_deployment.name == LORA_REGISTRY
    regs = [m._bound_deployment.init_args[3] for m in models.values()]
    assert all(r is registry for r in regs)


def test_configured_api_keys_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_ROUTER_API_KEYS", "from-env")
    config_arg, _, _ = build_app(
        {**local_app_args(), "api_keys": ["from-yaml"]}
    )._bound_deployment.init_args
    assert config_arg["api_keys"] == ["from-yaml"]


@pytest.mark.parametrize(
    ("headers", "keys", "ok"),
    [
        ({}, [], True),
        ({"authorization": "Bearer anything"}, [], True),
        ({}, ["k1"], False),
        ({"authorization": "Bearer k1"}, ["k1", "k2"], True),
        ({"authorization": "bearer  k2 "}, ["k1", "k2"], True),
        ({"authorization": "Bearer k3"}, ["k1", "k2"], False),
        ({"authorization": "Basic k1"}, ["k1"], False),
        ({"authorization": "Bearer "}, ["k1"], False),
        ({"authorization": "Bearer k1k1"}, ["k1"], False),
        ({"x-api-key": "k2"}, ["k1", "k2"], True),  # Anthropic's clients
        ({"x-api-key": "k3"}, ["k1", "k2"], False),
        ({"authorization": "Basic x", "x-api-key": "k1"}, ["k1"], True),
    ],
)
def test_authorized(headers: dict[str, str], keys: list[str], ok: bool) -> None:
    assert authorized(headers, keys) is ok


@pytest.mark.parametrize(
    ("options", "limits"),
    [
        ({"num_replicas": 2, "max_ongoing_requests": 4, "max_queued_requests": 3}, (8, 3)),
        ({"autoscaling_config": {"max_replicas": 5}, "max_ongoing_requests": 2}, (10, 256)),
        ({"max_ongoing_requests": 4, "max_queued_requests": -1}, (4, None)),
    ],
)
def test_limits_from_deployment_options(
    options: dict[str, Any], limits: tuple[int, int | None]
) -> None:
    got = ModelLimits.from_options(DeploymentOptions.model_validate(options))
    assert (got.capacity(live=None), got.queue_limit) == limits


def test_capacity_follows_the_live_replicas_not_max_replicas() -> None:
    """An autoscaled model (up to 4 replicas of 2) with 1, 3, then 0 replicas running: the
    router queues and refuses by what runs; at zero (scaled down, or starting) one replica's
    worth is admitted, so a call waits for the replica Serve starts rather than get a 429."""
    options = {"autoscaling_config": {"min_replicas": 0, "max_replicas": 4},
               "max_ongoing_requests": 2, "max_queued_requests": 1}  # fmt: skip
    live: dict[str, int | None] = {"m": 1}
    tracker = LoadTracker(
        {"m": ModelLimits.from_options(DeploymentOptions.model_validate(options))}, live.get
    )
    for _ in range(3):  # 2 running on the one replica + 1 queued
        assert not tracker.saturated("m")
        tracker.acquire("m")
    assert tracker.saturated("m") and tracker.state("m", True).queued == 1
    live["m"] = 3
    assert not tracker.saturated("m") and tracker.state("m", True).in_flight == 3
    assert tracker.capacity("m") == 6
    live["m"] = 0
    assert tracker.capacity("m") == 2 and tracker.saturated("m")
    tracker.release("m")
    tracker.release("m")
    assert not tracker.saturated("m")


def test_load_tracker_states_and_saturation() -> None:
    tracker = LoadTracker({"m": ModelLimits(2, 1, queue_limit=1), "u": ModelLimits(1, 1, None)})
    for _ in range(3):
        assert not tracker.saturated("m")
        tracker.acquire("m")
    assert tracker.saturated("m")
    state = tracker.state("m", healthy=True)
    assert (state.in_flight, state.queued, state.queue_limit, state.load) == (2, 1, 1, 3)
    tracker.release("m")
    assert not tracker.saturated("m") and tracker.state("m", True).queued == 0
    for _ in range(50):
        tracker.acquire("u")
    assert not tracker.saturated("u")
    zero = LoadTracker({"z": ModelLimits(1, 1, queue_limit=0)})
    assert not zero.saturated("z")
    zero.acquire("z")
    assert zero.saturated("z")
