"""Image files -> RGB `PIL.Image`s, the pixel count and aspect ratio checked from the header
before any pixel is decoded (PIL's `Image.open` reads the header only; `load` decodes), then
converted to 8-bit RGB as transformers' image processors expect."""

from __future__ import annotations

import io
import re
import warnings

import numpy as np
from PIL import Image

from configs.media_limits import MediaLimits
from deployments.media.errors import bad_media, over_limit, reason

IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")
"""Containers PIL may open (fewer parsers, less attack surface); an animated image gives its
first frame."""

MAX_ASPECT_RATIO = 200
"""Longer side / shorter side the Qwen2-VL image processor takes: its `smart_resize`
(transformers `models/qwen2_vl/image_processing_qwen2_vl.py`) raises `ValueError("absolute
aspect ratio must be smaller than 200")` above it."""

_WIDE_INT_MODES = frozenset({"I", "I;16", "I;16L", "I;16B", "I;16N"})
"""PIL modes of 16-bit grayscale (a 16-bit PNG opens as `I;16` or `I`, values 0..65535), which
`convert("RGB")` would clip to 255 (white) instead of scaling."""


def decode_image(raw: bytes, limits: MediaLimits, param: str) -> Image.Image:
    """Decode an image file to 8-bit RGB.

    Raises:
        OpenAIError: 400 over `max_image_pixels` or `MAX_ASPECT_RATIO` (from the header, before
            decoding), or for a file that is not a complete image in one of `IMAGE_FORMATS`.
    """
    with warnings.catch_warnings():
        # our own pixel limit replaces PIL's decompression-bomb warning; its error (over
        # twice `Image.MAX_IMAGE_PIXELS`) still comes, and is answered as our limit
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            image = Image.open(io.BytesIO(raw), formats=IMAGE_FORMATS)
        except Image.DecompressionBombError as exc:  # "Image size (N pixels) exceeds ..."
            pixels = re.search(r"\((\d+) pixels\)", str(exc))
            what = f"an image of {pixels.group(1)} pixels" if pixels else "an image"
            raise _too_many(param, what, limits) from None
        except (OSError, SyntaxError, ValueError) as exc:  # PIL's "cannot identify image file"
            formats = "/".join(IMAGE_FORMATS)
            raise bad_media(param, f"not a readable {formats} image: {reason(exc)}") from None
    width, height = image.size
    if width * height > limits.max_image_pixels:
        raise _too_many(param, f"an image of {width}x{height} pixels", limits)
    if width == 0 or height == 0:
        raise bad_media(param, f"the image is {width}x{height} pixels")
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise over_limit(
            param,
            f"an image of {width}x{height} pixels (aspect ratio "
            f"{max(width, height) / min(width, height):.0f}:1)",
            f"{MAX_ASPECT_RATIO}:1 for the aspect ratio (the model's image processor)",
        )
    try:
        image.load()  # decodes (a truncated file raises here)
        return to_rgb(image)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise bad_media(param, f"the image data is damaged or truncated: {reason(exc)}") from None


def to_rgb(image: Image.Image) -> Image.Image:
    """`image` as 8-bit RGB: 16-bit grayscale scaled to 8 bits, and transparency (an alpha
    band, or a palette or grayscale `transparency` entry) composited over white, as
    transformers' `image_transforms.convert_to_rgb` does (a plain `convert("RGB")` keeps the
    colour under a transparent pixel, often black)."""
    if image.mode in _WIDE_INT_MODES:
        image = _gray16_to_8(image)
    if "A" not in image.getbands() and image.info.get("transparency") is None:
        return image.convert("RGB")
    rgba = image.convert("RGBA")
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(white, rgba).convert("RGB")


def _gray16_to_8(image: Image.Image) -> Image.Image:
    wide = np.asarray(image).astype(np.int32, copy=False)  # `I;16` is uint16, `I` int32
    gray = Image.fromarray((np.clip(wide, 0, 65535) >> 8).astype(np.uint8))
    key = image.info.get("transparency")  # a tRNS grey level, in 16-bit units
    if isinstance(key, int):
        alpha = Image.fromarray(np.where(wide == key, 0, 255).astype(np.uint8))
        gray.putalpha(alpha)  # -> "LA"
    return gray


def _too_many(param: str, what: str, limits: MediaLimits) -> Exception:
    return over_limit(param, what, f"media.max_image_pixels={limits.max_image_pixels}")
