"""LoRA settings (the `engine.lora` section of a model deployment): which PEFT adapters a replica
serves next to its base model, and how many of them it keeps where.

Semantics follow vLLM's `--lora-modules`, `--max-loras`, `--max-lora-rank` and
`--max-cpu-loras`: `max_loras` adapters may run in one batch (the scheduler holds back requests
of further adapters), at most `max_cpu_loras` adapters' weights stay in host memory (the least
recently used one is evicted and re-read from disk when a request needs it again).
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ADAPTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
"""Adapter names: they become OpenAI model ids, so no spaces or slashes."""


def check_adapter_name(name: str) -> str:
    """Return `name` if it is a valid adapter name.

    Raises:
        ValueError: the name is empty, too long, or has characters other than letters, digits,
            `.`, `_`, `:` and `-` (it must start with a letter or digit).
    """
    if not ADAPTER_NAME.match(name):
        raise ValueError(
            f"LoRA adapter name {name!r} is not valid: use 1-128 letters, digits, '.', '_', ':' "
            "or '-', starting with a letter or digit"
        )
    return name


class LoraModule(BaseModel):
    """One adapter served from start-up."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        description="The adapter's id: requests name it in `model` (and `GET /v1/models` lists "
        "it with the base model as `parent`)."
    )
    path: str = Field(
        description="A PEFT adapter directory holding `adapter_config.json` and "
        "`adapter_model.safetensors`; a relative path is taken from the directory the config "
        "is loaded in (where `serve run` starts)."
    )

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        return check_adapter_name(name)

    @field_validator("path")
    @classmethod
    def _absolute(cls, path: str) -> str:
        return str(Path(path).expanduser().resolve())


class LoraConfig(BaseModel):
    """Multi-LoRA serving: adapters mixed with the base model in one continuous batch."""

    model_config = ConfigDict(extra="forbid")

    lora_modules: list[LoraModule] = Field(
        default_factory=list,
        description="Adapters loaded (and checked against the base model) at start-up; more "
        "may be loaded at run time.",
    )
    max_loras: int = Field(
        4,
        gt=0,
        description="Distinct adapters in one running batch at most; requests of further "
        "adapters wait until a running adapter's requests finish.",
    )
    max_lora_rank: int = Field(
        16,
        gt=0,
        le=1024,
        description="Largest LoRA rank accepted (`r` and every `rank_pattern` value); a larger "
        "adapter is refused.",
    )
    max_cpu_loras: int | None = Field(
        None,
        gt=0,
        description="Adapters whose weights stay in host memory; the least recently used one "
        "beyond this is evicted and re-read from disk when needed (counted as a load). "
        "Default: `max_loras`. Must be at least `max_loras`.",
    )

    allow_runtime_lora: bool = Field(
        False,
        description="Accept `POST /v1/load_lora_adapter` and `/v1/unload_lora_adapter` for this "
        "model (vLLM's `VLLM_ALLOW_RUNTIME_LORA_UPDATING`); needs `lora_root`.",
    )
    lora_root: str | None = Field(
        None,
        description="The directory every runtime-loaded adapter must lie under (checked after "
        "resolving `..` and symbolic links), so the endpoint reads no other host files; "
        "relative: from where the config is loaded.",
    )
    runtime_sync_s: float = Field(
        2.0,
        gt=0,
        description="Seconds between two reconciliations of a replica with the application's "
        "registry of runtime-loaded adapters: it loads those it lacks (a replica started later "
        "catches up) and unloads removed ones once their requests have finished.",
    )

    @field_validator("lora_root")
    @classmethod
    def _absolute_root(cls, root: str | None) -> str | None:
        return None if root is None else str(Path(root).expanduser().resolve())

    @model_validator(mode="after")
    def _check(self) -> LoraConfig:
        if self.allow_runtime_lora and self.lora_root is None:
            raise ValueError(
                "allow_runtime_lora needs lora_root: the directory adapters may "
                "be loaded from at run time"
            )
        names = [m.name for m in self.lora_modules]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"lora_modules: duplicate adapter name(s) {dupes}")
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ValueError(
                f"max_cpu_loras ({self.max_cpu_loras}) must be at least max_loras "
                f"({self.max_loras}): every adapter of a running batch is held in host memory"
            )
        return self

    def runtime_path(self, path: str) -> Path:
        """`path` resolved, if runtime loading is on and it lies under `lora_root`.

        Raises:
            ValueError: runtime loading is off, or the resolved path, or a file in it (after
                symbolic links), is outside `lora_root`.
        """
        if not self.allow_runtime_lora or self.lora_root is None:
            raise ValueError("runtime LoRA loading is off for this model (allow_runtime_lora)")
        root = Path(self.lora_root).resolve()
        resolved = Path(root, path).resolve()
        if not resolved.is_relative_to(root):
            raise ValueError(f"lora_path {path!r} is outside lora_root {self.lora_root!r}")
        if resolved.is_dir():  # the files read must not link out of the root either
            outside = sorted(
                f.name for f in resolved.iterdir() if not f.resolve().is_relative_to(root)
            )
            if outside:
                raise ValueError(
                    f"lora_path {path!r}: {outside} link(s) outside lora_root {self.lora_root!r}"
                )
        return resolved

    @property
    def cpu_capacity(self) -> int:
        """Adapters held in host memory at most (`max_cpu_loras`, default `max_loras`)."""
        return self.max_cpu_loras if self.max_cpu_loras is not None else self.max_loras
