"""Adapters held in host memory: an LRU cache bounded by `max_cpu_loras`, with counters.

An adapter evicted here is re-read from its directory when a request needs it again; every read
counts as a load, so `loads - len(registered)` is the number of reloads (vLLM's CPU LoRA cache,
`--max-cpu-loras`).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable

from engine.lora.adapter import LoraAdapter, LoraRef

logger = logging.getLogger(__name__)


class LoraHostCache:
    """Least-recently-used adapters, at most `capacity` of them.

    Args:
        capacity: adapters held at most (`max_cpu_loras`).
        read: reads an adapter from disk (`engine.lora.adapter.load_adapter` bound to the
            model); raises `ValueError` for a bad adapter.
        on_evict: called with the id of every adapter evicted (the engine drops it from the
            device too).
    """

    def __init__(
        self,
        capacity: int,
        read: Callable[[LoraRef], LoraAdapter],
        on_evict: Callable[[int], None],
    ) -> None:
        assert capacity > 0, "max_cpu_loras must be positive"
        self.capacity = capacity
        self._read = read
        self._on_evict = on_evict
        self._adapters: OrderedDict[int, LoraAdapter] = OrderedDict()
        self.loads = 0
        self.evictions = 0

    def __contains__(self, lora_id: int) -> bool:
        return lora_id in self._adapters

    def resident(self) -> list[int]:
        """Ids held, least recently used first."""
        return list(self._adapters)

    def get(self, ref: LoraRef, pinned: frozenset[int] = frozenset()) -> LoraAdapter:
        """The adapter, read from disk if it is not held (evicting the least recently used
        adapter not in `pinned` when full); it becomes the most recently used.

        Raises:
            ValueError: the adapter could not be read (see `load_adapter`).
        """
        adapter = self._adapters.get(ref.lora_id)
        if adapter is not None:
            self._adapters.move_to_end(ref.lora_id)
            return adapter
        adapter = self._read(ref)
        self.loads += 1
        while len(self._adapters) >= self.capacity:
            victim = next((i for i in self._adapters if i not in pinned), None)
            assert victim is not None, "every held adapter is pinned: max_cpu_loras < max_loras"
            self.evict(victim)
            self.evictions += 1
        self._adapters[ref.lora_id] = adapter
        logger.info(
            "LoRA adapter %r read from %s (%.1f MiB)", ref.name, ref.path, adapter.nbytes() / 2**20
        )
        return adapter

    def evict(self, lora_id: int) -> None:
        """Drop an adapter (if held) without counting an eviction (an unload)."""
        if self._adapters.pop(lora_id, None) is not None:
            self._on_evict(lora_id)
