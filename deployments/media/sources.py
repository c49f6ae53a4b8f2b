"""The bytes of a media part: base64 (`input_audio.data`), `data:` URLs (RFC 2397) and, where
allowed, `http(s)` URLs (`deployments.media.url_fetch`).

Read as leniently as the RFCs allow: the scheme, the media type and the `;base64` marker in any
case (RFC 2397 section 3 names RFC 2045's case-insensitive types and parameters; RFC 3986 section
3.1 schemes), and base64 broken into lines (RFC 2045 section 6.8, 76 columns, as Python's
`base64.encodebytes` writes it): whitespace is dropped before decoding."""

from __future__ import annotations

import base64
import binascii

from configs.media_limits import MediaLimits
from deployments.media.errors import bad_media, too_big
from deployments.media.url_fetch import fetch_url

_NO_WHITESPACE = str.maketrans("", "", " \t\n\r\v\f")
"""Deletes ASCII whitespace (other characters outside base64's alphabet are refused)."""


def decode_base64(data: str, limits: MediaLimits, param: str) -> bytes:
    """The bytes of standard base64 text (RFC 4648 section 4; whitespace and line breaks
    ignored), size-checked before decoding.

    Raises:
        OpenAIError: 413 when the decoded size would pass `max_item_bytes`; 400 for text that
            is not base64.
    """
    data = data.translate(_NO_WHITESPACE)
    size = len(data) * 3 // 4  # at most this many bytes (padding makes it up to 2 fewer)
    if size > limits.max_item_bytes + 2:
        raise too_big(param, str(size), limits.max_item_bytes)
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise bad_media(param, "the data is not valid base64") from None
    if len(raw) > limits.max_item_bytes:
        raise too_big(param, str(len(raw)), limits.max_item_bytes)
    return raw


def read_image_url(url: str, limits: MediaLimits, param: str) -> bytes:
    """The file an `image_url.url` names: a `data:image/...;base64,...` URL, or an `http(s)`
    URL when `limits.allow_urls`.

    Raises:
        OpenAIError: 400 for another scheme, a `data:` URL that is not base64 image data, or
            a URL while URLs are not allowed; 413 over `max_item_bytes`; what `fetch_url`
            raises.
    """
    scheme = url[:8].lower()
    if scheme.startswith("data:"):
        header, comma, data = url[5:].partition(",")
        media_type, *params = (field.strip().lower() for field in header.split(";"))
        if not comma or "base64" not in params:
            raise bad_media(param, "a data URL must be base64: data:image/<type>;base64,<data>")
        if not media_type.startswith("image/"):
            raise bad_media(
                param, f"the data URL holds {media_type[:100] or 'no media type'!r}, not an image"
            )
        return decode_base64(data, limits, param)
    if scheme.startswith(("http://", "https://")):
        if not limits.allow_urls:
            raise bad_media(
                param,
                "this model takes images as data URLs only (its media.allow_urls is false): "
                "send data:image/<type>;base64,<data>",
            )
        return fetch_url(url, limits, param)
    raise bad_media(param, "the image URL must be a data: or http(s): URL")
