"""LoRA adapters on the wire: what the router sends a replica with a request for an adapter,
and the bodies of vLLM's runtime endpoints `POST /v1/load_lora_adapter` and
`POST /v1/unload_lora_adapter` (same names and fields as vLLM's `LoadLoRAAdapterRequest` and
`UnloadLoRAAdapterRequest`, `vllm/entrypoints/openai/protocol.py`), and the entries of the
application's registry of runtime-loaded adapters (`router.lora_registry`)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator

from configs.lora_config import check_adapter_name


class LoraSpec(BaseModel):
    """An adapter a request runs under: the replica loads it first if it lacks it (a runtime
    adapter it has not seen yet), so every replica can serve every adapter the router knows.

    Attributes:
        name: the adapter's id (the request's `model`).
        path: its PEFT directory (`adapter_config.json` + `adapter_model.safetensors`).
        runtime: loaded at run time (under `lora_root`), not from `lora_modules`.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    path: str
    runtime: bool = False


class LoadLoraAdapterRequest(BaseModel):
    """Body of `POST /v1/load_lora_adapter`."""

    model_config = ConfigDict(extra="forbid")

    lora_name: str = Field(description="The adapter's model id; must be new.")
    lora_path: str = Field(
        description="Its PEFT directory: absolute, or relative to the model's `lora_root`; "
        "either way it must lie under `lora_root`."
    )
    model: str | None = Field(
        None,
        description="The base model id; may be omitted when one model allows runtime loading.",
    )
    load_inplace: bool = Field(
        False, description="vLLM's in-place reload: not supported (unload, then load)."
    )

    @field_validator("lora_name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        return check_adapter_name(name)


class UnloadLoraAdapterRequest(BaseModel):
    """Body of `POST /v1/unload_lora_adapter`."""

    model_config = ConfigDict(extra="forbid")

    lora_name: str = Field(description="A runtime-loaded adapter.")
    lora_int_id: int | None = Field(None, description="Accepted for vLLM clients; unused.")


@dataclass(frozen=True)
class RuntimeAdapter:
    """One runtime-loaded adapter.

    Attributes:
        name: its model id.
        base: the model id of the base model it runs on.
        path: its PEFT directory: the load's `lora_path` joined to the base model's
            `lora_root` (each replica resolves it and checks that it lies under the root).
    """

    name: str
    base: str
    path: str


@dataclass(frozen=True)
class RegistrySnapshot:
    """The registry's adapters at one `version` (it grows with every add and remove)."""

    version: int
    adapters: tuple[RuntimeAdapter, ...]
