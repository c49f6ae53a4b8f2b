"""The replica's front of an engine that steps in its own process (`engine.core_process`).

`ProcessEngine` offers what `engine.async_engine.AsyncEngine` offers (it satisfies
`deployments.engine_client.EngineClient`), but the engine and its step loop live in a child
process, so a step never waits for the replica's GIL (`ModelDeploymentConfig.engine_process`).
The replica keeps one reader thread, which takes each step's outputs off the socket, records
them in the metrics with the step's own end time and hands them to their callers' event loops.

Failure handling matches `AsyncEngine`'s: a request the engine refuses raises `RequestRejected`
from `add`; when the core process dies (a step raised, or it was killed) every queued and
running request ends with an error output (`error_kind="dead"`), later `add`s raise
`EngineDead`, and `dead_reason()` says why, which fails the replica's health check. A core that
has sent nothing for `stall_timeout_s` while requests run counts as stalled.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, Listener
from typing import Any

from engine.core_process import AUTHKEY_ENV
from engine.llm_engine import EngineStats, LLMEngine
from engine.metrics import EngineMetrics
from engine.multimodal.inputs import MediaItem
from engine.outputs import RequestOutput
from engine.request_stats import RequestTimes, SampleGroup
from engine.request_stream import Add, EngineDead, RequestRejected, RequestStream, hand_over, settle
from engine.sampling_params import SamplingParams
from engine.wire import Sender, recv

logger = logging.getLogger(__name__)

_STOP_WAIT_S = 10.0  # how long `shutdown` waits for the core to exit before killing it
_CONNECT_POLL_S = 0.5
_REAP_WAIT_S = 2.0  # how long a core whose connection ended may take to exit


class ProcessEngine:
    """Asyncio front of an engine in a child process.

    Args:
        build: makes the engine; pickled (by reference: an importable class or function and
            its arguments) and called in the child, which alone touches the engine.
        metrics: where to record load and latency figures (None: not recorded); may be set
            once the engine is built, before the first request, as with `AsyncEngine`.
        stall_timeout_s: seconds the core may stay silent while requests run before the engine
            counts as stuck.

    Raises:
        Exception: whatever `build` raised in the child (an unpicklable one as `RuntimeError`).
        RuntimeError: the child exited before its engine was built.
    """

    def __init__(
        self,
        build: Callable[[], LLMEngine],
        metrics: EngineMetrics | None = None,
        stall_timeout_s: float = 600.0,
    ) -> None:
        self.metrics = metrics
        self._stall_timeout_s = stall_timeout_s
        self._lock = threading.RLock()  # the maps below and `_dead` (re-entered from `__del__`)
        self._sender = Sender()
        self._send_lock = threading.RLock()  # pickle and queue in one order (see `_send`)
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._waiting_since: float | None = None  # first message sent since the core last spoke
        self._pending: dict[str, Add] = {}  # sent, not yet admitted
        self._streams: dict[str, Add] = {}  # admitted, not finished
        self._calls: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[object]]] = {}
        self._call_ids = itertools.count()
        self._dead: str | None = None
        self._stopping = False
        self._dir = tempfile.mkdtemp(prefix="ascend-router-core-")
        self._proc, self._conn = self._start(os.path.join(self._dir, "core.sock"))
        try:
            self._conn.send_bytes(self._sender.dumps(build))
            reply = recv(self._conn)
        except (EOFError, OSError):
            reply = ("build_error", RuntimeError(self._exit_reason()))
        except BaseException:  # `build` does not pickle, say: leave no child behind
            self._close()
            raise
        if reply[0] == "build_error":
            self._close()
            raise reply[1]
        _, self._max_model_len, self._vocab_size, self._stats = reply
        self._last_heard = time.monotonic()
        self._reader = threading.Thread(target=self._read, name="engine-core-reader", daemon=True)
        self._reader.start()
        self._writer = threading.Thread(target=self._write, name="engine-core-writer", daemon=True)
        self._writer.start()

    def _start(self, address: str) -> tuple[subprocess.Popen[bytes], Connection]:
        """Start the child and accept its connection (or raise if it exits first)."""
        authkey = os.urandom(32)
        listener = Listener(address, family="AF_UNIX", authkey=authkey)
        env = dict(os.environ)
        env[AUTHKEY_ENV] = authkey.hex()
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # Ray's working_dir too
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine.core_process", address, str(os.getpid())], env=env
        )
        accepted: list[Connection] = []

        def accept() -> None:
            try:
                accepted.append(listener.accept())
            except OSError:  # closed below: the child died first
                pass

        waiter = threading.Thread(target=accept, name="engine-core-accept", daemon=True)
        waiter.start()
        while waiter.is_alive() and proc.poll() is None:
            waiter.join(_CONNECT_POLL_S)
        listener.close()
        waiter.join()
        if not accepted:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise RuntimeError(f"the engine core process exited with code {proc.poll()}")
        return proc, accepted[0]

    @property
    def max_model_len(self) -> int:
        """Context length in tokens."""
        return int(self._max_model_len)

    @property
    def vocab_size(self) -> int:
        """Width of the model's logits (token ids are below it)."""
        return int(self._vocab_size)

    def stats(self) -> EngineStats:
        """Load figures as of the last step."""
        stats: EngineStats = self._stats
        return stats

    async def add(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        group: SampleGroup | None = None,
        media: tuple[MediaItem, ...] = (),
    ) -> RequestStream:
        """Queue a request; return once the engine holds it (see `AsyncEngine.add`).

        Raises:
            EngineDead: the core process is not running.
            RequestRejected: the engine refused the request.
        """
        loop = asyncio.get_running_loop()
        add = Add(
            request_id,
            prompt_token_ids,
            params,
            media,
            asyncio.Queue(),
            loop,
            loop.create_future(),
            RequestTimes(time.monotonic(), group),
        )
        with self._lock:
            dead = self._dead
            if dead is None:
                self._pending[request_id] = add
        if dead is not None:
            raise EngineDead(dead)
        try:
            payload = self._sender.dumps((prompt_token_ids, params, media))
        except Exception as exc:  # a constraint that cannot travel, say: this request alone
            with self._lock:
                self._pending.pop(request_id, None)
            raise RequestRejected(f"the request cannot be sent to the engine core: {exc}") from exc
        self._send(("add", request_id, payload))
        try:
            await add.admitted
        except asyncio.CancelledError:  # the caller went away while the engine took it
            self._abort(request_id)
            raise
        return RequestStream(add, self._abort)

    async def load_lora(self, name: str, path: str) -> None:
        """Load a LoRA adapter in the core, between steps (`LLMEngine.load_lora`).

        Raises:
            EngineDead: the core process is not running.
            ValueError: the adapter is refused (the message names the option).
        """
        await self._call("load_lora", name, path)

    async def unload_lora(self, name: str) -> None:
        """Unload a LoRA adapter in the core (`LLMEngine.unload_lora`).

        Raises:
            EngineDead: the core process is not running.
            ValueError: unknown adapter, or requests using it are queued or running.
        """
        await self._call("unload_lora", name)

    async def _call(self, method: str, *args: Any) -> object:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[object] = loop.create_future()
        call_id = next(self._call_ids)
        with self._lock:
            dead = self._dead
            if dead is None:
                self._calls[call_id] = (loop, done)
        if dead is not None:
            raise EngineDead(dead)
        self._send(("call", call_id, method, args))
        return await done

    def alive(self) -> bool:
        """Whether the core runs and has not been silent for `stall_timeout_s` with requests."""
        return self.dead_reason() is None

    def dead_reason(self) -> str | None:
        """Why the engine cannot serve (core exited, or stalled); None while it can."""
        if self._dead is not None:
            return self._dead
        if self._proc.poll() is not None:
            return self._exit_reason()
        running = bool(self._streams)  # read before the times: the reader sets them first
        waiting_since, last_heard = self._waiting_since, self._last_heard
        now = time.monotonic()
        stalled = running and now - last_heard > self._stall_timeout_s
        if waiting_since is not None and now - waiting_since > self._stall_timeout_s:
            stalled = True  # commands unanswered, even with no request left running
        if stalled:
            return f"the engine core has sent nothing for over {self._stall_timeout_s} s"
        return None

    def shutdown(self) -> None:
        """Stop the core process (outstanding requests end with finish reason `abort`)."""
        self._stopping = True
        self._outbox.put(self._sender.dumps(("stop",)))
        self._outbox.put(None)
        try:
            self._proc.wait(_STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout=_STOP_WAIT_S)
        self._writer.join(timeout=_STOP_WAIT_S)
        self._close()

    def _close(self) -> None:
        self._conn.close()
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _exit_reason(self) -> str:
        return f"the engine core process exited with code {self._proc.poll()}"

    def _send(self, message: tuple[Any, ...]) -> None:
        """Pickle a message and queue it for the core. Safe from any thread and from `__del__`
        (a stream dropped unread aborts its request): the writer thread alone writes to the
        socket, in the order messages were pickled (`engine.wire.Sender`).

        Raises:
            Exception: the message does not pickle (`add` pickles its payload first).
        """
        with self._send_lock:
            data = self._sender.dumps(message)
            if self._waiting_since is None:
                self._waiting_since = time.monotonic()
            self._outbox.put(data)

    def _write(self) -> None:
        """The writer thread: send queued messages in order until `shutdown` (a broken
        connection is the reader's to report: it sees EOF)."""
        while (data := self._outbox.get()) is not None:
            try:
                self._conn.send_bytes(data)
            except Exception:  # closed or broken: the reader reports it
                pass

    def _abort(self, request_id: str) -> None:
        with self._lock:
            self._pending.pop(request_id, None)
            self._streams.pop(request_id, None)
            if self._dead is not None:
                return
        self._send(("abort", request_id))

    def _read(self) -> None:
        """The reader thread: dispatch the core's messages until it goes away."""
        reason = None
        try:
            while reason is None:
                message = recv(self._conn)
                self._last_heard = time.monotonic()
                self._waiting_since = None
                reason = self._dispatch(message)
        except (EOFError, OSError):  # the core exited, or was stopped: its exit code says which
            pass
        except Exception as exc:  # a message that does not unpickle: the wire cannot be trusted
            logger.exception("engine core: reading its messages failed")
            reason = f"the engine core's messages could not be read: {exc}"
        if reason is None and self._stopping:
            reason = "the engine was shut down"
        else:
            self._reap()  # its socket closes before it is reaped: wait for the exit code
            reason = reason or self._exit_reason()
            logger.error("engine core: %s", reason)
        self._end_all(reason)

    def _reap(self) -> None:
        """Wait for the core to exit (briefly), killing it if it has not."""
        try:
            self._proc.wait(_REAP_WAIT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def _dispatch(self, message: tuple[Any, ...]) -> str | None:
        """Apply one message from the core; return why the core died, if it says so."""
        kind = message[0]
        if kind == "step":
            _, ended_at, stats, outputs = message
            self._stats = stats  # before the outputs: callers see this step's
            if self.metrics is not None:
                self.metrics.observe_step(stats)
            for out in outputs:
                self._deliver(out, ended_at)
        elif kind == "admitted":
            _, request_id, queued_at, error = message
            with self._lock:
                add = self._pending.pop(request_id, None)
                if add is not None and error is None:
                    self._streams[request_id] = add
            if add is not None:
                add.times.queued = queued_at
                settle(
                    add.loop, add.admitted, None, None if error is None else RequestRejected(error)
                )
        elif kind == "called":
            _, call_id, result, error = message
            with self._lock:
                call = self._calls.pop(call_id, None)
            if call is not None:
                settle(call[0], call[1], result, error)
        elif kind == "died":
            return str(message[1])
        return None

    def _deliver(self, out: RequestOutput, now: float) -> None:
        with self._lock:
            add = self._streams.get(out.request_id)
            if add is not None and out.finished:
                del self._streams[out.request_id]
        if add is not None and not hand_over(add, out, now, self.metrics) and not out.finished:
            self._abort(out.request_id)  # nobody waits for it: free its KV blocks

    def _end_all(self, reason: str) -> None:
        """End every request the core held (error outputs, or `abort` ones on shutdown) and
        make every later `add` and call fail with `EngineDead`."""
        with self._lock:
            self._dead = reason
            pending, self._pending = self._pending, {}
            streams, self._streams = self._streams, {}
            calls, self._calls = self._calls, {}
        for add in pending.values():
            settle(add.loop, add.admitted, None, EngineDead(reason))
        for loop, done in calls.values():
            settle(loop, done, None, EngineDead(reason))
        now = time.monotonic()
        for request_id, add in streams.items():
            n = len(add.prompt_token_ids)
            if self._stopping:
                out = RequestOutput(request_id, (), True, "abort", n, 0)
            else:
                out = RequestOutput(
                    request_id, (), True, "error", n, 0, error=reason, error_kind="dead"
                )
            hand_over(add, out, now, self.metrics)
