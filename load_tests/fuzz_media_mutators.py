"""Fuzz mutators of image and audio content parts (registered in `fuzz_mutators.MUTATORS`).

A chat body's last turn becomes a user message with a text part and one or more media parts in
OpenAI's shapes, `{"type": "image_url", "image_url": {"url": ...}}` and
`{"type": "input_audio", "input_audio": {"data": <base64>, "format": ...}}`, each either valid
(a tiny PNG, JPEG or WAV: served by a model that reads it, a 400 from one that does not) or
hostile: a truncated PNG, a PNG whose header claims 50,000 x 50,000 pixels, garbage base64, a URL
to a loopback, private or link-local address (or another scheme), a zip file called `wav`, a
format field that is wrong or lies, a clip over `max_audio_seconds` (at 1 kHz, so it stays
small), a WAV header claiming hours over 0.1 s of samples (libsndfile reads what is there), or
more parts than
`configs.media_limits.MediaLimits` allows. The files are built here (PIL, the standard
library's `wave`, `zipfile`, `zlib`), once; PNG's chunk layout (length, type, data, CRC-32 of
type and data) is that of the PNG specification (W3C, 3rd edition, section 5.3).
"""

from __future__ import annotations

import base64
import io
import random
import struct
import wave
import zipfile
import zlib
from functools import lru_cache
from typing import Any

from PIL import Image

from configs.media_limits import MediaLimits
from load_tests.fuzz_bodies import Body, coin, pick

MEDIA_LIMITS = MediaLimits()
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
HUGE_SIDE = 50_000
PRIVATE_URLS = [
    "http://127.0.0.1/cat.png",
    "http://localhost:8000/health",
    "http://10.0.0.1/a.png",
    "http://192.168.1.1/a.png",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]/a.png",
    "http://0.0.0.0/a.png",
    "https://127.0.0.1:8443/a.jpg",
    "file:///etc/passwd",
    "ftp://10.0.0.1/a.png",
]
GARBAGE_BASE64 = ["", "not base64!!", "AAAA", "====", "QUJD=", "\u00e9\u00e9", "a" * 4001]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _image(fmt: str) -> bytes:
    """A 32 x 24 RGB gradient encoded as `fmt` (PNG or JPEG)."""
    img = Image.new("RGB", (32, 24))
    img.putdata([(x * 8, y * 10, (x + y) * 4) for y in range(24) for x in range(32)])
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _huge_header_png() -> bytes:
    """A well-formed PNG start whose IHDR claims `HUGE_SIDE`² RGB pixels, with one tiny IDAT:
    a decoder that trusts the header allocates 7.5 GB."""
    ihdr = struct.pack(">IIBBBBB", HUGE_SIDE, HUGE_SIDE, 8, 2, 0, 0, 0)
    return (
        PNG_SIGNATURE
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + _png_chunk(b"IEND", b"")
    )


def _wav(seconds: float, rate: int = 16_000, channels: int = 1) -> bytes:
    """A 16-bit PCM WAV of a 440 Hz square-ish tone."""
    frames = int(seconds * rate)
    samples = b"".join(
        struct.pack("<h", 8000 if (i * 440 // rate) % 2 else -8000) * channels
        for i in range(frames)
    )
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples)
    return buf.getvalue()


def _long_header_wav() -> bytes:
    """A short WAV whose RIFF and data sizes claim about 18 hours at 16 kHz mono."""
    data = bytearray(_wav(0.1))
    claimed = 2 * 16_000 * 3600 * 18
    data[4:8] = struct.pack("<I", claimed + 36)
    data[40:44] = struct.pack("<I", claimed)
    return bytes(data)


def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("speech.wav", _wav(0.1))
    return buf.getvalue()


@lru_cache(maxsize=1)
def samples() -> dict[str, bytes]:
    """The media files the mutator sends, by name (built once)."""
    png = _image("PNG")
    return {
        "png": png,
        "jpeg": _image("JPEG"),
        "truncated_png": png[: len(png) // 2],
        "huge_header_png": _huge_header_png(),
        "wav": _wav(0.5),
        "wav_8k_stereo": _wav(0.25, rate=8_000, channels=2),
        "truncated_wav": _wav(0.5)[:30],
        "long_header_wav": _long_header_wav(),
        "long_wav": _wav(MEDIA_LIMITS.max_audio_seconds + 1, rate=1_000),
        "zip": _zip(),
    }


def image_part(url: Any) -> dict[str, Any]:
    """An OpenAI `image_url` content part."""
    return {"type": "image_url", "image_url": {"url": url}}


def audio_part(data: Any, fmt: Any = "wav") -> dict[str, Any]:
    """An OpenAI `input_audio` content part."""
    return {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}


def _data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{_b64(data)}"


def _image_parts(rng: random.Random) -> list[dict[str, Any]]:
    s = samples()
    variant = rng.randint(0, 8)
    if variant == 0:
        return [image_part(_data_url("image/png", s["png"]))]
    if variant == 1:
        return [image_part(_data_url("image/jpeg", s["jpeg"]))]
    if variant == 2:
        return [image_part(_data_url("image/png", s["truncated_png"]))]
    if variant == 3:
        return [image_part(_data_url("image/png", s["huge_header_png"]))]
    if variant == 4:
        return [image_part("data:image/png;base64," + pick(rng, GARBAGE_BASE64))]
    if variant == 5:
        return [image_part(pick(rng, PRIVATE_URLS))]
    if variant == 6:  # a lying or missing media type, or a data URL without base64
        url = pick(
            rng,
            [
                _data_url("image/jpeg", s["png"]),
                _data_url("text/plain", s["png"]),
                _data_url("audio/wav", s["wav"]),
                "data:image/png," + _b64(s["png"]),
                "data:;base64," + _b64(s["png"]),
                _b64(s["png"]),
            ],
        )
        return [image_part(url)]
    if variant == 7:  # over the count limit
        url = _data_url("image/png", s["png"])
        return [image_part(url)] * (MEDIA_LIMITS.max_images + 1)
    part = image_part(_data_url("image/png", s["png"]))  # a malformed part around a valid URL
    shapes = [part["image_url"]["url"], {}, {"url": None}, [part["image_url"]]]
    part["image_url"] = pick(rng, shapes)
    if coin(rng):
        part["image_url"] = {"url": _data_url("image/png", s["png"]), "detail": "ultra"}
    return [part]


def _audio_parts(rng: random.Random) -> list[dict[str, Any]]:
    s = samples()
    variant = rng.randint(0, 7)
    if variant == 0:
        return [audio_part(_b64(s["wav"]))]
    if variant == 1:
        return [audio_part(_b64(s["wav_8k_stereo"]))]
    if variant == 2:
        return [audio_part(_b64(s["zip"]))]  # a zip called wav
    if variant == 3:
        fmt = pick(rng, ["ogg", "WAV", "", None, "mp4", 1, ["wav"]])
        return [audio_part(_b64(s["wav"]), fmt)]
    if variant == 4:  # the format field lies
        return [audio_part(_b64(s["wav"]), pick(rng, ["mp3", "flac"]))]
    if variant == 5:
        return [audio_part(pick(rng, [*GARBAGE_BASE64, _data_url("audio/wav", s["wav"])]))]
    if variant == 6:
        names = ["truncated_wav", "long_header_wav", "long_wav", "png"]
        return [audio_part(_b64(s[pick(rng, names)]))]
    return [audio_part(_b64(s["wav"]))] * (MEDIA_LIMITS.max_audios + 1)


def mutate_media_parts(rng: random.Random, body: Body, endpoint: str) -> Body:
    """The last turn becomes a user message with a text part and image and/or audio parts,
    valid or hostile (see the module docstring)."""
    which = rng.randint(0, 9)  # 0-4 images, 5-8 audio, 9 both (no served model reads both)
    parts = []
    if which in (0, 1, 2, 3, 4, 9):
        parts += _image_parts(rng)
    if which >= 5:
        parts += _audio_parts(rng)
    content = [{"type": "text", "text": "What is in this?"}, *parts]
    if coin(rng):
        rng.shuffle(content)
    messages = body.get("messages")
    turn = {"role": "user", "content": content}
    if isinstance(messages, list) and messages and coin(rng):
        body["messages"] = [*messages[:-1], turn]
    else:
        body["messages"] = [turn]
    return body
