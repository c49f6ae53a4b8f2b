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
`configs.media_limits.MediaLimits` allows. The files come from `fixtures.media_files`, built once.
"""

from __future__ import annotations

import random
import struct
from functools import lru_cache
from typing import Any

from configs.media_limits import MediaLimits
from fixtures.media_files import (
    audio_bytes,
    audio_part,
    b64,
    data_url,
    image_bytes,
    image_part,
    png_header,
    zip_bytes,
)
from load_tests.fuzz_bodies import Body, coin, pick

MEDIA_LIMITS = MediaLimits()
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


def _wav(seconds: float, rate: int = 16_000, channels: int = 1) -> bytes:
    return audio_bytes(seconds, rate, channels)


def _long_header_wav() -> bytes:
    """A short WAV whose RIFF and data sizes claim about 18 hours at 16 kHz mono."""
    data = bytearray(_wav(0.1))
    claimed = 2 * 16_000 * 3600 * 18
    data[4:8] = struct.pack("<I", claimed + 36)
    data[40:44] = struct.pack("<I", claimed)
    return bytes(data)


@lru_cache(maxsize=1)
def samples() -> dict[str, bytes]:
    """The media files the mutator sends, by name (built once)."""
    png = image_bytes(32, 24, "PNG")
    return {
        "png": png,
        "jpeg": image_bytes(32, 24, "JPEG"),
        "truncated_png": png[: len(png) // 2],
        "huge_header_png": png_header(HUGE_SIDE, HUGE_SIDE),
        "wav": _wav(0.5),
        "wav_8k_stereo": _wav(0.25, rate=8_000, channels=2),
        "truncated_wav": _wav(0.5)[:30],
        "long_header_wav": _long_header_wav(),
        "long_wav": _wav(MEDIA_LIMITS.max_audio_seconds + 1, rate=1_000),
        "zip": zip_bytes("speech.wav", _wav(0.1)),
    }


def _image_parts(rng: random.Random) -> list[dict[str, Any]]:
    s = samples()
    variant = rng.randint(0, 8)
    if variant == 0:
        return [image_part(data_url(s["png"], "image/png"))]
    if variant == 1:
        return [image_part(data_url(s["jpeg"], "image/jpeg"))]
    if variant == 2:
        return [image_part(data_url(s["truncated_png"], "image/png"))]
    if variant == 3:
        return [image_part(data_url(s["huge_header_png"], "image/png"))]
    if variant == 4:
        return [image_part("data:image/png;base64," + pick(rng, GARBAGE_BASE64))]
    if variant == 5:
        return [image_part(pick(rng, PRIVATE_URLS))]
    if variant == 6:  # a lying or missing media type, or a data URL without base64
        url = pick(
            rng,
            [
                data_url(s["png"], "image/jpeg"),
                data_url(s["png"], "text/plain"),
                data_url(s["wav"], "audio/wav"),
                "data:image/png," + b64(s["png"]),
                "data:;base64," + b64(s["png"]),
                b64(s["png"]),
            ],
        )
        return [image_part(url)]
    if variant == 7:  # over the count limit
        url = data_url(s["png"], "image/png")
        return [image_part(url)] * (MEDIA_LIMITS.max_images + 1)
    part = image_part(data_url(s["png"], "image/png"))  # a malformed part around a valid URL
    shapes = [part["image_url"]["url"], {}, {"url": None}, [part["image_url"]]]
    part["image_url"] = pick(rng, shapes)
    if coin(rng):
        part["image_url"] = {"url": data_url(s["png"], "image/png"), "detail": "ultra"}
    return [part]


def _audio_parts(rng: random.Random) -> list[dict[str, Any]]:
    s = samples()
    variant = rng.randint(0, 7)
    if variant == 0:
        return [audio_part(s["wav"])]
    if variant == 1:
        return [audio_part(s["wav_8k_stereo"])]
    if variant == 2:
        return [audio_part(s["zip"])]  # a zip called wav
    if variant == 3:
        fmt = pick(rng, ["ogg", "WAV", "", None, "mp4", 1, ["wav"]])
        return [audio_part(s["wav"], fmt)]
    if variant == 4:  # the format field lies
        return [audio_part(s["wav"], pick(rng, ["mp3", "flac"]))]
    if variant == 5:
        return [audio_part(pick(rng, [*GARBAGE_BASE64, data_url(s["wav"], "audio/wav")]))]
    if variant == 6:
        names = ["truncated_wav", "long_header_wav", "long_wav", "png"]
        return [audio_part(s[pick(rng, names)])]
    return [audio_part(s["wav"])] * (MEDIA_LIMITS.max_audios + 1)


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
