"""Every model replica's engine metrics, read from the metrics boards for `GET /metrics` (and
the admission limits in them for `GET /health`).

Model replicas report to the board of the application that runs them
(`deployments.metrics.board`); a router finds that application from each model's handle, so a
second router application in front of the same models reads the same board.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families
from ray import serve
from ray.serve.handle import DeploymentHandle

from deployments.metrics.board import METRICS_BOARD

logger = logging.getLogger(__name__)


@functools.cache
def _board(app_name: str) -> DeploymentHandle:
    """The metrics board of application `app_name` (one handle per process)."""
    return serve.get_deployment_handle(METRICS_BOARD, app_name)


async def replica_expositions(
    handles: Mapping[str, DeploymentHandle], timeout_s: float
) -> list[bytes]:
    """The Prometheus text of every live replica of the models in `handles`.

    Args:
        handles: model id -> handle of its `ModelServer` deployment.
        timeout_s: seconds to wait for a board; one that does not answer in time (restarting,
            say) is skipped with a warning, and its models' metrics are missing from this scrape.
    """
    by_app: dict[str, list[str]] = {}
    for model_id, handle in handles.items():
        by_app.setdefault(handle.app_name, []).append(model_id)
    answers = await asyncio.gather(
        *(
            asyncio.wait_for(_board(app).expositions.remote(models), timeout_s)
            for app, models in by_app.items()
        ),
        return_exceptions=True,
    )
    texts: list[bytes] = []
    for app, answer in zip(by_app, answers):
        if isinstance(answer, BaseException):
            logger.warning("metrics board of application %r did not answer: %r", app, answer)
            continue
        texts.extend(answer)
    return texts


BATCH_LIMIT_GAUGES = {
    "ascend_router_engine_max_num_seqs": "max_num_seqs",
    "ascend_router_engine_max_num_batched_tokens": "max_num_batched_tokens",
}
"""Engine gauges of the scheduler's admission limits now (`engine.metrics`) -> their setting."""


def batch_limits(expositions: list[bytes]) -> dict[str, dict[str, dict[str, int]]]:
    """The admission limits each replica last reported, for `GET /health`.

    With `engine.slo` set they move step by step (`engine.slo_controller`); otherwise they are
    the configured `max_num_seqs` / `max_num_batched_tokens`.

    Args:
        expositions: replicas' Prometheus texts, as `replica_expositions` returns them.

    Returns:
        model id -> replica id -> `{"max_num_seqs": n, "max_num_batched_tokens": m}`.
    """
    limits: dict[str, dict[str, dict[str, int]]] = {}
    for text in expositions:
        for family in text_string_to_metric_families(text.decode()):
            setting = BATCH_LIMIT_GAUGES.get(family.name)
            for sample in family.samples if setting is not None else ():
                model, replica = sample.labels["model_name"], sample.labels["replica"]
                limits.setdefault(model, {}).setdefault(replica, {})[setting] = int(sample.value)
    return limits
