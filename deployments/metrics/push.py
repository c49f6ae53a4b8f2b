"""A model replica's reporter to the metrics board (`deployments.metrics.board`).

It runs on a daemon thread of its own rather than as a Serve request or on the replica's event
loop, so that a replica whose request slots are all taken, or whose loop is busy relaying
tokens, still reports on time: its figures matter most then.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ray.serve.handle import DeploymentHandle

logger = logging.getLogger(__name__)


class MetricsPusher:
    """Pushes `exposition()` to the board now and every `interval_s` until `close`.

    Args:
        board: handle of the application's `MetricsBoard`.
        replica_id: this replica's Serve id (the `replica` label of its metrics).
        model_id: the model it serves (the router reads the boards by model).
        exposition: this replica's current Prometheus text.
        interval_s: seconds between pushes; a push waits at most this long for the board.
    """

    def __init__(
        self,
        board: DeploymentHandle,
        replica_id: str,
        model_id: str,
        exposition: Callable[[], bytes],
        interval_s: float,
    ) -> None:
        self._board = board
        self._replica_id = replica_id
        self._model_id = model_id
        self._exposition = exposition
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="metrics-push", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop pushing and take this replica off the board (a clean shutdown, so the router
        stops serving its figures at once instead of after the board's TTL). Waits at most two
        push intervals. The thread sends the leave call: `close` runs on the replica's event
        loop, where a handle's blocking `result()` is not allowed."""
        self._stop.set()
        self._thread.join(timeout=2 * self._interval_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._push()
            self._stop.wait(self._interval_s)
        try:
            self._board.drop.remote(self._replica_id).result(timeout_s=self._interval_s)
        except Exception as exc:  # the board drops it after its TTL anyway
            logger.info("replica %s: could not leave the metrics board: %s", self._replica_id, exc)

    def _push(self) -> None:
        try:
            self._board.push.remote(self._replica_id, self._model_id, self._exposition()).result(
                timeout_s=self._interval_s
            )
        except Exception as exc:  # a board restarting or unreachable: try again next interval
            if not self._failing:
                logger.warning(
                    "replica %s: metrics push to the board failed (%s); retrying every %.1f s",
                    self._replica_id,
                    exc,
                    self._interval_s,
                )
            self._failing = True
            return
        if self._failing:
            logger.info("replica %s: metrics pushes reach the board again", self._replica_id)
        self._failing = False
