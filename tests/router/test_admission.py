"""The router's fair admission queue (`router.admission`), on plain asyncio: release order by
priority then weighted round-robin across tenants, shedding, cancellation and timeouts, and no
slot leaked."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from prometheus_client import generate_latest

from router.admission import Admission
from router.call_context import CallContext
from router.call_failures import CallFailed
from router.load import LoadTracker, ModelLimits
from router.metrics import RouterMetrics

LEVELS = ["interactive", "standard", "batch"]
M = "m"


def make_admission(
    capacity: int = 1,
    queue_limit: int | None = None,
    weights: dict[str, int] | None = None,
    timeout_s: float = 5.0,
) -> Admission:
    load = LoadTracker({M: ModelLimits(capacity, 1, queue_limit)})
    weight = (weights or {}).get
    return Admission(
        load, lambda t: weight(t) or 1, LEVELS, timeout_s, RouterMetrics(level_names=LEVELS)
    )


def ask(tenant: str | None = None, priority: int = 1) -> CallContext:
    return CallContext(tenant=tenant, priority=priority)


async def queued(admission: Admission, contexts: list[CallContext]) -> list[asyncio.Task[None]]:
    """Queue `contexts` in order behind a held slot (all slots must be taken)."""
    tasks = []
    for context in contexts:
        tasks.append(asyncio.ensure_future(admission.admit(M, context)))
        await settle()  # each reaches the queue before the next: arrival order
    assert len(admission.queues[M]) == len(contexts)
    return tasks


async def release_order(admission: Admission, tasks: list[asyncio.Task[None]]) -> list[int]:
    """Free the held slot once per task; the indices of the tasks in the order they got it."""
    order: list[int] = []
    for _ in tasks:
        admission.release(M)
        await settle()
        granted = [i for i, t in enumerate(tasks) if t.done() and i not in order]
        assert len(granted) == 1, granted
        order.extend(granted)
    return order


async def settle() -> None:
    """Let every ready task run to its next wait (a grant takes a few loop turns to land)."""
    for _ in range(10):
        await asyncio.sleep(0)


def run(test: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(test())  # type: ignore[arg-type]


def test_a_free_slot_is_taken_at_once_and_counted_at_zero_wait() -> None:
    async def go() -> None:
        admission = make_admission(capacity=2)
        await admission.admit(M, ask())
        await admission.admit(M, ask())
        assert admission.load.counts[M] == 2 and admission.state(M, True).queued == 0
        text = generate_latest(admission.metrics.registry).decode()  # type: ignore[union-attr]
        assert 'ascend_router_queue_seconds_count{model="m",priority="standard"} 2.0' in text

    run(go)


def test_the_most_urgent_priority_goes_first_then_arrival() -> None:
    async def go() -> list[int]:
        admission = make_admission()
        await admission.admit(M, ask())
        tasks = await queued(admission, [ask("a", 2), ask("a", 1), ask("a", 0), ask("a", 1)])
        assert admission.state(M, True).queued == 4
        return await release_order(admission, tasks)

    assert run(go) == [2, 1, 3, 0]


def test_tenants_take_turns_by_weight_within_a_priority() -> None:
    """A floods 6 before B and C queue 2 each: B and C are not served after all of A; with
    weight 2, A takes two per turn."""

    async def go(weights: dict[str, int]) -> list[str]:
        admission = make_admission(weights=weights)
        await admission.admit(M, ask())
        names = ["a"] * 6 + ["b", "c", "b", "c"]
        tasks = await queued(admission, [ask(n) for n in names])
        return [names[i] for i in await release_order(admission, tasks)]

    assert run(lambda: go({})) == list("abcabcaaaa")
    assert run(lambda: go({"a": 2})) == list("aabcaabcaa")


def test_requests_without_a_tenant_are_one_tenant() -> None:
    async def go() -> list[int]:
        admission = make_admission()
        await admission.admit(M, ask())
        tasks = await queued(admission, [ask(None), ask(None), ask("t"), ask(None)])
        return await release_order(admission, tasks)

    assert run(go) == [0, 2, 1, 3]


def test_a_full_queue_sheds_the_least_urgent_of_the_biggest_tenant_newest_first() -> None:
    async def go() -> None:
        admission = make_admission(queue_limit=4)
        await admission.admit(M, ask())
        a_old, b_batch, a_batch, c_std = await queued(
            admission, [ask("a", 2), ask("b", 2), ask("a", 2), ask("c", 1)]
        )
        # an interactive newcomer displaces a batch request: a has the most batch, its newest
        urgent = asyncio.ensure_future(admission.admit(M, ask("c", 0)))
        await settle()
        with pytest.raises(CallFailed, match="batch request was shed") as shed:
            await a_batch
        assert shed.value.kind == "saturated"
        # a batch newcomer of a new tenant: its tenant now has 1, like a and b; it is newest
        with pytest.raises(CallFailed, match="queue in this router is full"):
            await admission.admit(M, ask("d", 2))
        # a batch newcomer of b: b has 2 (with it), the most: the newcomer itself
        with pytest.raises(CallFailed):
            await admission.admit(M, ask("b", 2))
        assert not (a_old.done() or b_batch.done() or c_std.done() or urgent.done())
        text = generate_latest(admission.metrics.registry).decode()  # type: ignore[union-attr]
        assert 'ascend_router_shed_total{model="m",priority="batch"} 3.0' in text
        for _ in range(5):
            admission.release(M)
            await settle()
        assert urgent.done() and c_std.done() and a_old.done() and b_batch.done()

    run(go)


def test_a_zero_queue_limit_refuses_beyond_capacity() -> None:
    async def go() -> None:
        admission = make_admission(queue_limit=0)
        await admission.admit(M, ask())
        with pytest.raises(CallFailed):
            await admission.admit(M, ask(priority=0))
        admission.release(M)
        assert admission.load.counts[M] == 0

    run(go)


def test_a_cancelled_waiter_leaves_the_queue_and_leaks_no_slot() -> None:
    async def go() -> None:
        admission = make_admission()
        await admission.admit(M, ask())
        first, second = await queued(admission, [ask("a"), ask("b")])
        first.cancel()
        await settle()
        assert admission.state(M, True).queued == 1
        admission.release(M)
        await second
        # granted and cancelled in the same turn: the slot goes on to the next waiter
        third, fourth = await queued(admission, [ask("a"), ask("b")])
        admission.release(M)
        third.cancel()
        await settle()
        assert third.cancelled() and fourth.done() and admission.load.counts[M] == 1
        admission.release(M)
        assert admission.load.counts[M] == 0 and len(admission.queues[M]) == 0

    run(go)


def test_no_request_waits_past_the_timeout() -> None:
    async def go() -> None:
        admission = make_admission(timeout_s=0.05)
        await admission.admit(M, ask())
        with pytest.raises(CallFailed, match=r"no slot in 0\.05 s") as timed_out:
            await admission.admit(M, ask("a", 2))
        assert timed_out.value.kind == "saturated" and len(admission.queues[M]) == 0
        admission.release(M)
        assert admission.load.counts[M] == 0

    run(go)


def test_capacity_is_read_when_a_slot_frees() -> None:
    async def go() -> None:
        live = {M: 1}
        load = LoadTracker({M: ModelLimits(1, 1, None)}, live.get)
        admission = Admission(load, lambda _: 1, LEVELS, 5.0)
        await admission.admit(M, ask())
        tasks = await queued(admission, [ask(), ask(), ask()])
        live[M] = 3  # two more replicas came up
        admission.release(M)
        await settle()
        assert [t.done() for t in tasks] == [True, True, True] and load.counts[M] == 3

    run(go)


def test_reserved_slots_let_the_most_urgent_level_start_at_once() -> None:
    async def go() -> None:
        load = LoadTracker({M: ModelLimits(2, 1, None)})
        admission = Admission(load, lambda _: 1, LEVELS, 5.0, None, reserved_slots=1)
        await admission.admit(M, ask("flood", priority=2))  # one slot left: the reserved one
        batch = asyncio.ensure_future(admission.admit(M, ask("flood", priority=2)))
        await settle()
        assert not batch.done()  # a batch request may not take the reserved slot
        await asyncio.wait_for(admission.admit(M, ask("steady", priority=0)), 1)  # at once
        assert load.counts[M] == 2 and not batch.done()
        admission.release(M)  # the urgent one ends: its slot is reserved again
        await settle()
        assert not batch.done()
        admission.release(M)  # the first batch one ends: the waiting one takes its slot
        await settle()
        assert batch.done() and load.counts[M] == 1

    run(go)
