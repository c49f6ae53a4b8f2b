"""The replica's media errors: one shape for every refusal, naming the content part."""

from __future__ import annotations

import re

from deployments.protocol.errors import OpenAIError

_OBJECT_REPR = re.compile(r"\s*<[^<>]*? at 0x[0-9a-fA-F]+>")
"""An object's default repr, `<_io.BytesIO object at 0x7f...>`, as PIL's and libsndfile's
messages name the file object they were given."""


def reason(exc: BaseException) -> str:
    """`exc`'s message for a client, without the object reprs in it (PIL's "cannot identify
    image file <_io.BytesIO object at 0x7f...>" becomes "cannot identify image file"): a memory
    address tells the client nothing, and the server's layout something. libsndfile's errors
    give their own text as `error_string`, which is used when present."""
    text = _OBJECT_REPR.sub("", getattr(exc, "error_string", None) or str(exc)).strip()
    return text or type(exc).__name__


def bad_media(param: str, what: str) -> OpenAIError:
    """400 `invalid_media` for a content part whose file cannot be read.

    Args:
        param: the part, e.g. `messages[0].content[1]`.
        what: what is wrong with it.
    """
    return OpenAIError(f"{param}: {what}", param=param, code="invalid_media")


def over_limit(param: str, what: str, limit: str, status_code: int = 400) -> OpenAIError:
    """400 (413 for bytes) `media_limit_exceeded` naming the `media.<limit>` setting.

    Args:
        param: the part or field at fault.
        what: the measured figure against the limit, e.g. `an image of 50000x50000 pixels`.
        limit: the `configs.media_limits.MediaLimits` field and its value.
        status_code: 413 for a size in bytes, else 400.
    """
    return OpenAIError(
        f"{param}: {what}, over the limit of {limit}",
        status_code=status_code,
        param=param,
        code="media_limit_exceeded",
    )


def too_big(param: str, size: str, max_item_bytes: int) -> OpenAIError:
    """413 `media_limit_exceeded` for a file of `size` bytes (e.g. `"7340032"`, `"over 6291456"`)
    over `media.max_item_bytes`."""
    return over_limit(
        param, f"{size} bytes of media", f"media.max_item_bytes={max_item_bytes}", status_code=413
    )
