"""The engine core process: `LLMEngine`'s step loop alone in a process of its own.

Run as `python -m engine.core_process ADDRESS PARENT_PID` by `engine.process_engine.ProcessEngine`
(the replica side), with the connection's key in the environment variable `AUTHKEY_ENV`. vLLM V1
splits its server the same way (`EngineCore` in its own process, fed over a socket), for the same
reason: a step that shares a process with the serving threads waits for their GIL after each
kernel. Measured on SmolLM2 on 2 cores, one thread at batch 1: 21 ms per decode step in a plain
process, 26-28 ms on the replica's engine thread; served from a core process, TPOT was 0.83x the
thread front's at one stream and 0.69x at 16, interleaved in one run (docs/benchmarks.md).

The wire is one AF_UNIX socket (`multiprocessing.connection`, authenticated), each message one
pickled tuple (`engine.wire`).

From the replica:
- the engine's build callable (first message; pickled by reference: an importable class and its
  arguments);
- `("add", request_id, payload)`: `payload` pickles `(prompt_token_ids, params, media)`, read
  inside the request's own error handling (a request that does not unpickle is refused alone);
- `("abort", request_id)`;
- `("call", call_id, method, args)`: an `LLMEngine` method run between steps (LoRA load / unload);
- `("stop",)`.

To the replica:
- `("built", max_model_len, vocab_size, stats)` or `("build_error", exception)`;
- `("admitted", request_id, queued_at, error)`: `error` is None, or why `add_request` refused it;
- `("step", ended_at, stats, outputs)`: after every step, its `RequestOutput`s (possibly none;
  a step also follows every batch of commands, so the stats show what an abort freed);
- `("called", call_id, result, exception)`;
- `("died", reason)`: the loop raised; the process then exits.

Times are `time.monotonic()` seconds, one clock for every process of the host.

The process ends itself when the replica does: the kernel sends it SIGKILL when its parent exits
(Linux `PR_SET_PDEATHSIG`), and it checks its parent's pid while idle.
"""

from __future__ import annotations

import ctypes
import logging
import os
import pickle
import signal
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Client, Connection
from typing import Any

from configs.envs import log_level
from engine.llm_engine import LLMEngine
from engine.wire import Sender, loads, recv

logger = logging.getLogger(__name__)

AUTHKEY_ENV = "ASCEND_ROUTER_ENGINE_CORE_AUTHKEY"
"""Environment variable holding the connection's key (hex) for the child."""

CALLABLE_METHODS = frozenset({"load_lora", "unload_lora"})
"""The `LLMEngine` methods a `("call", ...)` message may name."""

_IDLE_POLL_S = 1.0  # how often an idle core checks that its parent lives
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class ReplicaGone(Exception):
    """The connection to the replica closed or broke."""


def portable_error(exc: BaseException) -> BaseException:
    """`exc` if it survives a pickle round trip, else a `RuntimeError` with its type and message."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


class _Link:
    """The core's end of the connection: connection errors become `ReplicaGone`, so that an
    `OSError` of the engine itself is not taken for the replica's exit."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._sender = Sender()

    def send(self, message: tuple[Any, ...]) -> None:
        data = self._sender.dumps(message)
        try:
            self._conn.send_bytes(data)
        except OSError as exc:
            raise ReplicaGone(str(exc)) from exc

    def recv(self) -> Any:
        try:
            return recv(self._conn)
        except (EOFError, OSError) as exc:
            raise ReplicaGone(str(exc)) from exc

    def poll(self, timeout: float) -> bool:
        try:
            return self._conn.poll(timeout)
        except (EOFError, OSError) as exc:
            raise ReplicaGone(str(exc)) from exc


def serve(link: _Link, engine: LLMEngine, parent_pid: int) -> None:
    """Apply the replica's commands between steps, and step after them and while requests
    remain.

    Returns on `("stop",)`, or when the parent is gone while the engine is idle.

    Raises:
        ReplicaGone: the connection to the replica broke.
        Exception: whatever a step raised (the caller reports it as `("died", ...)`).
    """
    while True:
        if not engine.has_unfinished():
            while not link.poll(_IDLE_POLL_S):
                if os.getppid() != parent_pid:
                    return
        while link.poll(0):
            message = link.recv()
            if message[0] == "stop":
                return
            _apply(link, engine, message)
        outputs = engine.step()  # also after commands alone: the stats then show what they freed
        link.send(("step", time.monotonic(), engine.stats(), outputs))


def _apply(link: _Link, engine: LLMEngine, message: tuple[Any, ...]) -> None:
    kind = message[0]
    if kind == "abort":
        engine.abort(message[1])
    elif kind == "add":
        _, request_id, payload = message
        try:
            prompt_token_ids, params, media = loads(payload)
            engine.add_request(request_id, prompt_token_ids, params, media)
        except Exception as exc:  # that request's error alone; the loop goes on
            link.send(("admitted", request_id, 0.0, f"{exc}"))
        else:
            link.send(("admitted", request_id, time.monotonic(), None))
    elif kind == "call":
        _, call_id, method, args = message
        if method not in CALLABLE_METHODS:
            link.send(("called", call_id, None, ValueError(f"unknown engine call {method!r}")))
            return
        try:
            result = getattr(engine, method)(*args)
        except Exception as exc:  # the caller's error; the loop goes on
            link.send(("called", call_id, None, portable_error(exc)))
        else:
            link.send(("called", call_id, result, None))
    else:
        raise ValueError(f"unknown engine core message {kind!r}")


def _die_with_parent() -> None:
    """Ask the kernel for SIGKILL when the parent exits (Linux); elsewhere the idle check only.

    The signal follows the thread that started this process, so `ProcessEngine` must be
    built on a thread that lives as long as the replica (its event loop's)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError) as exc:
        logger.warning("engine core: PR_SET_PDEATHSIG not set (%s)", exc)


def main(argv: list[str]) -> int:
    """Connect to the replica at `argv[0]`, build the engine it sends, and serve it.

    Returns:
        The exit code: 0 after `stop` or once the replica is gone, 1 when the build or a step
        raised (the replica has been told why).
    """
    logging.basicConfig(level=log_level())
    address, parent_pid = argv[0], int(argv[1])
    _die_with_parent()
    if os.getppid() != parent_pid:  # the parent died before the request above took hold
        return 0
    conn = Client(address, family="AF_UNIX", authkey=bytes.fromhex(os.environ.pop(AUTHKEY_ENV)))
    link = _Link(conn)
    try:
        build: Callable[[], LLMEngine] = link.recv()
        engine = build()
    except ReplicaGone:
        return 0
    except BaseException as exc:
        logger.exception("engine core: the engine failed to build")
        try:
            link.send(("build_error", portable_error(exc)))
        except ReplicaGone:
            pass
        return 1
    try:
        link.send(("built", engine.max_model_len, engine.vocab_size, engine.stats()))
        serve(link, engine, parent_pid)
    except ReplicaGone:
        return 0
    except BaseException as exc:
        logger.exception("engine core: the engine loop died")
        try:
            link.send(("died", f"the engine loop died: {exc}"))
        except ReplicaGone:
            pass
        return 1
    finally:
        engine.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
