"""The process group of this rank's tensor-parallel collectives.

One Ray actor process is one rank (`engine.parallel.worker`), so the group is process state,
as vLLM keeps its tensor-parallel group (`vllm/distributed/parallel_state.py`,
`get_tp_group`). Without pipeline parallel it is the default group (all ranks); with it, the
ranks of this rank's pipeline stage, set once when the rank joins.
"""

from __future__ import annotations

import torch.distributed as dist

_tensor_group: dist.ProcessGroup | None = None


def set_tensor_group(group: dist.ProcessGroup | None) -> None:
    """Make `group` the tensor-parallel group of this process (None: the default group)."""
    global _tensor_group
    _tensor_group = group


def tensor_group() -> dist.ProcessGroup | None:
    """The group the row-parallel layers and experts all-reduce over (None: the default)."""
    return _tensor_group
