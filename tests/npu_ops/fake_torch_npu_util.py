"""Call recording shared by the torch_npu stand-in modules."""

from __future__ import annotations

from typing import Any

import torch

FLOATS = (torch.float16, torch.bfloat16, torch.float32)
HALVES = (torch.float16, torch.bfloat16)

CALLS: list[tuple[str, dict[str, Any]]] = []


def record(name: str, **args: Any) -> None:
    """Remember one call: tensors as `(shape, dtype)`, everything else as given."""
    CALLS.append(
        (
            name,
            {
                k: (tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else v
                for k, v in args.items()
            },
        )
    )


def calls_to(name: str) -> list[dict[str, Any]]:
    """Recorded arguments of every call to `name`, oldest first."""
    return [args for n, args in CALLS if n == name]
