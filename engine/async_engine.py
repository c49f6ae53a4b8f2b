"""Drives `LLMEngine` from a background thread and streams outputs to asyncio callers.

The engine thread owns all engine state, and builds the engine itself: every OpenMP parallel
region of the process then starts from that one thread. A second thread that has run one (the
one that loaded the weights, say) keeps its own OpenMP team, and with more OpenMP threads than
cores libgomp throttles its spin-waits; on 2 cores that made the engine thread's int4 GEMVs 2×
slower (SmolLM2 decode step 24 ms → 39 ms). Callers talk to the thread only through a locked
inbox of add/abort commands, and it hands outputs back with `loop.call_soon_threadsafe`. Aborts
are applied before the next step, so a cancelled caller's blocks are freed within one step.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from engine.llm_engine import EngineStats, LLMEngine
from engine.metrics import EngineMetrics
from engine.outputs import RequestOutput
from engine.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Add:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    queue: asyncio.Queue[RequestOutput]
    loop: asyncio.AbstractEventLoop


@dataclass(frozen=True)
class _Abort:
    request_id: str


class AsyncEngine:
    """Asyncio front of one engine.

    Args:
        build: makes the engine; called on the engine thread, which alone touches it afterwards
            (`engine` stays readable for its immutable settings, e.g. `vocab_size`).
        metrics: where to record load and latency figures (None: not recorded).

    Raises:
        Exception: whatever `build` raised (start-up errors surface in the constructor).
    """

    def __init__(
        self, build: Callable[[], LLMEngine], metrics: EngineMetrics | None = None
    ) -> None:
        self.engine: LLMEngine  # set on the engine thread by `build`
        self.metrics = metrics
        self._inbox: list[_Add | _Abort] = []
        self._cond = threading.Condition()
        self._streams: dict[str, _Add] = {}
        self._stopped = False
        self._built = threading.Event()
        self._build_error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(build,), name="engine-loop", daemon=True
        )
        self._thread.start()
        self._built.wait()
        if self._build_error is not None:
            raise self._build_error
        self._stats = self.engine.stats()

    @property
    def max_model_len(self) -> int:
        """Context length in tokens."""
        return self.engine.max_model_len

    def stats(self) -> EngineStats:
        """Load figures as of the last step."""
        return self._stats

    def check_request(self, prompt_token_ids: list[int], params: SamplingParams) -> None:
        """Validate before streaming starts (reads only immutable engine settings).

        Raises:
            ValueError: see `LLMEngine.check_request`.
        """
        self.engine.check_request(prompt_token_ids, params)

    async def generate(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams
    ) -> AsyncIterator[RequestOutput]:
        """Submit a request and yield its outputs until it finishes.

        Closing the iterator early (client gone, task cancelled) aborts the request.

        Raises:
            ValueError: the request is invalid (raised before anything is yielded).
        """
        self.check_request(prompt_token_ids, params)
        queue: asyncio.Queue[RequestOutput] = asyncio.Queue()
        self._send(_Add(request_id, prompt_token_ids, params, queue, asyncio.get_running_loop()))
        finished = False
        start = time.monotonic()
        first: float | None = None
        try:
            while not finished:
                out = await queue.get()
                finished = out.finished
                first = first or time.monotonic()
                if finished and self.metrics is not None and out.error is None:
                    now = time.monotonic()
                    self.metrics.observe_request(
                        first - start, now - start, out.num_prompt_tokens, out.num_output_tokens
                    )
                yield out
        finally:
            if not finished:
                self._send(_Abort(request_id))

    def alive(self) -> bool:
        """Whether the engine thread is running."""
        return self._thread.is_alive()

    def shutdown(self) -> None:
        """Stop the engine thread (outstanding requests end with finish reason `abort`)."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=10)
        self.engine.shutdown()

    def _send(self, cmd: _Add | _Abort) -> None:
        with self._cond:
            self._inbox.append(cmd)
            self._cond.notify()

    def _deliver(self, out: RequestOutput) -> None:
        stream = self._streams.get(out.request_id)
        if stream is None:
            return
        if out.finished:
            del self._streams[out.request_id]
        stream.loop.call_soon_threadsafe(stream.queue.put_nowait, out)

    def _apply(self, cmds: list[_Add | _Abort]) -> None:
        for cmd in cmds:
            if isinstance(cmd, _Abort):
                self.engine.abort(cmd.request_id)
                self._streams.pop(cmd.request_id, None)
                continue
            try:
                self.engine.add_request(cmd.request_id, cmd.prompt_token_ids, cmd.params)
                self._streams[cmd.request_id] = cmd
            except Exception as exc:  # reported to that caller only; the loop goes on
                err = RequestOutput(
                    cmd.request_id,
                    (),
                    True,
                    "error",
                    len(cmd.prompt_token_ids),
                    0,
                    error=str(exc),
                )
                cmd.loop.call_soon_threadsafe(cmd.queue.put_nowait, err)

    def _run(self, build: Callable[[], LLMEngine]) -> None:
        try:
            self.engine = build()
        except BaseException as exc:  # handed to the constructor, which re-raises it
            self._build_error = exc
            return
        finally:
            self._built.set()
        self._loop()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._inbox and not self.engine.has_unfinished() and not self._stopped:
                    self._cond.wait()
                cmds, self._inbox = self._inbox, []
                stopped = self._stopped
            if stopped:
                for rid in list(self._streams):
                    self.engine.abort(rid)
                    self._deliver(RequestOutput(rid, (), True, "abort", 0, 0))
                return
            self._apply(cmds)
            for out in self.engine.step():
                self._deliver(out)
            self._stats = self.engine.stats()
            if self.metrics is not None:
                self.metrics.observe_step(self._stats)
