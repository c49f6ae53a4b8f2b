"""Small real media files for the replica's media tests: PNGs made with PIL, audio written by
libsndfile, and a PNG that claims any size without the pixels (crafted by hand per the PNG spec,
section 5: the signature, then IHDR, one small IDAT and IEND chunks, each with its CRC-32)."""

from __future__ import annotations

import base64
import io
import struct
import zlib

import numpy as np
import soundfile
from PIL import Image


def png_bytes(width: int, height: int) -> bytes:
    """A solid-colour RGB PNG."""
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 90)).save(out, "PNG")
    return out.getvalue()


def png_header(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims `width` x `height` (8-bit RGB) over a few bytes of pixel data."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def data_url(raw: bytes, media_type: str = "image/png") -> str:
    """`raw` as a base64 `data:` URL."""
    return f"data:{media_type};base64,{base64.b64encode(raw).decode()}"


def audio_bytes(seconds: float, rate: int = 16000, channels: int = 1, fmt: str = "WAV") -> bytes:
    """A 440 Hz tone of `seconds` at `rate` Hz, written by libsndfile as `fmt`."""
    t = np.arange(int(seconds * rate), dtype=np.float32) / rate
    tone = 0.5 * np.sin(2 * np.pi * 440 * t)
    out = io.BytesIO()
    soundfile.write(out, np.repeat(tone[:, None], channels, axis=1), rate, format=fmt)
    return out.getvalue()


def b64(raw: bytes) -> str:
    """Standard base64 text of `raw`."""
    return base64.b64encode(raw).decode()


def image_part(url: str) -> dict[str, object]:
    """An OpenAI `image_url` content part."""
    return {"type": "image_url", "image_url": {"url": url}}


def audio_part(raw: bytes, fmt: str = "wav") -> dict[str, object]:
    """An OpenAI `input_audio` content part."""
    return {"type": "input_audio", "input_audio": {"data": b64(raw), "format": fmt}}
