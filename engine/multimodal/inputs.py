"""What a request carries besides token ids: its media items, already through the model's
processor (the engine's input contract; `deployments.media` builds them).

A media item occupies `length` consecutive placeholder tokens of the prompt starting at
`offset` (Qwen2.5-VL: `<|image_pad|>` x grid_t * grid_h * grid_w / merge², as
`Qwen2_5_VLProcessor` expands them; Qwen2-Audio: `<|AUDIO|>` x the encoder's output frames, as
`Qwen2AudioProcessor` does). In prefill, the encoder's output for the item replaces those
tokens' embeddings, row for row.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import torch
from transformers import PretrainedConfig

from configs.policy_config import CHECKPOINT_MODALITIES, MediaModality

Modality = MediaModality
"""The media kinds a request may carry (text is implicit)."""


@dataclass(frozen=True, eq=False)
class MediaItem:
    """One image or audio clip of a prompt, as the model's processor outputs it.

    Attributes:
        modality: "image" or "audio".
        offset: index in the prompt's token ids of the item's first placeholder token.
        length: number of placeholder tokens (= rows of the encoder's output for it).
        data: the processor's tensors for this item alone, CPU:
            image (Qwen2.5-VL): `pixel_values` `[patches, channels * temporal_patch *
            patch²]` float32 and `image_grid_thw` `[1, 3]` int64;
            audio (Qwen2-Audio): `input_features` `[1, mel_bins, frames]` float32 and
            `feature_attention_mask` `[1, frames]` int64.
        content_hash: sha256 of the item's tensors (`media_hash`): two items with equal hashes
            give equal embeddings; prefix-cache block hashes and the encoder cache key on it.
    """

    modality: Modality
    offset: int
    length: int
    data: dict[str, torch.Tensor]
    content_hash: bytes = field(default=b"")

    def __post_init__(self) -> None:
        if not self.content_hash:
            object.__setattr__(self, "content_hash", media_hash(self.modality, self.data))

    @property
    def end(self) -> int:
        """One past the item's last placeholder token."""
        return self.offset + self.length


def media_hash(modality: Modality, data: dict[str, torch.Tensor]) -> bytes:
    """sha256 over the modality and each tensor's name, dtype, shape and bytes, in name order.

    Returns:
        The 32-byte digest.
    """
    digest = hashlib.sha256(modality.encode())
    for name in sorted(data):
        t = data[name].detach().cpu().contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.digest()


def config_modalities(config: PretrainedConfig) -> frozenset[Modality]:
    """The media a checkpoint's config takes (`configs.policy_config.CHECKPOINT_MODALITIES` by
    its `model_type`); empty for a text model."""
    media = CHECKPOINT_MODALITIES.get(str(getattr(config, "model_type", "")))
    return frozenset() if media is None else frozenset({media})
