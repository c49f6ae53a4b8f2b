"""The application's registry of runtime-loaded LoRA adapters (`POST /v1/load_lora_adapter`).

One small deployment per application, so every router replica sees the same adapters, and
every model replica (also those started later: a restart, autoscaling) can catch up with it:
model replicas reconcile with `snapshot` every `engine.lora.runtime_sync_s` (they load the
adapters of their model they lack and unload removed ones once idle), and a request for an
adapter carries its `LoraSpec`, so a replica that has not caught up yet loads it first.
Serve restarts the registry if it dies; the adapters loaded at run time are then forgotten
(start-up adapters, `lora_modules`, are in the config and never are).
"""

from __future__ import annotations

from ray import serve

from deployments.protocol.lora import RegistrySnapshot, RuntimeAdapter

LORA_REGISTRY = "lora-registry"
"""The registry's deployment name in every application `router.app.build_app` builds with a
model that allows runtime loading."""


class RuntimeAdapters:
    """The registry's state: adapter name -> `RuntimeAdapter`, with a version."""

    def __init__(self) -> None:
        self._adapters: dict[str, RuntimeAdapter] = {}
        self._version = 0

    def add(self, adapter: RuntimeAdapter) -> None:
        """Register an adapter.

        Raises:
            ValueError: an adapter of that name is registered.
        """
        if adapter.name in self._adapters:
            raise ValueError(f"a LoRA adapter named {adapter.name!r} is already loaded")
        self._adapters[adapter.name] = adapter
        self._version += 1

    def remove(self, name: str) -> None:
        """Forget an adapter.

        Raises:
            ValueError: no runtime-loaded adapter has that name.
        """
        if self._adapters.pop(name, None) is None:
            raise ValueError(
                f"no runtime-loaded LoRA adapter is named {name!r}; "
                f"loaded: {sorted(self._adapters)}"
            )
        self._version += 1

    def snapshot(self) -> RegistrySnapshot:
        """The adapters now, in load order."""
        return RegistrySnapshot(self._version, tuple(self._adapters.values()))


@serve.deployment(
    name=LORA_REGISTRY,
    num_replicas=1,
    max_ongoing_requests=1000,  # every call is a dictionary operation
    ray_actor_options={"num_cpus": 0},
    logging_config={"enable_access_log": False},  # every replica reads it every few seconds
)
class LoraRegistry:
    """The application's `RuntimeAdapters`, called through its handle; a refusal comes back as
    its message rather than raised, so callers tell it from a failed call."""

    def __init__(self) -> None:
        self.adapters = RuntimeAdapters()

    async def add(self, adapter: RuntimeAdapter) -> RegistrySnapshot | str:
        """`RuntimeAdapters.add`: the adapters after it, else why not."""
        try:
            self.adapters.add(adapter)
        except ValueError as exc:
            return str(exc)
        return self.adapters.snapshot()

    async def remove(self, name: str) -> RegistrySnapshot | str:
        """`RuntimeAdapters.remove`: the adapters after it, else why not."""
        try:
            self.adapters.remove(name)
        except ValueError as exc:
            return str(exc)
        return self.adapters.snapshot()

    async def snapshot(self) -> RegistrySnapshot:
        """See `RuntimeAdapters.snapshot`."""
        return self.adapters.snapshot()
