"""Every Serve YAML in configs/ validates against the typed config models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from configs.model_config import RouterAppConfig
from router.app import APP_NAME

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_config_validates(path: Path) -> None:
    cfg = yaml.safe_load(path.read_text())
    (app,) = cfg["applications"]
    assert app["name"] == APP_NAME and app["route_prefix"] == "/"
    assert app["import_path"] == "router.app:build_app"
    config = RouterAppConfig.model_validate(app["args"])
    assert config.default in {m.model_id for m in config.models}


def test_prod_uses_npus_and_parallelism() -> None:
    cfg = yaml.safe_load((CONFIGS[0].parent / "prod.yaml").read_text())
    config = RouterAppConfig.model_validate(cfg["applications"][0]["args"])
    for m in config.models:
        opts = m.deployment.ray_actor_options
        assert opts["num_gpus"] == 0
        # tp 1: the replica holds the NPU; tp > 1: each rank actor reserves its own NPU
        npus = opts.get("resources", {}).get("NPU", 0)
        assert npus == (1 if m.tensor_parallel_size == 1 else 0)
    assert any(m.expert_parallel and m.tensor_parallel_size > 1 for m in config.models)


SHAPE = {
    "num_parameters": 32763876352,
    "num_layers": 64,
    "num_kv_heads": 8,
    "k_head_dim": 128,
    "v_head_dim": 128,
    "max_model_len": 32768,
}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"models": []}, "at least 1"),
        ({"models": [{"model_id": "a", "source": {}}]}, "exactly one of"),
        ({"models": [{"model_id": "a", "source": {"path": "/x"}}], "default_model": "b"}, "'b'"),
        (
            {"models": [{"model_id": "a", "source": {"path": "/x"}, "engine": {"blocks": 3}}]},
            "blocks",
        ),
        (
            {
                "models": [
                    {
                        "model_id": "a",
                        "source": {"path": "/x"},
                        "engine": {
                            "pipeline_parallel_size": 2,
                            "pipeline_layer_partition": [30, 30],
                        },
                        "shape": SHAPE,
                    }
                ]
            },
            r"pipeline_layer_partition \[30, 30\] sums to 60, but shape.num_layers is 64",
        ),
        (
            {
                "models": [
                    {
                        "model_id": "a",
                        "family": "deepseek_v4",
                        "source": {"path": "/x"},
                        "engine": {"kv_cache_dtype": "int8"},
                    }
                ]
            },
            "kv_cache_dtype=int8 is not supported for DeepSeek-V4",
        ),
        (
            {
                "models": [
                    {
                        "model_id": "a",
                        "source": {"path": "/x"},
                        "tensor_parallel_size": 2,
                        "engine_process": True,
                    }
                ]
            },
            "engine_process runs one-rank replicas only, but this one has 2 ranks",
        ),
    ],
    ids=[
        "no-models",
        "no-source",
        "unknown-default",
        "unknown-engine-field",
        "partition-vs-shape",
        "v4-8bit-kv",
        "engine-process-on-two-ranks",
    ],
)
def test_bad_config_names_the_problem(args: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RouterAppConfig.model_validate(args)


@pytest.mark.parametrize(
    ("autoscaling", "message"),
    [
        ({"max_replica": 2}, r"unknown autoscaling_config fields \['max_replica'\]"),
        ({"min_replicas": 3, "max_replicas": 2}, "must be greater than or equal to min_replicas"),
    ],
    ids=["typo", "min-over-max"],
)
def test_autoscaling_config_is_checked_against_ray_serves_own(
    autoscaling: dict[str, int], message: str
) -> None:
    from configs.deployment_options import DeploymentOptions

    with pytest.raises(ValidationError, match=message):
        DeploymentOptions.model_validate({"autoscaling_config": autoscaling})


def test_the_router_takes_what_its_models_run_and_queue() -> None:
    def model(model_id: str, **deployment: Any) -> dict[str, Any]:
        return {"model_id": model_id, "source": {"path": "/x"}, "deployment": deployment}

    two = [
        model("a", num_replicas=2, max_ongoing_requests=4, max_queued_requests=8),
        model("b", max_ongoing_requests=16, max_queued_requests=32),
    ]
    config = RouterAppConfig.model_validate({"models": two})
    assert config.router_deployment.max_ongoing_requests == 64 + 2 * 4 + 8 + 16 + 32
    unbounded = [model("a", max_queued_requests=-1)]
    config = RouterAppConfig.model_validate({"models": unbounded})
    assert config.router_deployment.max_ongoing_requests == 10_000
    chosen = {"models": two, "router_deployment": {"max_ongoing_requests": 7}}
    assert RouterAppConfig.model_validate(chosen).router_deployment.max_ongoing_requests == 7


def test_every_replica_takes_requests_beyond_grpcs_default_message_size() -> None:
    """The router streams from its models over Serve's gRPC channel (one message per request):
    each deployment's runtime env raises the bound, keeping what the config set there."""
    from configs.deployment_options import GRPC_MESSAGE_BYTES, GRPC_MESSAGE_ENV, DeploymentOptions

    plain = DeploymentOptions().serve_options()["ray_actor_options"]
    assert plain == {
        "num_cpus": 0.5,
        "runtime_env": {"env_vars": {GRPC_MESSAGE_ENV: str(GRPC_MESSAGE_BYTES)}},
    }
    own = {"pip": ["x"], "env_vars": {"A": "1", GRPC_MESSAGE_ENV: "1000"}}
    options = DeploymentOptions(ray_actor_options={"num_cpus": 1, "runtime_env": own})
    got = options.serve_options()["ray_actor_options"]
    assert got == {"num_cpus": 1, "runtime_env": own}
    assert options.ray_actor_options["runtime_env"] == own  # the config itself is not changed
