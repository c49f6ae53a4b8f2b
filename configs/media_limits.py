"""Bounds on the images and audio clips one chat request may carry (a model deployment's
`media`), and where they may come from."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class MediaLimits(BaseModel):
    """Limits the model replica checks while it loads a request's media.

    Over a count, pixel or duration limit is a 400 naming the limit; over `max_item_bytes` a
    413. Both are checked from the file's header, before the image or audio is decoded.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_images: int = Field(8, ge=0, description="`image_url` parts in one request.")
    max_audios: int = Field(4, ge=0, description="`input_audio` parts in one request.")
    max_item_bytes: int = Field(
        10 * 1024 * 1024,
        gt=0,
        description="Bytes of one encoded image or audio file (after base64 decoding, or as "
        "fetched from a URL); 413 above.",
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
    decode_timeout_s: float = Field(
        10.0, gt=0, description="Seconds decoding one item may take (off the event loop)."
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
