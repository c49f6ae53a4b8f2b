"""A model replica's LoRA adapters: those of `lora_modules` (loaded with the engine) and those
loaded at run time, which it loads on first use and keeps in line with the application's
registry (`router.lora_registry`), which it reads through a handle."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from configs.lora_config import LoraConfig
from deployments.engine_client import EngineClient
from deployments.protocol.errors import OpenAIError
from deployments.protocol.lora import LoraSpec, RuntimeAdapter

logger = logging.getLogger(__name__)

INVALID_LORA = "invalid_lora_adapter"
"""The error code of an adapter that is refused (path, rank, base mismatch, options)."""


class ReplicaAdapters:
    """Which adapter a request runs under, and runtime loads and unloads on this replica.

    Args:
        engine: the replica's engine.
        config: the model's `engine.lora` (None: LoRA off).
        model_id: the base model's id.
    """

    def __init__(self, engine: EngineClient, config: LoraConfig | None, model_id: str) -> None:
        self.engine = engine
        self.config = config
        self.model_id = model_id
        self.static = frozenset() if config is None else {m.name for m in config.lora_modules}
        self.runtime: dict[str, str] = {}
        """Runtime-loaded adapters on this replica: name -> path as the registry gave it."""
        self._lock = asyncio.Lock()

    def _lora(self) -> LoraConfig:
        if self.config is None:
            raise OpenAIError(
                f"model {self.model_id} serves no LoRA adapters (no `engine.lora` section)",
                param="model",
                code="model_not_found",
                status_code=404,
            )
        return self.config

    async def use(self, spec: LoraSpec | None) -> str | None:
        """The adapter a request runs under (None: the base model); a runtime adapter this
        replica lacks is loaded first.

        Raises:
            OpenAIError: 404 for an adapter this model does not serve; 400 `invalid_lora_adapter`
                when a runtime adapter is refused (see `load`).
        """
        if spec is None:
            return None
        self._lora()
        if spec.name in self.static:
            return spec.name
        if not spec.runtime:
            raise OpenAIError(
                f"model {self.model_id} has no LoRA adapter {spec.name!r}",
                param="model",
                code="model_not_found",
                status_code=404,
            )
        if self.runtime.get(spec.name) != spec.path:
            await self.load(spec.name, spec.path)
        return spec.name

    async def load(self, name: str, path: str) -> None:
        """Load a runtime adapter (again, if it was loaded from another path); a no-op when it
        is loaded from `path` already.

        Raises:
            OpenAIError: 400 `invalid_lora_adapter`: runtime loading is off, the path lies
                outside `lora_root`, or the adapter is refused (missing files, an unsupported
                option, a rank above `max_lora_rank`, a base mismatch: the message names it),
                or the name is a start-up adapter's; 409 `lora_adapter_busy`: requests of the
                adapter's previous load still run.
        """
        # shielded: a caller that goes away (a client disconnect) leaves the engine and this
        # replica's bookkeeping in agreement
        await asyncio.shield(self._load(self._lora(), name, path))

    async def _load(self, config: LoraConfig, name: str, path: str) -> None:
        async with self._lock:
            if self.runtime.get(name) == path:
                return
            try:
                resolved = str(config.runtime_path(path))
                if name in self.static:
                    raise ValueError(f"{name!r} is a start-up adapter (lora_modules)")
                if name in self.runtime:
                    await self._replace(name)
                await self.engine.load_lora(name, resolved)
            except ValueError as exc:
                raise OpenAIError(str(exc), param="lora_path", code=INVALID_LORA) from None
            self.runtime[name] = path

    async def _replace(self, name: str) -> None:
        """Unload the adapter `name` loaded from another path, before loading it again.

        Raises:
            OpenAIError: 409 `lora_adapter_busy` while requests still use the old one.
        """
        try:
            await self.engine.unload_lora(name)
        except ValueError:
            raise OpenAIError(
                f"LoRA adapter {name!r} is still draining (requests of its previous load are "
                "running); retry once they finish",
                status_code=409,
                param="lora_name",
                code="lora_adapter_busy",
            ) from None
        del self.runtime[name]

    async def unload(self, name: str) -> bool:
        """Unload a runtime adapter once no request uses it.

        Returns:
            True when it is gone (or was not loaded here), False while requests use it.
        """
        async with self._lock:
            if name not in self.runtime:
                return True
            try:
                await self.engine.unload_lora(name)
            except ValueError as exc:
                logger.info("LoRA adapter %r stays loaded until its requests end: %s", name, exc)
                return False
            del self.runtime[name]
            return True

    async def sync(self, registered: Iterable[RuntimeAdapter]) -> None:
        """Match the registry: load this model's adapters missing here, unload those it no
        longer lists (each once its requests have ended). A refused adapter is logged (the
        router refused it at its load already) and tried again at the next sync."""
        wanted = {a.name: a.path for a in registered if a.base == self.model_id}
        for name in [n for n in self.runtime if n not in wanted]:
            await self.unload(name)
        for name, path in wanted.items():
            try:
                await self.load(name, path)
            except OpenAIError as exc:
                logger.warning("runtime LoRA adapter %r not loaded here: %s", name, exc)
