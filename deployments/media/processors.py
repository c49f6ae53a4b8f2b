"""One decoded image or clip -> the model's processor tensors and its placeholder count, with
transformers' own classes, so the prompt matches what the checkpoint was trained on.

- Qwen2.5-VL: the checkpoint's image processor (`AutoImageProcessor`; `Qwen2VLImageProcessor`
  resizes to multiples of 28 px within `min_pixels`/`max_pixels`) gives `pixel_values`
  `[patches, 1176]` and `image_grid_thw` `[1, 3]`; the image takes
  `grid_t * grid_h * grid_w // merge_size**2` `<|image_pad|>` tokens, as `Qwen2_5_VLProcessor`
  expands them (it cannot be built here: its video processor needs torchvision).
- Qwen2-Audio: `Qwen2AudioProcessor(feature_extractor, tokenizer)` itself, run on the one
  placeholder `<|AUDIO|>` with the clip: it gives `input_features` `[1, 128, 3000]`,
  `feature_attention_mask` `[1, 3000]` and expands the placeholder to the encoder's output
  frames, which are counted. A clip under 3 feature frames (20 ms) gets no token at all, an
  item the engine refuses: `AudioProcessing.min_samples` is the shortest clip that gets one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image
from transformers import AutoFeatureExtractor, AutoImageProcessor, Qwen2AudioProcessor

from engine.multimodal.inputs import Modality, media_hash


@dataclass(frozen=True)
class Processed:
    """One media part through the model's processor, not yet placed in a prompt.

    Attributes:
        modality: "image" or "audio".
        length: placeholder tokens it takes in the prompt.
        data: its tensors (see `engine.multimodal.inputs.MediaItem.data`).
        content_hash: `media_hash` of `data`, computed once.
    """

    modality: Modality
    length: int
    data: dict[str, torch.Tensor]
    content_hash: bytes


class ImageProcessing:
    """Qwen2.5-VL's image inputs.

    Args:
        checkpoint: the checkpoint directory (its `preprocessor_config.json`).
        pad_id: the `<|image_pad|>` token id (the config's `image_token_id`).
    """

    modality: Modality = "image"

    def __init__(self, checkpoint: str, pad_id: int) -> None:
        self.processor: Any = AutoImageProcessor.from_pretrained(checkpoint)
        self.pad_id = pad_id
        self.merge_size = int(self.processor.merge_size)

    def __call__(self, image: Image.Image) -> Processed:
        """The image's tensors and placeholder count."""
        out = self.processor(images=[image], return_tensors="pt")
        data = {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}
        length = int(data["image_grid_thw"].prod()) // self.merge_size**2
        return Processed("image", length, data, media_hash("image", data))


class AudioProcessing:
    """Qwen2-Audio's audio inputs.

    Args:
        checkpoint: the checkpoint directory (its Whisper `preprocessor_config.json`).
        tokenizer: the checkpoint's tokenizer (the processor expands `<|AUDIO|>` with it).
    """

    modality: Modality = "audio"

    def __init__(self, checkpoint: str, tokenizer: Any) -> None:
        extractor = AutoFeatureExtractor.from_pretrained(checkpoint)
        self.processor = Qwen2AudioProcessor(feature_extractor=extractor, tokenizer=tokenizer)
        self.sampling_rate = int(extractor.sampling_rate)
        self.pad_id = int(self.processor.audio_token_id)
        self.min_samples = min_audio_samples(int(extractor.hop_length))

    def __call__(self, waveform: np.ndarray) -> Processed:
        """The clip's tensors and placeholder count (`waveform`: mono, `sampling_rate` Hz)."""
        out = self.processor(
            text=self.processor.audio_token,
            audio=[waveform],
            sampling_rate=self.sampling_rate,
            return_tensors="pt",
        )
        data = {
            "input_features": out["input_features"],
            "feature_attention_mask": out["feature_attention_mask"].to(torch.int64),
        }
        length = int((out["input_ids"] == self.pad_id).sum())
        return Processed("audio", length, data, media_hash("audio", data))


def audio_tokens(frames: int) -> int:
    """`<|AUDIO|>` tokens for `frames` feature frames: two stride-2 halvings (the encoder's
    second convolution, then its pooling), as `Qwen2AudioProcessor.__call__` counts them
    (transformers `models/qwen2_audio/processing_qwen2_audio.py`: `num_audio_tokens`)."""
    return (((frames - 1) // 2 + 1) - 2) // 2 + 1


def min_audio_samples(hop_length: int) -> int:
    """The fewest samples that get one `<|AUDIO|>` token: the Whisper feature extractor gives
    `ceil(samples / hop_length)` frames (its attention mask, one entry per hop), and
    `audio_tokens` needs 3 of them (`2 * hop_length + 1` = 321 samples, 20 ms at 16 kHz)."""
    frames = next(n for n in range(1, 64) if audio_tokens(n) > 0)
    return (frames - 1) * hop_length + 1
