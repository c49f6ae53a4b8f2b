"""Image files -> RGB `PIL.Image`s, the pixel count checked from the header before any pixel
is decoded (PIL's `Image.open` reads the header only; `load` decodes)."""

from __future__ import annotations

import io
import re
import warnings

from PIL import Image

from configs.media_limits import MediaLimits
from deployments.media.errors import bad_media, over_limit

IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")
"""Containers PIL may open (fewer parsers, less attack surface); an animated image gives its
first frame."""


def decode_image(raw: bytes, limits: MediaLimits, param: str) -> Image.Image:
    """Decode an image file to RGB.

    Raises:
        OpenAIError: 400 over `max_image_pixels` (from the header, before decoding), or for a
            file that is not a complete image in one of `IMAGE_FORMATS`.
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
            raise bad_media(param, f"not a readable {formats} image: {exc}") from None
    width, height = image.size
    if width * height > limits.max_image_pixels:
        raise _too_many(param, f"an image of {width}x{height} pixels", limits)
    if width == 0 or height == 0:
        raise bad_media(param, f"the image is {width}x{height} pixels")
    try:
        return image.convert("RGB")  # decodes (a truncated file raises here)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise bad_media(param, f"the image data is damaged or truncated: {exc}") from None


def _too_many(param: str, what: str, limits: MediaLimits) -> Exception:
    return over_limit(param, what, f"media.max_image_pixels={limits.max_image_pixels}")
