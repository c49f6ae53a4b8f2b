"""Compiling the decode graphs (`engine.decode_graphs`) while the engine already serves eagerly.

A cold compile costs ~39 s per size on SmolLM2 with 2 cores, so compiling every size before the
replica reported ready kept a fresh replica from answering for minutes. Now the replica reports
ready with an eager engine and one background thread compiles the sizes, smallest first; each size
is put in use as soon as its graph is compiled (`ModelRunner.graphs_in_use`): decode steps of that
size replay it from the next step on, the others stay eager. Each switch is logged (`decode graph
of N rows in use after S s`) and counted (`ascend_router_decode_graphs_in_use`).

Why compiling beside live steps is safe in one process (`Executor.concurrent_capture`), and
responsive:
- The capture step holds padding rows only: it writes the padding block, which no request owns,
  and inductor writes the KV cache in place at the step's slots (its generated code stores each
  new K/V row at its slot, no copy of the cache; checked on torch 2.13), so no block of a live
  sequence is read or written. Padding rows of the engine's own graph steps share that block;
  their results are discarded.
- The forward context (`engine.forward_context`), grad and inference mode and the OpenMP thread
  count are per thread: this thread sets, for each size, the thread count the engine will run that
  size with (inductor bakes it into the graph and dynamo guards on it); the engine thread keeps
  its own.
- Only this thread compiles. The engine thread replays sizes already in use, whose guards pass,
  so it never waits on dynamo's compile lock.
- The engine thread's kernels release the GIL (`npu_ops/cpu_kernels/gil.h`; a SmolLM2 eager decode
  step makes ~150 such calls), and while this thread traces (pure Python) each waits up to the
  interpreter's switch interval to get it back: 150 GIL-releasing 20 us calls took 0.63 s beside a
  Python-bound thread at the default 5 ms, 0.06 s at 0.2 ms, 0.025 s alone (2 shared cores). The
  interval is lowered to `SWITCH_INTERVAL_S` while this thread compiles.
- Dynamo restores the process's global RNG state when a compile ends
  (`torch._dynamo.convert_frame.preserve_global_state`); unseeded sampling does not draw from it
  (`engine.sampler.unseeded_generator`), so no draw repeats.

Tensor parallel ranks (`engine.parallel`) capture before the replica is ready, as before: a
capture step's collectives would interleave with the engine's steps on the ranks' process group.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable

import torch

from engine.decode_graphs import DecodeGraphSpec
from engine.executor import Executor

logger = logging.getLogger(__name__)

SWITCH_INTERVAL_S = 0.0002
"""The interpreter's GIL switch interval while graphs compile in the background (default 5 ms),
so that the engine thread gets the GIL back soon after each kernel."""


class DecodeGraphCapture:
    """The compilation of an engine's decode graphs, one size after another.

    Args:
        executor: the engine's executor, its KV cache allocated.
        graphs: the batch sizes to compile.
        set_threads: sets this thread's CPU intra-op threads for a step of that many tokens, so
            each graph is compiled with the threads it will run with.
    """

    def __init__(
        self, executor: Executor, graphs: DecodeGraphSpec, set_threads: Callable[[int], None]
    ) -> None:
        self._executor = executor
        self._graphs = graphs
        self._set_threads = set_threads
        self._done = threading.Event()
        self._background = False

    def run(self) -> None:
        """Compile every size on this thread, putting each in use once compiled.

        Raises:
            Exception: a size failed to compile, when run before the engine serves; in the
                background (`start`) the failure is logged and that size stays eager.
        """
        torch._dynamo.config.recompile_limit = max(
            torch._dynamo.config.recompile_limit, 2 * len(self._graphs.batch_sizes)
        )
        start = time.perf_counter()
        interval = sys.getswitchinterval()
        if self._background:
            sys.setswitchinterval(min(interval, SWITCH_INTERVAL_S))
        try:
            for size in self._graphs.batch_sizes:
                began = time.perf_counter()
                self._set_threads(size)
                try:
                    self._executor.capture(size)
                except Exception:
                    if not self._background:
                        raise  # start-up fails, as any start-up error does
                    # the replica serves on, that size eager; the log says why
                    logger.exception("decode graph of %d rows failed to compile: eager", size)
                    continue
                logger.info(
                    "decode graph of %d rows in use after %.1f s (compiled in %.1f s)",
                    size,
                    time.perf_counter() - start,
                    time.perf_counter() - began,
                )
            logger.info(
                "%d of %d decode graphs in use after %.1f s",
                len(self._executor.decode_graphs_in_use()),
                len(self._graphs.batch_sizes),
                time.perf_counter() - start,
            )
        finally:
            sys.setswitchinterval(interval)
            self._done.set()

    def start(self) -> None:
        """Run `run` on a background (daemon) thread and return at once."""
        self._background = True
        threading.Thread(target=self.run, name="decode-graph-capture", daemon=True).start()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until every size was tried (compiled or failed); False on timeout."""
        return self._done.wait(timeout_s)


def wait_for_decode_graphs(executor: Executor, sizes: Iterable[int], timeout_s: float) -> bool:
    """Block until every size of `sizes` is in use (for benchmarks and tests that must measure
    graph steps only); False if some still is not after `timeout_s`."""
    want = frozenset(sizes)
    deadline = time.monotonic() + timeout_s
    while not want <= executor.decode_graphs_in_use():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def capture_decode_graphs(
    executor: Executor, graphs: DecodeGraphSpec, set_threads: Callable[[int], None]
) -> DecodeGraphCapture:
    """Compile the decode graphs of `graphs`: in the background when the executor allows it
    (`Executor.concurrent_capture`; returns at once, the engine serves eagerly meanwhile), else
    here, before the engine serves.

    Args:
        executor: the engine's executor, its KV cache allocated.
        graphs: the batch sizes to compile.
        set_threads: sets the calling thread's CPU intra-op threads for a step of that many
            tokens.

    Returns:
        The capture, to wait on (`DecodeGraphCapture.wait`).
    """
    capture = DecodeGraphCapture(executor, graphs, set_threads)
    if executor.concurrent_capture:
        logger.info(
            "serving eagerly while %d decode graphs compile in the background",
            len(graphs.batch_sizes),
        )
        capture.start()
    else:
        capture.run()
    return capture
