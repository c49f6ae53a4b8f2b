"""Stored responses: what `GET /v1/responses/{id}` returns and what `previous_response_id`
continues.

Each entry holds a response's JSON and the chat messages of its whole conversation so far (its
input, after the conversation it continued, then its own output as an assistant message), so a
follow-up prepends them to its own input. Instructions are not part of the stored conversation:
OpenAI documents that "when using along with `previous_response_id`, the instructions from a
previous response will not be carried over to the next response" (API reference, "Responses:
create", `instructions`).

The store is bounded: at most `max_entries` and `max_bytes` (the least recently used entry is
evicted first), each for at most `ttl_s` seconds after it was stored. Bytes are the characters of
the strings a response and its messages hold (a data-URL image counts its base64 text), each
message counted once however many stored conversations share it. It lives in the memory of one
router replica: with more than one router replica, a follow-up (`previous_response_id`, `GET`,
`DELETE`) may land on a replica that does not hold the response and is answered 404. The default
single router replica is correct; more replicas need sticky sessions or a shared store.

A follow-up's conversation shares the message dicts of the one it continues (a new list of the
same objects), so a chain of n turns holds each message once; stored messages are never mutated.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from deployments.protocol.errors import OpenAIError


@dataclass(frozen=True)
class StoredResponse:
    """One stored response.

    Attributes:
        response: the Response object's JSON, as last sent to the client.
        messages: the chat messages of the conversation through this response's output
            (without instructions).
        stored_at: the store clock's time of storing, in seconds.
    """

    response: dict[str, Any]
    messages: list[dict[str, Any]]
    stored_at: float


class ResponseStore:
    """A bounded, in-memory LRU store of responses, keyed by response id.

    Args:
        max_entries: responses kept at most; storing one more evicts the least recently used.
        ttl_s: seconds a response is kept after it was stored.
        max_bytes: string bytes kept at most (see the module docstring); storing past it evicts
            the least recently used until it fits (a single larger response is kept alone).
        clock: monotonic seconds (injectable for tests).

    Raises:
        ValueError: `max_entries` or `max_bytes` below 1, or `ttl_s` not positive.
    """

    def __init__(
        self,
        max_entries: int = 1024,
        ttl_s: float = 3600.0,
        max_bytes: int = 256 << 20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError(
                f"max_entries ({max_entries}) and max_bytes ({max_bytes}) must be >= 1"
            )
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, not {ttl_s}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self.clock = clock
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()  # in use order
        self._by_age: OrderedDict[str, float] = OrderedDict()  # in storing order: oldest first
        self._held: dict[
            int, tuple[int, int]
        ] = {}  # id(message) -> (its bytes, entries holding it)
        self.bytes = 0
        """String bytes held now (responses, and each distinct message once)."""

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, response: dict[str, Any], messages: list[dict[str, Any]]) -> None:
        """Store (or replace) `response` under its `id` with its conversation `messages`."""
        self._expire()
        key = response["id"]
        self._forget(key)
        entry = StoredResponse(response, messages, self.clock())
        self._entries[key] = entry
        self._by_age[key] = entry.stored_at
        self._hold(entry, +1)
        while len(self._entries) > self.max_entries or (
            self.bytes > self.max_bytes and len(self._entries) > 1
        ):
            self._forget(next(iter(self._entries)))

    def get(self, response_id: str, param: str = "response_id") -> StoredResponse:
        """The stored response `response_id` (it becomes the most recently used).

        Args:
            response_id: the response's `id`.
            param: the request field that named it, for the error.

        Raises:
            OpenAIError: 404 `not_found` for an id never stored, evicted, expired or deleted.
        """
        self._expire()
        entry = self._entries.get(response_id)
        if entry is None:
            raise _not_found(response_id, param)
        self._entries.move_to_end(response_id)
        return entry

    def delete(self, response_id: str) -> None:
        """Forget `response_id`.

        Raises:
            OpenAIError: 404 `not_found` when it is not stored.
        """
        self._expire()
        if not self._forget(response_id):
            raise _not_found(response_id, "response_id")

    def _forget(self, key: str) -> bool:
        self._by_age.pop(key, None)
        entry = self._entries.pop(key, None)
        if entry is None:
            return False
        self._hold(entry, -1)
        return True

    def _hold(self, entry: StoredResponse, delta: int) -> None:
        """Count an entry's bytes in (`delta` +1) or out (-1): its response's own, and each
        message's when no other stored entry holds that message object."""
        self.bytes += delta * _string_bytes(entry.response)
        for message in entry.messages:
            size, holders = self._held.get(id(message), (0, 0))
            if holders == 0:
                size = _string_bytes(message)
                self.bytes += size
            holders += delta
            if holders == 0:
                self.bytes -= size
                del self._held[id(message)]
            else:
                self._held[id(message)] = (size, holders)

    def _expire(self) -> None:
        """Drop the entries stored `ttl_s` or more ago (the oldest first: the clock is
        monotonic, so storing order is age order)."""
        cutoff = self.clock() - self.ttl_s
        while self._by_age and next(iter(self._by_age.values())) <= cutoff:
            self._forget(next(iter(self._by_age)))


def _string_bytes(value: Any) -> int:
    """Characters of every string in a JSON value (keys included), iteratively."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += sum(len(k) for k in item if isinstance(k, str))
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total


def _not_found(response_id: str, param: str) -> OpenAIError:
    return OpenAIError(
        f"response {response_id!r} was not found: it was never stored (`store: false`), has "
        "expired or was deleted, or another router replica holds it",
        status_code=404,
        param=param,
        code="not_found",
    )
