"""A chat request's media parts -> processed items: which parts a model takes, the per-request
counts, fetching, decoding and the processor, each item bounded in time off the event loop.

What a replica's model takes is read from its checkpoint: `config.json`'s `model_type` picks
the processor (`configs.policy_config.CHECKPOINT_MODALITIES`), and its
`preprocessor_config.json` configures it; a model type not listed is a text model, and
`load_media_loader` returns None for it, so text models do no media work at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, TypeVar

from configs.media_limits import MediaLimits
from configs.policy_config import CHECKPOINT_MODALITIES, modalities_mismatch
from deployments.media.audio import decode_audio
from deployments.media.errors import bad_media, over_limit, reason
from deployments.media.images import decode_image
from deployments.media.placeholders import expand
from deployments.media.processors import AudioProcessing, ImageProcessing, Processed
from deployments.media.sources import decode_base64, read_image_url
from deployments.protocol.errors import OpenAIError
from deployments.protocol.requests import AudioPart, ChatMessage, ImagePart, media_parts
from engine.multimodal.inputs import MediaItem, Modality

T = TypeVar("T")

DECODE_THREADS = 2
"""Threads decoding media; a timed-out decode finishes in the background (threads cannot be
stopped) while the other goes on."""


class MediaLoader:
    """Loads the media parts of chat requests for one multimodal model.

    Args:
        processing: the model's processor for its one media modality.
        limits: the deployment's `media` limits.
        model_id: the model's id, for errors.
    """

    def __init__(
        self, processing: ImageProcessing | AudioProcessing, limits: MediaLimits, model_id: str
    ) -> None:
        self.processing = processing
        self.limits = limits
        self.model_id = model_id
        self.pads: dict[int, Modality] = {processing.pad_id: processing.modality}
        self._pool = ThreadPoolExecutor(DECODE_THREADS, thread_name_prefix="media-decode")

    @property
    def modalities(self) -> frozenset[Modality]:
        """The media this model reads."""
        return frozenset(self.pads.values())

    def load(self, messages: list[ChatMessage]) -> list[Processed]:
        """The media parts of `messages`, in order, through the model's processor.

        Blocking (fetches and decodes): call it off the event loop.

        Raises:
            OpenAIError: 400 naming the part (`messages[i].content[j]`) for a modality this
                model does not read, media outside a user message, a file that cannot be read,
                over a count, pixel, aspect-ratio, duration, channel or sample limit, a clip too
                short for one audio token, or a decode past `decode_timeout_s`; 413 over
                `max_item_bytes`.
        """
        parts = [(param, message.role, part) for param, message, part in media_parts(messages)]
        if not parts:
            return []
        counts = {"image": 0, "audio": 0}
        for param, role, part in parts:
            if part.modality not in self.modalities:
                raise OpenAIError(
                    f"{param}: model {self.model_id} does not take {part.modality} input (it "
                    f"reads text and {', '.join(sorted(self.modalities))}); the part type "
                    f"{part.type!r} is not supported",
                    param=param,
                    code="unsupported_modality",
                )
            if role != "user":
                raise OpenAIError(
                    f"{param}: only user messages may hold {part.type!r} parts", param=param
                )
            counts[part.modality] += 1
        for modality, name in (("image", "max_images"), ("audio", "max_audios")):
            limit = getattr(self.limits, name)
            if counts[modality] > limit:
                what = f"{counts[modality]} {modality} parts"
                raise over_limit("messages", what, f"media.{name}={limit}")
        return [self._load(param, part) for param, _, part in parts]

    def _load(self, param: str, part: ImagePart | AudioPart) -> Processed:
        limits = self.limits
        if isinstance(part, ImagePart):
            raw = read_image_url(part.image_url.url, limits, f"{param}.image_url.url")
            return self._bounded(param, lambda: self._image(raw, param))
        raw = decode_base64(part.input_audio.data, limits, f"{param}.input_audio.data")
        return self._bounded(param, lambda: self._audio(raw, part.input_audio.format, param))

    def _image(self, raw: bytes, param: str) -> Processed:
        assert isinstance(self.processing, ImageProcessing), "checked against modalities"
        image = decode_image(raw, self.limits, param)
        try:
            return self.processing(image)
        except ValueError as exc:  # a rule of the processor's that `decode_image` missed
            raise bad_media(
                param, f"the model's image processor refused it: {reason(exc)}"
            ) from None

    def _audio(self, raw: bytes, fmt: str, param: str) -> Processed:
        assert isinstance(self.processing, AudioProcessing), "checked against modalities"
        rate = self.processing.sampling_rate
        wave = decode_audio(raw, fmt, rate, self.limits, param)
        if len(wave) < self.processing.min_samples:
            raise self._too_short(param, len(wave))
        processed = self.processing(wave)
        if processed.length == 0:  # the engine refuses an item without tokens
            raise self._too_short(param, len(wave))
        return processed

    def _too_short(self, param: str, samples: int) -> OpenAIError:
        assert isinstance(self.processing, AudioProcessing), "checked against modalities"
        ms = 1000 / self.processing.sampling_rate
        return bad_media(
            param,
            f"the clip is {samples * ms:.1f} ms; at least {self.processing.min_samples * ms:.1f} "
            "ms of audio gets one audio token",
        )

    def _bounded(self, param: str, fn: Callable[[], T]) -> T:
        future = self._pool.submit(fn)
        try:
            return future.result(timeout=self.limits.decode_timeout_s)
        except FutureTimeout:
            raise OpenAIError(
                f"{param}: decoding took over media.decode_timeout_s="
                f"{self.limits.decode_timeout_s} s",
                param=param,
                code="media_decode_timeout",
            ) from None

    def expand(
        self, ids: list[int], media: list[Processed]
    ) -> tuple[list[int], tuple[MediaItem, ...]]:
        """`placeholders.expand` with this model's placeholder tokens."""
        return expand(ids, media, self.pads)


def load_media_loader(
    checkpoint: str,
    tokenizer: Any,
    limits: MediaLimits,
    model_id: str,
    declared: Collection[str] = ("text",),
) -> MediaLoader | None:
    """The media loader of a checkpoint directory whose `model_type` is in `CHECKPOINT_MODALITIES`;
    None for any other checkpoint (a text model, or a `.gguf` file).

    Args:
        declared: the deployment's `input_modalities` (what the router sends it).

    Raises:
        ValueError: `declared` names a modality the checkpoint does not take (the router would
            send it requests that all fail), or leaves out the one it does (none would come).
    """
    config_path = Path(checkpoint) / "config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    model_type = config.get("model_type")
    problem = modalities_mismatch(model_id, declared, model_type)
    if problem is not None:
        raise ValueError(problem)
    modality = CHECKPOINT_MODALITIES.get(model_type or "")
    if modality is None:
        return None
    if modality == "image":
        processing: ImageProcessing | AudioProcessing = ImageProcessing(
            checkpoint, int(config["image_token_id"])
        )
    else:
        processing = AudioProcessing(checkpoint, tokenizer)
    return MediaLoader(processing, limits, model_id)
