"""What the engine needs to know of each multimodal family: its transformers class, which
sub-config is its encoder's, how to run the encoder on a step's media items, and (Qwen2.5-VL)
the M-RoPE positions of a prompt.

Everything runs the checkpoint's own transformers modules: Qwen2.5-VL's vision tower through
`Qwen2_5_VLModel.get_image_features`, its positions through `Qwen2_5_VLModel.get_rope_index`;
Qwen2-Audio's `audio_tower` and `multi_modal_projector` with the padding masks that
`Qwen2AudioModel.forward` builds (transformers 5.25, `models/qwen2_audio/modeling_qwen2_audio.py`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from transformers import (
    PreTrainedModel,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2AudioForConditionalGeneration,
)
from transformers.masking_utils import create_bidirectional_mask

from engine.multimodal.inputs import MediaItem


class MultimodalFamily(ABC):
    """A loaded multimodal model seen from the engine.

    Args:
        model: the family's `model_class`, loaded (`engine.model_loader.load_model`).

    Class attributes:
        model_class: the transformers class a checkpoint of the family loads into.
        encoder_config: the name of the encoder's sub-config (its attention implementation is
            the encoder one; the language model's `text_config` gets paged attention).
        mrope: whether positions are M-RoPE `[3, T]` (`prompt_positions`) rather than `[T]`.
    """

    model_class: ClassVar[type[PreTrainedModel]]
    encoder_config: ClassVar[str]
    mrope: ClassVar[bool] = False

    def __init__(self, model: torch.nn.Module) -> None:
        self.model: Any = model  # its submodules and methods are the family's, untyped

    @abstractmethod
    def encode(self, items: Sequence[MediaItem]) -> list[torch.Tensor]:
        """Run the encoder once over all `items` (one batch, whatever their requests).

        Returns:
            Per item, its embeddings `[item.length, hidden]` in the model's dtype, on its
            device: the rows that replace its placeholder tokens' embeddings.
        """

    def prompt_positions(
        self, prompt_len: int, items: Sequence[MediaItem]
    ) -> tuple[torch.Tensor, int]:
        """M-RoPE positions of a prompt and the offset of its generated tokens (`mrope` only).

        Returns:
            `[3, prompt_len]` int64 positions (temporal, height, width) and `delta`: a token at
            cache position `p >= prompt_len` has position `p + delta` in all three sections.
        """
        raise NotImplementedError(f"{type(self).__name__} has 1-D positions")


class Qwen25VLFamily(MultimodalFamily):
    """Qwen2.5-VL: images through the windowed vision tower and its 2x2 patch merger."""

    model_class = Qwen2_5_VLForConditionalGeneration
    encoder_config = "vision_config"
    mrope = True

    def encode(self, items: Sequence[MediaItem]) -> list[torch.Tensor]:
        """See `MultimodalFamily.encode`: the items' `pixel_values` concatenated and their
        `image_grid_thw` stacked, as `Qwen2_5_VLProcessor` batches several images."""
        dev = self.model.device
        pixels = torch.cat([i.data["pixel_values"] for i in items]).to(dev)
        grids = torch.cat([i.data["image_grid_thw"] for i in items]).to(dev)
        out = self.model.model.get_image_features(pixel_values=pixels, image_grid_thw=grids)
        return list(out.pooler_output)

    def prompt_positions(
        self, prompt_len: int, items: Sequence[MediaItem]
    ) -> tuple[torch.Tensor, int]:
        """See `MultimodalFamily.prompt_positions`: `get_rope_index` over the prompt, its image
        items marked as image tokens (type 1) with their grids; a text prompt counts 0, 1, ..."""
        if not items:
            return torch.arange(prompt_len).expand(3, -1), 0
        types = torch.zeros(1, prompt_len, dtype=torch.int)
        for item in items:
            types[0, item.offset : item.end] = 1
        grids = torch.cat([i.data["image_grid_thw"] for i in items])
        ids = torch.zeros(1, prompt_len, dtype=torch.long)  # read for its shape only
        positions, deltas = self.model.model.get_rope_index(ids, types, image_grid_thw=grids)
        return positions[:, 0], int(deltas[0, 0])


class Qwen2AudioFamily(MultimodalFamily):
    """Qwen2-Audio: log-mel clips through the Whisper-style encoder and the linear projector."""

    model_class = Qwen2AudioForConditionalGeneration
    encoder_config = "audio_config"

    def encode(self, items: Sequence[MediaItem]) -> list[torch.Tensor]:
        """See `MultimodalFamily.encode`: the clips' `input_features` `[N, mel, frames]` as one
        batch, each attending over its own frames (`feature_attention_mask`), projected; the
        frames past each clip's end are dropped, as `Qwen2AudioModel.forward` does."""
        inner = self.model.model
        tower = inner.audio_tower
        dev = self.model.device
        features = torch.cat([i.data["input_features"] for i in items]).to(dev, self.model.dtype)
        frames = torch.cat([i.data["feature_attention_mask"] for i in items]).sum(-1)
        conv_lens, out_lens = tower._get_feat_extract_output_lengths(frames)
        # after the stride-2 convolution: which positions of each clip hold real frames
        width = (features.shape[-1] - 2) // 2 + 1
        real = (torch.arange(width)[None] < conv_lens[:, None]).long().to(dev)
        mask = create_bidirectional_mask(
            config=tower.config,
            inputs_embeds=torch.zeros(len(items), width, 1, dtype=features.dtype, device=dev),
            attention_mask=real,
        )
        hidden = tower(features, attention_mask=mask).last_hidden_state
        projected = inner.multi_modal_projector(hidden)
        return [projected[i, :n] for i, n in enumerate(out_lens.tolist())]


FAMILIES: dict[str, type[MultimodalFamily]] = {
    "qwen2_5_vl": Qwen25VLFamily,
    "qwen2_audio": Qwen2AudioFamily,
}
"""`model_type` -> its family."""


def family_of(model: torch.nn.Module) -> MultimodalFamily | None:
    """The loaded model's family adapter; None for a text model (or a drafting module, which
    has no `config`)."""
    config = getattr(model, "config", None)
    cls = FAMILIES.get(getattr(config, "model_type", ""))
    return None if cls is None else cls(model)
