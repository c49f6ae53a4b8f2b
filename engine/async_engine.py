"""Drives `LLMEngine` from a background thread and streams outputs to asyncio callers.

The engine thread owns all engine state, and builds the engine itself: every OpenMP parallel
region of the process then starts from that one thread. A second thread that has run one (the
one that loaded the weights, say) keeps its own OpenMP team, and with more OpenMP threads than
cores libgomp throttles its spin-waits; on 2 cores that made the engine thread's int4 GEMVs 2×
slower (SmolLM2 decode step 24 ms → 39 ms). Callers talk to the thread only through a locked
inbox of add/abort commands, and it hands outputs back with `loop.call_soon_threadsafe`. Aborts
are applied before the next step, so a cancelled caller's blocks are freed within one step.

`add` returns once the engine has queued the request, so a caller knows admission succeeded
before it answers its client. If the loop dies, every queued and running request ends at once
with an error output (`error_kind="dead"`), later `add`s raise `EngineDead`, and `alive()` turns
False (as it does when one step runs past `stall_timeout_s`), which fails the replica's health
check so that Ray Serve replaces it.

Metrics (`engine.metrics`, when given) are recorded on the engine thread as outputs leave it:
every output of a step is stamped with the step's end, so a request's TTFT and the gaps between
its tokens are those of the engine, not of the event loop that relays them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from engine.llm_engine import EngineStats, LLMEngine
from engine.metrics import EngineMetrics
from engine.multimodal.inputs import MediaItem
from engine.outputs import RequestOutput
from engine.request_stats import RequestTimes, SampleGroup
from engine.request_stream import (
    Add,
    EngineDead,
    RequestRejected,
    RequestStream,
    hand_over,
    settle,
)
from engine.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Abort:
    request_id: str


@dataclass(frozen=True)
class _Call:
    """Run `fn` on the engine thread between steps (adapter load/unload); its result or
    exception settles `done`."""

    fn: Callable[[LLMEngine], object]
    loop: asyncio.AbstractEventLoop
    done: asyncio.Future[object]


_Command = Add | _Abort | _Call


class AsyncEngine:
    """Asyncio front of one engine.

    Args:
        build: makes the engine; called on the engine thread, which alone touches it afterwards
            (`engine` stays readable for its immutable settings, e.g. `vocab_size`).
        metrics: where to record load and latency figures (None: not recorded). The attribute
            may be set once the engine is built (the token-count buckets depend on its
            `max_model_len`), before the first request.
        stall_timeout_s: seconds one step may run before the engine counts as stuck
            (`alive()` turns False, so the replica's health check fails).

    Raises:
        Exception: whatever `build` raised (start-up errors surface in the constructor).
    """

    def __init__(
        self,
        build: Callable[[], LLMEngine],
        metrics: EngineMetrics | None = None,
        stall_timeout_s: float = 600.0,
    ) -> None:
        self.engine: LLMEngine  # set on the engine thread by `build`
        self.metrics = metrics
        self._stall_timeout_s = stall_timeout_s
        self._inbox: list[_Command] = []
        self._cond = threading.Condition()
        self._streams: dict[str, Add] = {}
        self._stopped = False
        self._dead: str | None = None  # why the loop ended, once it has
        self._step_started: float | None = None
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

    @property
    def vocab_size(self) -> int:
        """Width of the model's logits (token ids are below it)."""
        return self.engine.vocab_size

    def stats(self) -> EngineStats:
        """Load figures as of the last step."""
        return self._stats

    async def add(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        group: SampleGroup | None = None,
        media: tuple[MediaItem, ...] = (),
    ) -> RequestStream:
        """Queue a request; return once the engine holds it (its outputs follow in the stream).

        The caller validated the request (context length, token ids): the engine's own check
        is an invariant. `group`: the sample group it belongs to when one prompt is sampled
        several times (OpenAI `n`), for the metrics. `media`: the prompt's images and audio
        clips (`LLMEngine.add_request`).

        Raises:
            EngineDead: the engine loop is not running.
            RequestRejected: the engine refused the request.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[RequestOutput] = asyncio.Queue()
        times = RequestTimes(time.monotonic(), group)
        admitted = loop.create_future()
        add = Add(request_id, prompt_token_ids, params, media, queue, loop, admitted, times)
        self._send(add)
        try:
            await add.admitted
        except asyncio.CancelledError:  # the caller went away while the engine took it
            self._send(_Abort(request_id))
            raise
        return RequestStream(add, lambda request_id: self._send(_Abort(request_id)))

    async def load_lora(self, name: str, path: str) -> None:
        """Load a LoRA adapter (`LLMEngine.load_lora`) on the engine thread, between steps; the
        adapter is read and checked there, so steps wait for the read.

        Raises:
            EngineDead: the engine loop is not running.
            ValueError: the adapter is refused (the message names the option).
        """
        await self._call(lambda engine: engine.load_lora(name, path))

    async def unload_lora(self, name: str) -> None:
        """Unload a LoRA adapter (`LLMEngine.unload_lora`) on the engine thread.

        Raises:
            EngineDead: the engine loop is not running.
            ValueError: unknown adapter, or requests using it are queued or running.
        """
        await self._call(lambda engine: engine.unload_lora(name))

    async def _call(self, fn: Callable[[LLMEngine], object]) -> object:
        loop = asyncio.get_running_loop()
        call = _Call(fn, loop, loop.create_future())
        self._send(call)
        return await call.done

    def alive(self) -> bool:
        """Whether the engine loop runs and no step has been running for `stall_timeout_s`."""
        return self.dead_reason() is None

    def dead_reason(self) -> str | None:
        """Why the engine cannot serve (loop ended or a step stalled); None while it can."""
        if self._dead is not None:
            return self._dead
        if not self._thread.is_alive():
            return "the engine loop is not running"
        started = self._step_started
        if started is not None and time.monotonic() - started > self._stall_timeout_s:
            return f"an engine step has been running for over {self._stall_timeout_s} s"
        return None

    def shutdown(self) -> None:
        """Stop the engine thread (outstanding requests end with finish reason `abort`)."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=10)
        self.engine.shutdown()

    def _send(self, cmd: _Command) -> None:
        with self._cond:
            if self._dead is None:
                self._inbox.append(cmd)
                self._cond.notify()
                return
        if isinstance(cmd, Add):  # nobody will take it: fail it now
            settle(cmd.loop, cmd.admitted, None, EngineDead(self._dead))
        elif isinstance(cmd, _Call):
            settle(cmd.loop, cmd.done, None, EngineDead(self._dead))

    def _deliver(self, out: RequestOutput, now: float) -> None:
        """Hand an output, from the step that ended at `now`, to its caller."""
        stream = self._streams.get(out.request_id)
        if stream is None:
            return
        if out.finished:
            del self._streams[out.request_id]
        if not hand_over(stream, out, now, self.metrics):
            self._streams.pop(out.request_id, None)
            if not out.finished:
                self.engine.abort(out.request_id)  # its KV blocks go back to the pool

    def _apply(self, cmds: list[_Command]) -> None:
        for cmd in cmds:
            if isinstance(cmd, _Abort):
                self.engine.abort(cmd.request_id)
                self._streams.pop(cmd.request_id, None)
                continue
            if isinstance(cmd, _Call):
                try:
                    result = cmd.fn(self.engine)
                except Exception as exc:  # the caller's error; the loop goes on
                    settle(cmd.loop, cmd.done, None, exc)
                else:
                    settle(cmd.loop, cmd.done, result, None)
                continue
            try:
                self.engine.add_request(cmd.request_id, cmd.prompt_token_ids, cmd.params, cmd.media)
            except Exception as exc:  # reported to that caller only; the loop goes on
                settle(cmd.loop, cmd.admitted, None, RequestRejected(str(exc)))
                continue
            cmd.times.queued = time.monotonic()
            self._streams[cmd.request_id] = cmd
            settle(cmd.loop, cmd.admitted, None, None)

    def _run(self, build: Callable[[], LLMEngine]) -> None:
        try:
            self.engine = build()
        except BaseException as exc:  # handed to the constructor, which re-raises it
            self._build_error = exc
            return
        finally:
            self._built.set()
        try:
            self._loop()
        except BaseException as exc:  # the loop died (a rank is gone, say): nobody may wait on it
            logger.exception("the engine loop died")
            self._fail_all(f"the engine loop died: {exc}")

    def _fail_all(self, reason: str) -> None:
        """End every queued and running request with an error output (`error_kind="dead"`),
        and make every later `add` fail at once with `EngineDead`."""
        with self._cond:
            self._dead = reason
            cmds, self._inbox = self._inbox, []
        for cmd in cmds:
            if isinstance(cmd, Add):
                settle(cmd.loop, cmd.admitted, None, EngineDead(reason))
            elif isinstance(cmd, _Call):
                settle(cmd.loop, cmd.done, None, EngineDead(reason))
        now = time.monotonic()
        for rid in list(self._streams):
            stream = self._streams[rid]
            n = len(stream.prompt_token_ids)
            self._deliver(
                RequestOutput(rid, (), True, "error", n, 0, error=reason, error_kind="dead"), now
            )

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._inbox and not self.engine.has_unfinished() and not self._stopped:
                    self._cond.wait()
                cmds, self._inbox = self._inbox, []
                stopped = self._stopped
            if stopped:
                now = time.monotonic()
                for rid in list(self._streams):
                    self.engine.abort(rid)
                    n = len(self._streams[rid].prompt_token_ids)
                    self._deliver(RequestOutput(rid, (), True, "abort", n, 0), now)
                self._dead = "the engine was shut down"
                return
            self._apply(cmds)
            self._step_started = time.monotonic()
            outputs = self.engine.step()
            now = time.monotonic()
            self._step_started = None
            self._stats = self.engine.stats()  # before the outputs: callers see this step's
            if self.metrics is not None:
                self.metrics.observe_step(self._stats)
            for out in outputs:
                self._deliver(out, now)
