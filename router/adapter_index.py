"""The LoRA adapters the router can send requests to: each is a model id of its own that runs
on its base model's deployment.

Start-up adapters come from the config (`engine.lora.lora_modules`); runtime-loaded ones from
the application's registry (`router.lora_registry`), which this router replica reads every
`deployment_status_poll_s`, and at once from the registry's answer to the loads and unloads
it serves itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ray.serve.handle import DeploymentHandle

from configs.model_config import RouterAppConfig
from deployments.protocol.lora import LoraSpec, RegistrySnapshot

logger = logging.getLogger(__name__)


class AdapterIndex:
    """Adapter name -> its base model id and the `LoraSpec` sent with its requests.

    Args:
        config: the application config (its models' `lora_modules`).
        changed: called after the runtime adapters change (the pool's capabilities follow).
    """

    def __init__(self, config: RouterAppConfig, changed: Callable[[], None]) -> None:
        self._static = {
            name: (m.model_id, LoraSpec(name=name, path=path))
            for m in config.models
            for name, path in m.adapters.items()
        }
        self._runtime: dict[str, tuple[str, LoraSpec]] = {}
        self._changed = changed
        self._version = -1
        self._poll: asyncio.Task[None] | None = None

    def base(self, name: str) -> str | None:
        """The base model id of adapter `name`; None if `name` is no adapter."""
        entry = self._static.get(name) or self._runtime.get(name)
        return None if entry is None else entry[0]

    def spec(self, name: str) -> LoraSpec | None:
        """What a request for adapter `name` carries to its replica; None if no adapter."""
        entry = self._static.get(name) or self._runtime.get(name)
        return None if entry is None else entry[1]

    def bases(self) -> dict[str, str]:
        """Every adapter -> its base model id: start-up adapters, then runtime ones in load
        order."""
        return {name: base for name, (base, _) in (self._static | self._runtime).items()}

    def runtime(self) -> dict[str, str]:
        """The runtime-loaded adapters -> their base model id."""
        return {name: base for name, (base, _) in self._runtime.items()}

    def is_static(self, name: str) -> bool:
        """Whether `name` is a start-up adapter (`lora_modules`)."""
        return name in self._static

    def update(self, snapshot: RegistrySnapshot) -> None:
        """Take the registry's runtime adapters, unless this snapshot is not newer than the
        last taken (a read that crossed this replica's own load or unload)."""
        if snapshot.version <= self._version:
            return
        self._version = snapshot.version
        self._runtime = {
            a.name: (a.base, LoraSpec(name=a.name, path=a.path, runtime=True))
            for a in snapshot.adapters
        }
        self._changed()

    def follow(self, registry: DeploymentHandle, interval_s: float) -> None:
        """Read the registry now and every `interval_s` (on the running event loop)."""
        self._poll = asyncio.get_running_loop().create_task(self._follow(registry, interval_s))

    async def _follow(self, registry: DeploymentHandle, interval_s: float) -> None:
        while True:
            try:
                self.update(await registry.snapshot.remote())
            except Exception as exc:  # a registry restarting: read it again next time
                logger.warning("LoRA registry read failed: %s", exc)
            await asyncio.sleep(interval_s)
