"""Which models are down, from failed calls, and the probes that bring them back.

A call that fails or times out marks its model down; the policy then skips it (`ModelState`
`healthy=False`). While down, the model is probed every `cooldown_s` seconds with a call that
has its own timeout (`ModelCaller.probe`: the deployment's `info`); the first probe that succeeds
marks it up again. A Ray Serve handle call to a deployment with no live replica waits for one,
so only the timeout tells a dead deployment from a slow one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

Probe = Callable[[str], Awaitable[None]]
"""Checks one model; raises when it is not serving (a timeout included)."""


class HealthView:
    """Down marks per model, each with a background probe until the model answers.

    Args:
        probe: Checks one model; must bound its own time.
        cooldown_s: Seconds before the first probe of a down model and between probes.
    """

    def __init__(self, probe: Probe, cooldown_s: float) -> None:
        self.probe = probe
        self.cooldown_s = cooldown_s
        self.down: dict[str, str] = {}
        self._probes: dict[str, asyncio.Task[None]] = {}

    def healthy(self, model: str) -> bool:
        """Whether `model` is not marked down."""
        return model not in self.down

    def mark_down(self, model: str, reason: str) -> None:
        """Mark `model` down (needs a running event loop) and probe it until it answers."""
        if model not in self.down:
            logger.warning("model %s is down: %s", model, reason)
        self.down[model] = reason
        if model not in self._probes:
            task = asyncio.get_running_loop().create_task(self._recover(model))
            self._probes[model] = task
            task.add_done_callback(lambda _: self._probes.pop(model, None))

    async def _recover(self, model: str) -> None:
        while True:
            await asyncio.sleep(self.cooldown_s)
            try:
                await self.probe(model)
            except Exception as exc:  # noqa: BLE001 - any failure means still down; probe again
                logger.info("model %s still down: %r", model, exc)
                continue
            self.down.pop(model, None)
            logger.warning("model %s is back up", model)
            return
