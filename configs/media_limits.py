"""Bounds on the images and audio clips one chat request may carry (a model deployment's
`media`), and where they may come from."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class MediaLimits(BaseModel):
    """Limits the model replica checks while it loads a request's media.

    Over a count, pixel, duration, channel or sample limit is a 400 naming the limit; over
    `max_item_bytes` a 413. Each is checked before the image or audio is decoded (the sizes
    from the file's header), and again on what was decoded where a header only estimates.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_images: int = Field(8, ge=0, description="`image_url` parts in one request.")
    max_audios: int = Field(4, ge=0, description="`input_audio` parts in one request.")
    max_item_bytes: int = Field(
        6 * 1024 * 1024,
        gt=0,
        description="Bytes of one encoded image or audio file (after base64 decoding, or as "
        "fetched from a URL); 413 above. 6 MiB is about the most one inline file can be: base64 "
        "makes it a third larger, and the router's `max_body_bytes` (8 MiB) bounds the whole "
        "body; a larger value only matters for fetched URLs or a raised body limit.",
    )
    max_image_pixels: int = Field(
        4096 * 4096,
        gt=0,
        description="Width x height of one image, read from its header before decoding.",
    )
    max_audio_seconds: float = Field(
        30.0,
        gt=0,
        description="Duration of one audio clip, read from its header before decoding "
        "(Qwen2-Audio's feature extractor reads 30 s windows).",
    )
    max_audio_channels: int = Field(
        8, gt=0, description="Channels of one audio clip, read from its header before decoding."
    )
    max_audio_samples: int = Field(
        30 * 96_000 * 2,
        gt=0,
        description="Frames x channels of one audio clip, read from its header before decoding "
        "(4 bytes each once decoded; the default is 30 s of 96 kHz stereo, 22 MiB). Bounds a "
        "small compressed file (FLAC) that claims a high rate and many channels.",
    )
    decode_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Seconds decoding one item and running the model's processor on it may "
        "take (off the event loop); the whole request's preparation is also bounded by the "
        "model's `prepare_timeout_s`.",
    )
    allow_urls: bool = Field(
        False,
        description="Fetch `http(s)` image URLs; false: only `data:` URLs are accepted.",
    )
    url_timeout_s: float = Field(
        10.0, gt=0, description="Seconds fetching one URL may take, redirects included."
    )
    allowed_url_hosts: list[str] = Field(
        default_factory=list,
        description="Host names (or IP literals) fetched even when they resolve to private, "
        "loopback, link-local or reserved addresses, which are otherwise refused.",
    )
