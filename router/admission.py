"""Admission to a model: a slot at once, or a place in this router's fair queue for the model.

A model runs `capacity` requests from this router at once (`router.load`: max_ongoing_requests
× live replicas). Beyond that, requests wait here, not in Ray's handle queue, so the order is
ours: when a slot frees, the most urgent priority goes first (a lower engine priority); within a
priority, tenants take turns by deficit round-robin, each turn releasing up to the tenant's
`weight` requests (`configs.priorities`; 1 without an entry; requests with no tenant are one
tenant, ""); within a tenant, first come, first served. So a tenant that floods a model only
lengthens its own wait: another tenant's request is released within one round.

`reserved_slots` slots of every replica are kept for the most urgent level (priority 0): the
other levels share the rest, so an urgent request finds a free slot while less urgent ones fill
the model, instead of waiting for one of theirs to finish.

The queue holds at most `max_queued_requests` (`queue_limit`; unbounded when None). When it is
full, one request is shed: one of the least urgent priority (the newcomer included); among those,
one of the tenant with the most queued at that priority (the newcomer counts for its tenant);
the newest of that tenant's. A shed request, like one that waits `response_timeout_s` without a
slot, ends with `CallFailed(saturated)`: the client gets 429 with `Retry-After` (or the next
candidate model is tried). Capacity is read whenever a slot frees or a request arrives, so it
follows the live replicas. Counts and queues are per router replica.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from router.call_context import CallContext
from router.call_failures import CallFailed
from router.load import LoadTracker
from router.metrics import RouterMetrics
from router.policy import ModelState

Weight = Callable[[str], int]
"""Tenant -> its round-robin weight (requests released per turn)."""

_arrivals = itertools.count()


@dataclass(eq=False)
class _Waiter:
    """One request waiting for a slot; `granted` resolves when it holds one."""

    tenant: str
    priority: int
    since: float
    granted: asyncio.Future[None]
    arrival: int = field(default_factory=lambda: next(_arrivals))


class _Level:
    """The waiters of one priority: tenants in round-robin order, first come first served
    within each."""

    def __init__(self) -> None:
        self.tenants: OrderedDict[str, deque[_Waiter]] = OrderedDict()
        self.credit = 0  # requests the head tenant may still take in its current turn

    def __len__(self) -> int:
        return sum(len(waiters) for waiters in self.tenants.values())

    def push(self, waiter: _Waiter) -> None:
        self.tenants.setdefault(waiter.tenant, deque()).append(waiter)  # a new tenant: last turn

    def pop(self, weight: Weight) -> _Waiter:
        tenant, waiters = next(iter(self.tenants.items()))
        if self.credit <= 0:  # the head tenant's turn starts
            self.credit = weight(tenant)
        self.credit -= 1
        waiter = waiters.popleft()
        if not waiters:
            del self.tenants[tenant]
            self.credit = 0
        elif self.credit == 0:
            self.tenants.move_to_end(tenant)
        return waiter

    def remove(self, waiter: _Waiter) -> None:
        head = next(iter(self.tenants))
        waiters = self.tenants[waiter.tenant]
        waiters.remove(waiter)
        if not waiters:
            del self.tenants[waiter.tenant]
            if waiter.tenant == head:
                self.credit = 0


class _ModelQueue:
    """One model's waiters by priority."""

    def __init__(self) -> None:
        self.levels: defaultdict[int, _Level] = defaultdict(_Level)

    def __len__(self) -> int:
        return sum(len(level) for level in self.levels.values())

    def push(self, waiter: _Waiter) -> None:
        self.levels[waiter.priority].push(waiter)

    def head(self) -> int | None:
        """The most urgent priority with a waiter, or None when empty."""
        return min((p for p, level in self.levels.items() if level.tenants), default=None)

    def pop(self, weight: Weight) -> _Waiter:
        """The next waiter to release: most urgent priority, the tenant whose turn it is."""
        priority = self.head()
        assert priority is not None, "pop from an empty queue"
        return self.levels[priority].pop(weight)

    def remove(self, waiter: _Waiter) -> None:
        self.levels[waiter.priority].remove(waiter)

    def victim(self, newcomer: _Waiter) -> _Waiter:
        """The request to shed when the queue is full and `newcomer` arrives: least urgent
        priority; of those, the tenant with the most (the newcomer counting); its newest."""
        worst = max([newcomer.priority, *(p for p, lvl in self.levels.items() if lvl.tenants)])
        level = self.levels[worst].tenants if worst in self.levels else {}
        candidates = [(len(waiters), waiters[-1]) for waiters in level.values()]
        if newcomer.priority == worst:
            queued = len(level.get(newcomer.tenant, ()))
            candidates.append((queued + 1, newcomer))
        _, shed = max(candidates, key=lambda c: (c[0], c[1].arrival))
        return shed


class Admission:
    """Slots and fair queues of every model, on top of the in-flight counts of `load`.

    Args:
        load: In-flight counts and limits per model (a slot is one count).
        weight: Tenant -> its round-robin weight.
        level_names: Level name of each engine priority (metric labels).
        timeout_s: Most seconds a request waits in a queue (`response_timeout_s`).
        metrics: Where queue time and shed requests are counted (None: not counted).
        reserved_slots: Slots per replica only priority 0 may take (`priorities.reserved_slots`).
    """

    def __init__(
        self,
        load: LoadTracker,
        weight: Weight,
        level_names: list[str],
        timeout_s: float,
        metrics: RouterMetrics | None = None,
        reserved_slots: int = 0,
    ) -> None:
        self.load = load
        self.reserved_slots = reserved_slots
        self.weight = weight
        self.level_names = level_names
        self.timeout_s = timeout_s
        self.metrics = metrics
        self.queues: defaultdict[str, _ModelQueue] = defaultdict(_ModelQueue)

    def state(self, model: str, healthy: bool) -> ModelState:
        """What the policy sees of `model`: running requests, and those queued here (plus any
        beyond a capacity that has shrunk since they started)."""
        state = self.load.state(model, healthy)
        return replace(state, queued=state.queued + len(self.queues[model]))

    async def admit(self, model: str, context: CallContext) -> None:
        """Take a slot of `model` for one request, waiting in its queue if none is free (pair
        with `release`).

        Raises:
            CallFailed: `saturated`: shed from a full queue, or no slot in `timeout_s`.
        """
        queue = self.queues[model]
        self._grant(model)  # the capacity may have grown since the last release
        loop = asyncio.get_running_loop()
        waiter = _Waiter(context.tenant or "", context.priority, loop.time(), loop.create_future())
        head = queue.head()
        if (head is None or head > waiter.priority) and self._room(model, waiter.priority):
            self.load.acquire(model)
            self._waited(model, waiter)
            return
        limit = self.load.limits[model].queue_limit
        if limit is not None and len(queue) >= limit:
            shed = queue.victim(waiter)
            failure = self._shed(model, shed, f"its queue in this router is full ({limit})")
            if shed is waiter:
                raise failure
            queue.remove(shed)
            shed.granted.set_exception(failure)
        queue.push(waiter)
        try:
            async with asyncio.timeout(self.timeout_s):  # unlike wait_for, never swallows
                await asyncio.shield(waiter.granted)  # a cancel that comes with the grant
        except TimeoutError:
            if not _holds_slot(waiter):
                queue.remove(waiter)
                raise self._shed(model, waiter, f"no slot in {self.timeout_s} s") from None
        except BaseException:  # shed, or our caller went away
            if _holds_slot(waiter):
                self.release(model)  # granted just as it gave up: pass the slot on
            elif not waiter.granted.done():
                queue.remove(waiter)
            raise
        self._waited(model, waiter)

    def release(self, model: str) -> None:
        """Free one slot of `model` and hand free slots to its queue's next requests."""
        self.load.release(model)
        self._grant(model)

    def _room(self, model: str, priority: int) -> bool:
        """Whether a request of `priority` may take a slot of `model` now: a free slot, and for
        any level but the most urgent one not among the reserved ones."""
        capacity = self.load.capacity(model)
        if priority > 0:
            replicas = capacity // self.load.limits[model].per_replica
            capacity -= self.reserved_slots * replicas
        return self.load.counts[model] < capacity

    def _grant(self, model: str) -> None:
        queue = self.queues[model]
        while (head := queue.head()) is not None and self._room(model, head):
            waiter = queue.pop(self.weight)
            self.load.acquire(model)
            waiter.granted.set_result(None)

    def _level(self, priority: int) -> str:
        names = self.level_names
        return names[priority] if 0 <= priority < len(names) else str(priority)

    def _waited(self, model: str, waiter: _Waiter) -> None:
        if self.metrics is not None:
            waited = asyncio.get_running_loop().time() - waiter.since
            self.metrics.queue_seconds.labels(model, self._level(waiter.priority)).observe(waited)

    def _shed(self, model: str, waiter: _Waiter, why: str) -> CallFailed:
        if self.metrics is not None:
            self.metrics.shed.labels(model, self._level(waiter.priority)).inc()
        level = self._level(waiter.priority)
        return CallFailed(model, "saturated", f"a {level} request was shed: {why}")


def _holds_slot(waiter: _Waiter) -> bool:
    granted = waiter.granted
    return granted.done() and not granted.cancelled() and granted.exception() is None
