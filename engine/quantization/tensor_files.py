"""Reading the tensors of a ModelSlim checkpoint by name, with one-line errors naming them.

Shapes and dtypes are those of msModelSlim docs/en/feature_guide/quick_quantization_v1/
quantization_result.md and of the parameters vllm-ascend creates for them (see
`engine.quantization.loader`). Every check raises `ValueError("<checkpoint dir>: tensor <name>
<what is wrong>")`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

SAFETENSORS_INDEX = "model.safetensors.index.json"


class TensorFiles:
    """Reads single tensors of a checkpoint directory by name.

    The safetensors index says which shard holds a tensor; without one every `*.safetensors`
    file in the directory is searched (ModelSlim names its single file
    `quant_model_weight(s)*.safetensors`).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._where: dict[str, Path] = {}
        index = directory / SAFETENSORS_INDEX
        if index.is_file():
            weight_map = json.loads(index.read_text()).get("weight_map", {})
            self._where = {name: directory / shard for name, shard in weight_map.items()}
        else:
            for path in sorted(directory.glob("*.safetensors")):
                with safe_open(path, framework="pt") as f:
                    self._where.update(dict.fromkeys(f.keys(), path))

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def names(self) -> list[str]:
        """Every tensor name of the checkpoint, in the index's (or the files') order."""
        return list(self._where)

    def get(self, name: str) -> torch.Tensor:
        """The tensor called `name`.

        Raises:
            ValueError: no file of the checkpoint holds it.
        """
        path = self._where.get(name)
        if path is None:
            raise ValueError(f"{self.directory}: quantised tensor {name} is missing")
        with safe_open(path, framework="pt") as f:
            return f.get_tensor(name)


def check(cond: bool, files: TensorFiles, name: str, what: str) -> None:
    """Raise `ValueError("<dir>: tensor <name> <what>")` unless `cond`."""
    if not cond:
        raise ValueError(f"{files.directory}: tensor {name} {what}")


def int8_weight(files: TensorFiles, layer: str, linear: nn.Linear) -> torch.Tensor:
    """`{layer}.weight`: int8 `[out, in]` of `linear`'s shape."""
    name = f"{layer}.weight"
    weight = files.get(name)
    check(weight.dtype == torch.int8, files, name, f"is {weight.dtype}, expected int8")
    want = (linear.out_features, linear.in_features)
    check(tuple(weight.shape) == want, files, name, f"has shape {list(weight.shape)}, not {want}")
    return weight


def per_channel(files: TensorFiles, name: str, n: int) -> torch.Tensor:
    """`name` as `[n]` (stored `[n]` or `[n, 1]`)."""
    t = files.get(name)
    check(t.numel() == n and t.shape[0] == n, files, name, f"has shape {list(t.shape)}, not [{n}]")
    return t.reshape(n)


def scalar(files: TensorFiles, name: str) -> torch.Tensor:
    """`name`, one value (stored `[1]`), as float32."""
    t = files.get(name)
    check(t.numel() == 1, files, name, f"has shape {list(t.shape)}, expected [1]")
    return t.float()


def dynamic_scale(files: TensorFiles, layer: str, n: int) -> torch.Tensor:
    """`{layer}.weight_scale` `[n]`, after checking that any `weight_offset` is zero."""
    offset_name = f"{layer}.weight_offset"
    if offset_name in files:
        offset = per_channel(files, offset_name, n)
        check(not offset.any(), files, offset_name, "is not zero (asymmetric weights)")
    return per_channel(files, f"{layer}.weight_scale", n)
