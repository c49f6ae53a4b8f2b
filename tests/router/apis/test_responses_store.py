"""`ResponseStore`: bounded by entries (least recently used out first) and by age (a fake
monotonic clock), 404 `not_found` for what it does not hold."""

from __future__ import annotations

from typing import Any

import pytest

from deployments.protocol.errors import OpenAIError
from router.apis.responses import ResponseStore


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def response(rid: str) -> dict[str, Any]:
    return {"id": rid, "object": "response"}


def make_store(max_entries: int = 3, ttl_s: float = 10.0) -> tuple[ResponseStore, FakeClock]:
    clock = FakeClock()
    return ResponseStore(max_entries=max_entries, ttl_s=ttl_s, clock=clock), clock


def held(store: ResponseStore, *ids: str) -> list[str]:
    out = []
    for rid in ids:
        try:
            store.get(rid)
        except OpenAIError:
            continue
        out.append(rid)
    return out


def test_a_stored_response_comes_back_with_its_conversation() -> None:
    store, _ = make_store()
    messages = [{"role": "user", "content": "Hi"}]
    store.put(response("a"), messages)
    entry = store.get("a")
    assert entry.response == response("a") and entry.messages is messages


def test_the_least_recently_used_entry_goes_first() -> None:
    store, _ = make_store(max_entries=3)
    for rid in "abc":
        store.put(response(rid), [])
    store.get("a")  # now b is the least recently used
    store.put(response("d"), [])
    assert len(store) == 3
    assert held(store, "a", "b", "c", "d") == ["a", "c", "d"]


def test_entries_expire_ttl_after_storing_even_when_read() -> None:
    store, clock = make_store(ttl_s=10)
    store.put(response("a"), [])
    clock.now = 5
    store.put(response("b"), [])
    clock.now = 9.9
    assert held(store, "a", "b") == ["a", "b"]
    clock.now = 10
    assert held(store, "a", "b") == ["b"]
    clock.now = 15
    assert held(store, "a", "b") == [] and len(store) == 0


def test_storing_again_renews_an_entry() -> None:
    store, clock = make_store(ttl_s=10)
    store.put(response("a"), [])
    clock.now = 8
    store.put(response("a") | {"status": "completed"}, [])
    clock.now = 12
    assert store.get("a").response["status"] == "completed"


def test_unknown_and_deleted_ids_are_404_not_found() -> None:
    store, _ = make_store()
    store.put(response("a"), [])
    store.delete("a")
    for rid in ("a", "never"):
        with pytest.raises(OpenAIError) as info:
            store.get(rid, param="previous_response_id")
        err = info.value
        assert (err.status_code, err.code, err.param) == (404, "not_found", "previous_response_id")
        assert repr(rid) in str(err)
    with pytest.raises(OpenAIError) as info:
        store.delete("a")
    assert info.value.status_code == 404 and info.value.param == "response_id"


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [({"max_entries": 0}, "max_entries"), ({"ttl_s": 0}, "ttl_s"), ({"max_bytes": 0}, "max_bytes")],
)
def test_bounds_must_be_positive(kwargs, word) -> None:
    with pytest.raises(ValueError, match=word):
        ResponseStore(**kwargs)


def test_bytes_bound_the_store_and_shared_messages_count_once() -> None:
    """An image-sized message (a data URL's text) counts by its length; a follow-up that
    continues the conversation shares its message objects, which count once; eviction of the
    least recently used keeps the total under `max_bytes`, and forgetting returns the bytes."""
    store = ResponseStore(max_entries=100, max_bytes=25_000)
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x" * 10_000}}]}
    store.put(response("r1"), [image])
    after_one = store.bytes
    assert 10_000 < after_one < 10_200
    reply = {"role": "assistant", "content": "ok"}
    store.put(response("r2"), [image, reply])  # a follow-up: the image counted once
    assert store.bytes < after_one + 200
    other = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "y" * 10_000}}]}
    store.put(response("r3"), [other])
    assert store.bytes <= 25_000 and held(store, "r1", "r2", "r3") == ["r1", "r2", "r3"]
    third = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "z" * 10_000}}]}
    store.put(response("r4"), [third])  # over: r1 goes, but r2 still holds the first image
    assert held(store, "r1", "r2", "r3", "r4") == ["r3", "r4"]  # r1 then r2 (the image's bytes)
    assert store.bytes <= 25_000
    store.delete("r3")
    store.delete("r4")
    assert store.bytes == 0 and len(store) == 0


def test_a_response_larger_than_the_budget_is_kept_alone() -> None:
    store = ResponseStore(max_bytes=100)
    store.put(response("small"), [{"role": "user", "content": "hi"}])
    store.put(response("big"), [{"role": "user", "content": "x" * 1000}])
    assert held(store, "small", "big") == ["big"]
