"""One adapter's weights, read from `adapter_model.safetensors` and checked against the model.

peft saves `base_model.model.<module>.lora_A.weight` `[r, in]` and `...lora_B.weight` `[out, r]`
per targeted module (`<module>` is the base model's module name, e.g.
`model.layers.0.self_attn.q_proj`). A mismatched base is found here, from the adapter's module
names and tensor shapes against the loaded model's linears (not from `base_model_name_or_path`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from engine.lora.adapter_config import EMBEDDING_OR_HEAD, AdapterConfig, read_adapter_config

WEIGHTS_FILE = "adapter_model.safetensors"
_PREFIX = "base_model.model."
_A, _B = ".lora_A.weight", ".lora_B.weight"


@dataclass(frozen=True)
class LoraRef:
    """An adapter the engine knows: its name, where it is read from, and its id.

    Attributes:
        name: the adapter's name (a model id of its own at the HTTP edge).
        path: the PEFT adapter directory.
        lora_id: unique per load (a re-load under the same name gets a new id), so KV computed
            under one adapter is never reused for another (`Sequence.cache_key`).
    """

    name: str
    path: str
    lora_id: int


@dataclass(frozen=True)
class LoraWeights:
    """One targeted linear's low-rank update `delta(x) = (x @ a.T) @ b.T`.

    Attributes:
        a: `[r, in]`, peft's `lora_A`.
        b: `[out, r]`, peft's `lora_B` times the module's scaling (`adapter_config`).
    """

    a: torch.Tensor
    b: torch.Tensor


@dataclass(frozen=True)
class LoraAdapter:
    """An adapter's weights for every module it targets, ready to apply.

    Attributes:
        ref: which adapter.
        weights: base-model module name -> its update.
    """

    ref: LoraRef
    weights: Mapping[str, LoraWeights]

    def nbytes(self) -> int:
        """Bytes of the adapter's tensors."""
        return sum(
            w.a.numel() * w.a.element_size() + w.b.numel() * w.b.element_size()
            for w in self.weights.values()
        )


def load_adapter(
    ref: LoraRef,
    targets: Mapping[str, tuple[int, int]],
    max_lora_rank: int,
    dtype: torch.dtype,
) -> LoraAdapter:
    """Read and check one PEFT adapter directory.

    Args:
        ref: the adapter.
        targets: the model's linears an adapter may target: full (unsharded) module name ->
            `(in_features, out_features)`.
        max_lora_rank: the largest rank served.
        dtype: the model's dtype (the weights are cast to it).

    Raises:
        ValueError: naming the option or tensor: a refused option (`adapter_config`), a missing
            or unreadable file, a tensor that is not a LoRA A/B matrix (`modules_to_save`,
            resized embeddings, DoRA magnitudes), a module on embeddings or the LM head, a
            module or a shape that the loaded base model does not have (a mismatched base), a
            rank above `max_lora_rank`, non-finite weights, or a file that is not a regular
            file (a FIFO would block the engine).
    """
    what = f"LoRA adapter {ref.name!r} ({ref.path})"
    path = Path(ref.path)
    config = read_adapter_config(path, max_lora_rank, what)
    if (path / WEIGHTS_FILE).exists() and not (path / WEIGHTS_FILE).is_file():
        raise ValueError(f"{what}: {path / WEIGHTS_FILE} is not a regular file")
    try:
        tensors = load_file(str(path / WEIGHTS_FILE))
    except FileNotFoundError as exc:
        raise ValueError(f"{what}: no {WEIGHTS_FILE} in {path}") from exc
    except (SafetensorError, OSError) as exc:
        raise ValueError(f"{what}: cannot read {path / WEIGHTS_FILE}: {exc}") from exc
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        _check_key(key, what)
        module, part = (key[: -len(_A)], "a") if key.endswith(_A) else (key[: -len(_B)], "b")
        pairs.setdefault(module.removeprefix(_PREFIX), {})[part] = tensor
    if not pairs:
        raise ValueError(f"{what}: {WEIGHTS_FILE} holds no LoRA weights")
    weights = {}
    for module, ab in sorted(pairs.items()):
        weights[module] = _module_weights(module, ab, targets, config, max_lora_rank, dtype, what)
    return LoraAdapter(ref, weights)


def _check_key(key: str, what: str) -> None:
    if "lora_embedding_" in key or any(f".{e}." in f".{key}" for e in EMBEDDING_OR_HEAD):
        raise ValueError(
            f"{what}: tensor {key!r} is on embeddings or the LM head (resized embeddings or "
            "added tokens); only linear layers of the decoder are supported"
        )
    if "lora_magnitude_vector" in key:
        raise ValueError(f"{what}: tensor {key!r} is a DoRA magnitude (`use_dora`), not supported")
    if not key.endswith((_A, _B)):
        raise ValueError(
            f"{what}: tensor {key!r} is not a LoRA A/B matrix (`modules_to_save` or other "
            "trained modules are not supported)"
        )


def _module_weights(
    module: str,
    ab: dict[str, torch.Tensor],
    targets: Mapping[str, tuple[int, int]],
    config: AdapterConfig,
    max_lora_rank: int,
    dtype: torch.dtype,
    what: str,
) -> LoraWeights:
    if set(ab) != {"a", "b"}:
        raise ValueError(f"{what}: module {module!r} has lora_A or lora_B but not both")
    if module not in targets:
        raise ValueError(
            f"{what}: module {module!r} is not a linear layer of the loaded base model "
            "(an adapter trained for another base?)"
        )
    a, b = ab["a"], ab["b"]
    in_features, out_features = targets[module]
    rank = int(a.shape[0])
    if a.dim() != 2 or b.dim() != 2 or tuple(a.shape) != (rank, in_features):
        raise ValueError(
            f"{what}: {module}.lora_A has shape {tuple(a.shape)}, the base model needs "
            f"[r, {in_features}] (an adapter trained for another base?)"
        )
    if tuple(b.shape) != (out_features, rank):
        raise ValueError(
            f"{what}: {module}.lora_B has shape {tuple(b.shape)}, the base model needs "
            f"[{out_features}, {rank}] (an adapter trained for another base?)"
        )
    if rank > max_lora_rank:
        raise ValueError(f"{what}: {module} has rank {rank}, above max_lora_rank {max_lora_rank}")
    if rank != config.rank(module):
        raise ValueError(
            f"{what}: {module} has rank {rank} but `r`/`rank_pattern` say {config.rank(module)}"
        )
    scaled = (b.double() * config.scaling(module)).to(dtype)
    if not (torch.isfinite(a).all() and torch.isfinite(scaled).all()):
        # 0 * NaN is NaN: a batched step would carry it into other requests' rows
        raise ValueError(f"{what}: {module} has non-finite (NaN or infinite) weights")
    return LoraWeights(a.to(dtype).contiguous(), scaled.contiguous())
