"""The engine's adapters: which are registered, which are in host memory, which on the device.

- registered: name -> `LoraRef` (start-up `lora_modules` and runtime `load`s);
- host memory: `LoraHostCache`, at most `max_cpu_loras`, LRU, counting loads and evictions;
- device: the adapters put on the model's `LoraLinear`s, at most `max_loras`, LRU; the
  scheduler admits at most `max_loras` distinct adapters into the running batch, so a step's
  adapters always fit. On CPU the device copy is the host tensors themselves.
"""

from __future__ import annotations

import itertools
import logging
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import torch

from configs.lora_config import LoraConfig, check_adapter_name
from engine.lora.adapter import LoraAdapter, LoraRef, load_adapter
from engine.lora.host_cache import LoraHostCache
from engine.scheduler import SchedulerOutput

logger = logging.getLogger(__name__)


class LoraExecutor(Protocol):
    """What the manager needs of the executor holding the model."""

    def lora_targets(self) -> dict[str, tuple[int, int]]:
        """Module name -> `(in_features, out_features)` an adapter may target."""

    def add_lora(self, adapter: LoraAdapter) -> None:
        """Put an adapter on the model's layers."""

    def remove_lora(self, lora_id: int) -> None:
        """Take an adapter off the model's layers."""


@dataclass(frozen=True)
class LoraStats:
    """Counters and residency, for metrics and tests.

    Attributes:
        registered: adapter names, in load order.
        in_host_memory: names held in host memory, least recently used first.
        on_device: names on the device, least recently used first.
        loads: adapter reads from disk (start-up, runtime loads and reloads after eviction).
        evictions: adapters evicted from host memory to make room.
        running: names of the adapters with a request in the running batch (vLLM's
            `vllm:lora_requests_info` `running_lora_adapters`).
        waiting: names of the adapters with a request waiting (`waiting_lora_adapters`).
        max_loras: adapters one running batch may hold (`max_lora`).
    """

    registered: tuple[str, ...]
    in_host_memory: tuple[str, ...]
    on_device: tuple[str, ...]
    loads: int
    evictions: int
    running: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    max_loras: int = 0


class LoraManager:
    """Registers, loads, evicts and activates adapters for one engine.

    Args:
        config: the LoRA settings; its `lora_modules` are loaded (and checked) here.
        executor: holds the model.
        dtype: the model's dtype.

    Raises:
        ValueError: a start-up adapter is refused (see `load`).
    """

    def __init__(self, config: LoraConfig, executor: LoraExecutor, dtype: torch.dtype) -> None:
        self.config = config
        self._executor = executor
        self._targets = executor.lora_targets()
        self._dtype = dtype
        self._refs: dict[str, LoraRef] = {}
        self._ids = itertools.count(1)
        self._on_device: OrderedDict[int, None] = OrderedDict()
        self.cache = LoraHostCache(config.cpu_capacity, self._read, self._drop_from_device)
        for module in config.lora_modules:
            self.load(module.name, module.path)

    def _read(self, ref: LoraRef) -> LoraAdapter:
        return load_adapter(ref, self._targets, self.config.max_lora_rank, self._dtype)

    def _drop_from_device(self, lora_id: int) -> None:
        if lora_id in self._on_device:
            del self._on_device[lora_id]
            self._executor.remove_lora(lora_id)

    def load(self, name: str, path: str) -> LoraRef:
        """Register the adapter at `path` as `name`, reading and checking it now (one load).

        Raises:
            ValueError: the name is invalid or taken, or the adapter is refused (a missing
                directory or file, an unsupported option, a rank above `max_lora_rank`, a base
                mismatch: `engine.lora.adapter.load_adapter` names which).
        """
        check_adapter_name(name)
        if name in self._refs:
            raise ValueError(f"a LoRA adapter named {name!r} is already loaded; unload it first")
        ref = LoraRef(name, path, next(self._ids))
        self.cache.get(ref)
        self._refs[name] = ref
        logger.info("LoRA adapter %r loaded from %s (id %d)", name, path, ref.lora_id)
        return ref

    def unload(self, name: str, in_use: Iterable[int | None] = ()) -> None:
        """Forget an adapter; refused while a request uses it.

        Args:
            name: the adapter.
            in_use: the adapter ids of every queued or running request (None: base model).

        Raises:
            ValueError: no adapter has that name, or requests using it are queued or running
                (finish or abort them first).
        """
        ref = self.ref(name)
        busy = sum(1 for i in in_use if i == ref.lora_id)
        if busy:
            raise ValueError(
                f"LoRA adapter {name!r} has {busy} request(s) queued or running; unload it "
                "once they finish"
            )
        del self._refs[name]
        self.cache.evict(ref.lora_id)
        logger.info("LoRA adapter %r unloaded", name)

    def ref(self, name: str) -> LoraRef:
        """The registered adapter called `name`.

        Raises:
            ValueError: no adapter has that name (the message lists those that do).
        """
        ref = self._refs.get(name)
        if ref is None:
            raise ValueError(f"unknown LoRA adapter {name!r}; loaded: {sorted(self._refs)}")
        return ref

    def prepare(self, lora_ids: Iterable[int]) -> None:
        """Make sure every adapter of a step is in host memory and on the device.

        Reloads evicted adapters from disk, evicting (host) or deactivating (device) the least
        recently used adapters not in this step.
        """
        ids = frozenset(lora_ids)
        assert len(ids) <= self.config.max_loras, "the scheduler admitted too many adapters"
        by_id = {ref.lora_id: ref for ref in self._refs.values()}
        for lora_id in sorted(ids):
            adapter = self.cache.get(by_id[lora_id], pinned=ids)
            if lora_id in self._on_device:
                self._on_device.move_to_end(lora_id)
                continue
            while len(self._on_device) >= self.config.max_loras:
                victim = next(i for i in self._on_device if i not in ids)
                del self._on_device[victim]
                self._executor.remove_lora(victim)
            self._executor.add_lora(adapter)
            self._on_device[lora_id] = None

    def prepare_step(self, batch: SchedulerOutput) -> None:
        """Make every adapter of the step ready on the device (`prepare`); rows may come in
        any order (`engine.lora.batch` marks each row's adapter)."""
        ids = {s.seq.lora_id for s in batch.scheduled if s.seq.lora_id is not None}
        if ids:
            self.prepare(ids)

    def stats(
        self, running: Iterable[int | None] = (), waiting: Iterable[int | None] = ()
    ) -> LoraStats:
        """Current counters and residency; `running`/`waiting`: the adapter ids of the running
        and waiting sequences (None: base model)."""
        names = {ref.lora_id: ref.name for ref in self._refs.values()}

        def named(ids: Iterable[int | None]) -> tuple[str, ...]:
            return tuple(sorted({names[i] for i in ids if i is not None and i in names}))

        return LoraStats(
            registered=tuple(self._refs),
            in_host_memory=tuple(names[i] for i in self.cache.resident() if i in names),
            on_device=tuple(names[i] for i in self._on_device if i in names),
            loads=self.cache.loads,
            evictions=self.cache.evictions,
            running=named(running),
            waiting=named(waiting),
            max_loras=self.config.max_loras,
        )
