"""Compiling the decode graphs (`engine.decode_graphs`) of a freshly built engine."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch
from tqdm import tqdm

from engine.decode_graphs import DecodeGraphSpec
from engine.executor import Executor

logger = logging.getLogger(__name__)


def capture_decode_graphs(
    executor: Executor, graphs: DecodeGraphSpec, set_threads: Callable[[int], None]
) -> None:
    """Compile every decode graph of `graphs` before the first request, with a progress bar.

    Args:
        executor: the engine's executor, its KV cache allocated.
        graphs: the batch sizes to capture.
        set_threads: sets the CPU intra-op threads for a step of that many tokens, so each
            graph is captured with the threads it will run with.
    """
    torch._dynamo.config.recompile_limit = max(
        torch._dynamo.config.recompile_limit, 2 * len(graphs.batch_sizes)
    )
    start = time.perf_counter()
    for size in tqdm(graphs.batch_sizes, desc="capturing decode graphs", unit="graph"):
        began = time.perf_counter()
        set_threads(size)
        executor.capture(size)
        logger.info("decode graph of %d rows ready in %.1f s", size, time.perf_counter() - began)
    logger.info(
        "%d decode graphs ready in %.1f s", len(graphs.batch_sizes), time.perf_counter() - start
    )
