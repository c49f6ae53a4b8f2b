"""Where a checkpoint tensor lands in the loaded model, by transformers' own key renaming.

A ModelSlim description names tensors as the checkpoint stores them. For the dense families those
are the model's own parameter names; DeepSeek-V4 checkpoints keep DeepSeek's naming
(`layers.0.attn.wq_a.weight`, `layers.0.ffn.experts.3.w1.weight`, `embed.weight`, `hc_head_fn`,
`mtp.0.*`), which transformers renames while loading, merging each layer's per-expert 2-D
weights into the 3-D `gate_up_proj` / `down_proj` parameters (the `deepseek_v4` entry of
transformers' `conversion_mapping.py`, applied by `core_model_loading.rename_source_key`).
`CheckpointNames` applies the same renaming, so that the description's names are resolved the
way the float tensors were loaded rather than by a copy of the rules.

Tensors that transformers does not load (DeepSeek-V4's MTP layer, `mtp.0.*`) are resolved by the
module that does load them, attached to the model, through `CheckpointMapped`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from torch import nn
from transformers import PreTrainedModel
from transformers.conversion_mapping import get_model_conversion_mapping
from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key


@dataclass(frozen=True)
class Target:
    """The model tensor a checkpoint tensor loads into.

    Attributes:
        key: its name in `model.named_parameters()` / `named_buffers()`, e.g.
            `model.layers.0.self_attn.q_a_proj.weight`.
        part: for a tensor that transformers merges with others into `key` (a routed expert's
            gate, up or down weight), the index of the pattern it matched among the merge's
            source patterns (DeepSeek-V4 `gate_up_proj`: 0 = `w1` gate, 1 = `w3` up); else None.
    """

    key: str
    part: int | None = None


@runtime_checkable
class CheckpointMapped(Protocol):
    """A module attached to a loaded model that reads its own tensors from the checkpoint
    (transformers did not), e.g. DeepSeek-V4's MTP layer as `model.mtp`.

    Attributes:
        checkpoint_prefix: the checkpoint names of its tensors start with it (`mtp.0.`).
    """

    checkpoint_prefix: str

    def checkpoint_target(self, name: str) -> tuple[str, int | None] | None:
        """Where checkpoint tensor `<checkpoint_prefix><name>` went: this module's parameter
        (or buffer) name, relative to it, and the tensor's part of it when several are merged
        into one (as `Target.part`: a routed expert's `w1` is part 0 of `gate_up_proj`, `w3`
        part 1, `w2` part 0 of `down_proj`), else None for the part; None if it took none."""
        ...


class CheckpointNames:
    """Resolves checkpoint tensor names against a loaded transformers model.

    Args:
        model: the model `from_pretrained` returned (any attached sub-models, e.g. an MTP
            layer, included in its parameter names).
    """

    def __init__(self, model: nn.Module) -> None:
        self._keys = {name for name, _ in model.named_parameters(remove_duplicate=False)}
        self._keys |= {name for name, _ in model.named_buffers(remove_duplicate=False)}
        self._present = dict.fromkeys(self._keys, True)  # rename_source_key's lookup table
        self._prefix = str(getattr(model, "base_model_prefix", "") or "") or None
        transforms = []
        if isinstance(model, PreTrainedModel):
            transforms = get_model_conversion_mapping(model)
        self._renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
        self._converters = [t for t in transforms if isinstance(t, WeightConverter)]
        self._mapped = [
            (f"{module_name}.", module)
            for module_name, module in model.named_modules()
            if module_name and isinstance(module, CheckpointMapped)
        ]

    def claimed(self, name: str) -> bool:
        """Whether an attached `CheckpointMapped` module reads `name`."""
        return any(name.startswith(m.checkpoint_prefix) for _, m in self._mapped)

    def resolve(self, name: str) -> Target | None:
        """The model tensor `name` loads into, or None when the model has no place for it."""
        if name in self._keys:
            return Target(name)
        for module_name, module in self._mapped:
            if name.startswith(module.checkpoint_prefix):
                found = module.checkpoint_target(name[len(module.checkpoint_prefix) :])
                if found is None or module_name + found[0] not in self._keys:
                    return None
                return Target(module_name + found[0], found[1])
        key, pattern = rename_source_key(
            name, self._renamings, self._converters, self._prefix, self._present
        )
        if key not in self._keys:
            return None
        if pattern is None:
            return Target(key)
        converter = next(c for c in self._converters if pattern in c.source_patterns)
        return Target(key, converter.source_patterns.index(pattern))
