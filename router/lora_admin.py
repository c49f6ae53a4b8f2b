"""`POST /v1/load_lora_adapter` and `POST /v1/unload_lora_adapter` (vLLM's names and bodies).

A load is accepted only for a model whose `engine.lora.allow_runtime_lora` is on (403
otherwise), under a new name (no model id, alias or adapter of that name). The router records
the adapter in the application's registry (`router.lora_registry`), which also settles two
loads of one name racing through two router replicas, then has one replica of the base model
load it at once: if that replica refuses it (a path outside `lora_root`, missing files, a rank
above `max_lora_rank`, a base mismatch, an unsupported option) the registry entry is taken back
and the answer is a 400 naming the problem. The other replicas load it within
`runtime_sync_s`, or on their first request for it.

An unload takes the adapter out of the registry: from then on requests for it get 404, while
those already running finish (the unload drains: replicas unload it once its requests have
ended). Start-up adapters (`lora_modules`) cannot be unloaded.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ray.serve.handle import DeploymentHandle

from configs.model_config import RouterAppConfig
from deployments.protocol.errors import ErrorResponse, OpenAIError
from deployments.protocol.lora import (
    LoadLoraAdapterRequest,
    RegistrySnapshot,
    RuntimeAdapter,
    UnloadLoraAdapterRequest,
)
from deployments.protocol.validation import parse_request
from router.model_catalog import ModelCatalog

logger = logging.getLogger(__name__)


class LoraAdmin:
    """Runtime loads and unloads of LoRA adapters.

    Args:
        config: the application config.
        catalog: the models (its `adapters` index is updated from the registry's answers).
        handles: model id -> handle of its `ModelServer` deployment.
        registry: handle of the application's `LoraRegistry`; None when no model allows
            runtime loading.
        aliases: the policy's alias names (an adapter may not take one).
    """

    def __init__(
        self,
        config: RouterAppConfig,
        catalog: ModelCatalog,
        handles: dict[str, DeploymentHandle],
        registry: DeploymentHandle | None,
        aliases: list[str],
    ) -> None:
        self.catalog = catalog
        self.handles = handles
        self.registry = registry
        self.aliases = set(aliases)
        self.roots = {
            m.model_id: m.engine.lora.lora_root
            for m in config.models
            if m.engine.lora and m.engine.lora.allow_runtime_lora and m.engine.lora.lora_root
        }
        """The models that accept runtime adapters -> their `lora_root`."""

    @property
    def allowed(self) -> list[str]:
        """The models that accept runtime adapters."""
        return list(self.roots)

    def _registry(self) -> DeploymentHandle:
        if self.registry is None or not self.allowed:
            raise OpenAIError(
                "runtime LoRA loading is off: set `engine.lora.allow_runtime_lora: true` and "
                "`engine.lora.lora_root` in a model's config",
                status_code=403,
                code="runtime_lora_disabled",
            )
        return self.registry

    def _base(self, model: str | None) -> str:
        if model is None:
            if len(self.allowed) == 1:
                return self.allowed[0]
            raise OpenAIError(
                f"name the base model in `model`: runtime LoRA loading is on for {self.allowed}",
                param="model",
            )
        if model not in self.allowed:
            raise OpenAIError(
                f"model {model!r} does not accept runtime LoRA adapters; these do: {self.allowed}",
                param="model",
            )
        return model

    async def load(self, body: Any) -> str:
        """Load an adapter; the success text vLLM answers.

        Raises:
            OpenAIError: 400 (a bad body or name, a taken name, an adapter its replica
                refused), 403 (runtime loading off), 503 (the base model's replica could not
                be reached; nothing is loaded).
        """
        req = parse_request(LoadLoraAdapterRequest, body)
        if req.load_inplace:
            raise OpenAIError(
                "load_inplace is not supported: unload the adapter, then load it again",
                param="load_inplace",
            )
        registry = self._registry()
        base = self._base(req.model)
        name = req.lora_name
        if self.catalog.serves(name) or name in self.aliases:
            raise OpenAIError(
                f"a model, alias or LoRA adapter named {name!r} exists already; unload it "
                "first or choose another name",
                param="lora_name",
                code="lora_adapter_exists",
            )
        path = str(Path(self.roots[base], req.lora_path))  # absolute: itself; replicas check it
        added = await registry.add.remote(RuntimeAdapter(name, base, path))
        if isinstance(added, str):
            raise OpenAIError(added, param="lora_name", code="lora_adapter_exists")
        try:
            refused = await self.handles[base].load_lora_adapter.remote(name, path)
        except Exception as exc:
            refused = OpenAIError(
                f"model {base} could not be reached to load the adapter; try again",
                status_code=503,
            ).response()
            logger.warning("runtime LoRA load of %r on %s failed: %r", name, base, exc)
        if isinstance(refused, ErrorResponse):
            self._take(await registry.remove.remote(name))
            error = refused.error
            raise OpenAIError(error.message, refused.status_code, error.param, error.code)
        self._take(added)
        logger.info("runtime LoRA adapter %r loaded on %s from %s", name, base, path)
        return f"Success: LoRA adapter '{name}' added successfully."

    async def unload(self, body: Any) -> str:
        """Unload a runtime adapter; the success text vLLM answers.

        Raises:
            OpenAIError: 400 (a bad body, a start-up adapter), 403 (runtime loading off), 404
                (no such runtime adapter).
        """
        req = parse_request(UnloadLoraAdapterRequest, body)
        registry = self._registry()
        name = req.lora_name
        if self.catalog.adapters.is_static(name):
            raise OpenAIError(
                f"LoRA adapter {name!r} is a start-up adapter (lora_modules); remove it from "
                "the config instead",
                param="lora_name",
            )
        removed = await registry.remove.remote(name)
        if isinstance(removed, str):
            raise OpenAIError(removed, 404, "lora_name", "model_not_found")
        self._take(removed)
        logger.info("runtime LoRA adapter %r unloaded", name)
        return f"Success: LoRA adapter '{name}' removed successfully."

    def _take(self, snapshot: RegistrySnapshot | str) -> None:
        if isinstance(snapshot, RegistrySnapshot):
            self.catalog.adapters.update(snapshot)
