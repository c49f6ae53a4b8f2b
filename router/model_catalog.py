"""What the served models are and can do: their configs, capabilities, context lengths and LoRA
adapters, as the policy and the model list read them.

A LoRA adapter (`router.adapter_index`) is a model id of its own, with its base model's
capabilities and context length. A context length the config leaves open is learned from the
model's replica (`router.model_caller.ModelCaller.probe`); the capabilities follow it.
"""

from __future__ import annotations

from configs.model_config import ModelDeploymentConfig, RouterAppConfig
from configs.policy_config import ModelCapabilities
from router.adapter_index import AdapterIndex


class ModelCatalog:
    """The served models and their LoRA adapters.

    Args:
        config: The application config.
    """

    def __init__(self, config: RouterAppConfig) -> None:
        self.config = config
        self.configs: dict[str, ModelDeploymentConfig] = {m.model_id: m for m in config.models}
        """Served model id -> its deployment config, in config order."""
        self.learned: dict[str, int] = {}
        """Served model id -> the context length its replica reported."""
        self.capabilities: dict[str, ModelCapabilities] = config.capabilities()
        """Model id (LoRA adapters included) -> what it can serve, for the policy."""
        self.adapters = AdapterIndex(config, self._refresh_capabilities)

    def base(self, model: str) -> str:
        """The model id whose deployment serves `model` (itself, or a LoRA adapter's base)."""
        return self.adapters.base(model) or model

    def serves(self, model: str) -> bool:
        """Whether `model` is a served model id or a LoRA adapter (not an alias)."""
        return model in self.configs or self.adapters.base(model) is not None

    def context_length(self, model: str) -> int | None:
        """`engine.max_model_len`, else what a replica reported; None until one does (a LoRA
        adapter's is its base model's)."""
        base = self.base(model)
        return self.configs[base].engine.max_model_len or self.learned.get(base)

    def learn_context_length(self, model: str, max_model_len: int) -> None:
        """Record the context length a replica of served model `model` reported (the first
        report stands)."""
        if model not in self.learned:
            self.learned[model] = max_model_len
            self._refresh_capabilities()

    def _refresh_capabilities(self) -> None:
        caps = self.config.capabilities(self.learned)
        for name, base in self.adapters.runtime().items():
            caps[name] = caps[base]
        self.capabilities = caps
