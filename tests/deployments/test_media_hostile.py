"""Files a hostile or careless client sends: extreme aspect ratios, audio headers that claim
many channels, a high rate or a long decode, non-finite samples are 400s naming the part and
the limit, checked before decoding where the header tells; 16-bit and transparent images are
converted as transformers converts them; data URLs are read as leniently as their RFCs allow;
no message carries an object's repr."""

from __future__ import annotations

import base64
import re

import numpy as np
import pytest
import soundfile
from PIL import Image

from configs.media_limits import MediaLimits
from configs.request_limits import RequestLimits
from deployments.media.audio import MAX_SAMPLE_RATE, decode_audio
from deployments.media.errors import reason
from deployments.media.images import MAX_ASPECT_RATIO, decode_image, to_rgb
from deployments.media.sources import decode_base64, read_image_url
from fixtures.media_files import (
    audio_bytes,
    encode_image,
    flac_header,
    png_bytes,
    png_header,
    samples_bytes,
    zip_bytes,
)
from tests.deployments.test_media_decoding import LIMITS, PART, refused


def no_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if libsndfile is asked for the samples."""

    def read(*args: object, **kwargs: object) -> None:
        raise AssertionError("decoded, though the header alone refuses the file")

    monkeypatch.setattr(soundfile, "read", read)


# images: aspect ratio, 16-bit grayscale, transparency


@pytest.mark.parametrize("size", [(1, 201), (201, 1), (1, 10_000), (3, 700)])
def test_aspect_ratio_over_the_processor_s_is_a_400_from_the_header(
    size: tuple[int, int],
) -> None:
    """Qwen2-VL's `smart_resize` raises a ValueError (a 500) over 200:1; the header is enough."""
    err = refused(decode_image, png_header(*size), LIMITS, PART)
    assert (err.status_code, err.param, err.code) == (400, PART, "media_limit_exceeded")
    assert f"{size[0]}x{size[1]} pixels" in str(err) and f"{MAX_ASPECT_RATIO}:1" in str(err)


@pytest.mark.parametrize("size", [(1, 200), (200, 1), (28, 5600)])
def test_aspect_ratio_at_the_limit_decodes(size: tuple[int, int]) -> None:
    assert decode_image(png_bytes(*size), LIMITS, PART).size == size


def test_16_bit_grayscale_is_scaled_not_clipped() -> None:
    """A 16-bit PNG opens as `I;16`; `convert("RGB")` clips it to 255 (a white image): the top
    8 bits are kept."""
    levels = np.array([[0, 257 * 100, 40_000, 65_535]], dtype=np.uint16)
    rgb = decode_image(encode_image(Image.fromarray(levels)), LIMITS, PART)
    assert rgb.mode == "RGB"
    assert np.asarray(rgb)[0, :, 0].tolist() == [0, 100, 40_000 >> 8, 255]


def test_32_bit_integer_mode_is_read_as_16_bit() -> None:
    """Older Pillows open 16-bit PNGs as `I` (PIL cannot write that mode as PNG itself)."""
    image = Image.fromarray(np.array([[0, 40_000, 70_000]], dtype=np.int32))
    assert image.mode == "I"
    assert np.asarray(to_rgb(image))[0].tolist() == [[0, 0, 0], [156] * 3, [255] * 3]


def test_16_bit_grayscale_transparent_level_becomes_white() -> None:
    levels = np.array([[0, 30_000]], dtype=np.uint16)
    raw = encode_image(Image.fromarray(levels), transparency=0)
    rgb = decode_image(raw, LIMITS, PART)
    assert [rgb.getpixel((x, 0)) for x in range(2)] == [(255, 255, 255), (117, 117, 117)]


def palette_image() -> Image.Image:
    """4 x 4 of palette entry 1, (10, 20, 30), but the opaque black top-left pixel (entry 0)."""
    image = Image.new("P", (4, 4), 1)
    image.putpalette([0, 0, 0, 10, 20, 30])
    image.putpixel((0, 0), 0)
    return image


@pytest.mark.parametrize(
    ("image", "params", "fmt"),
    [
        (Image.new("RGBA", (4, 4), (10, 20, 30, 0)), {}, "PNG"),
        (Image.new("LA", (4, 4), (10, 0)), {}, "PNG"),
        (palette_image(), {"transparency": 1}, "PNG"),
        (palette_image(), {"transparency": 1}, "GIF"),
        (Image.new("L", (4, 4), 7), {"transparency": 7}, "PNG"),
    ],
    ids=["rgba", "la", "png-palette", "gif-palette", "gray-trns"],
)
def test_transparent_pixels_become_white(
    image: Image.Image, params: dict[str, int], fmt: str
) -> None:
    """As transformers' `convert_to_rgb` composites them (a plain convert keeps the colour)."""
    rgb = decode_image(encode_image(image, fmt, **params), LIMITS, PART)
    assert rgb.mode == "RGB" and rgb.getpixel((3, 3)) == (255, 255, 255)
    if image.mode == "P":
        assert rgb.getpixel((0, 0)) == (0, 0, 0)


def test_half_transparent_pixels_blend_over_white() -> None:
    raw = encode_image(Image.new("RGBA", (2, 2), (255, 0, 0, 128)))
    (r, g, b) = decode_image(raw, LIMITS, PART).getpixel((0, 0))  # type: ignore[misc]
    assert r == 255 and 126 <= g == b <= 128


# audio: channels, rate, decoded size, non-finite samples


def test_a_thousand_channels_is_a_400_from_the_header(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = audio_bytes(0.001, channels=1000)
    no_decoding(monkeypatch)
    err = refused(decode_audio, raw, "wav", 16000, LIMITS, PART)
    assert (err.status_code, err.code) == (400, "media_limit_exceeded")
    assert "1000 audio channels" in str(err) and "media.max_audio_channels=8" in str(err)


def test_flac_bomb_is_refused_from_the_header(monkeypatch: pytest.MonkeyPatch) -> None:
    """8 channels at 192 kHz for 29 s: under the duration limit, 178 MB once decoded (and
    libsndfile sizes its buffer from the header, whatever the file holds)."""
    raw = flac_header(192_000, 8, 29)
    assert len(raw) < 1000
    no_decoding(monkeypatch)
    err = refused(decode_audio, raw, "flac", 16000, LIMITS, PART)
    assert (err.status_code, err.code) == (400, "media_limit_exceeded")
    assert "44544000 audio samples" in str(err) and "media.max_audio_samples=5760000" in str(err)


def test_sample_rate_over_384_khz_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reported file: 8 channels at 655,350 Hz (FLAC's highest) for 29 s, 608 MB decoded."""
    raw = flac_header(655_350, 8, 29)
    no_decoding(monkeypatch)
    err = refused(decode_audio, raw, "flac", 16000, LIMITS, PART)
    assert err.status_code == 400 and f"over the limit of {MAX_SAMPLE_RATE} Hz" in str(err)


def test_sample_limit_counts_frames_times_channels() -> None:
    raw = audio_bytes(0.1, channels=2)  # 1600 frames x 2
    err = refused(decode_audio, raw, "wav", 16000, MediaLimits(max_audio_samples=3000), PART)
    assert "3200 audio samples" in str(err) and "media.max_audio_samples=3000" in str(err)
    assert len(decode_audio(raw, "wav", 16000, MediaLimits(max_audio_samples=3200), PART)) == 1600


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_samples_are_a_400(bad: float) -> None:
    wave = np.full(1600, 0.1, np.float32)
    wave[800] = bad
    raw = samples_bytes(wave, subtype="FLOAT")
    err = refused(decode_audio, raw, "wav", 16000, LIMITS, PART)
    assert (err.status_code, err.code) == (400, "invalid_media")
    assert "non-finite samples" in str(err)


def test_float_samples_past_one_are_finite_and_kept() -> None:
    raw = samples_bytes(np.full(1600, 1.5, np.float32), subtype="FLOAT")
    assert float(decode_audio(raw, "wav", 16000, LIMITS, PART).max()) == 1.5


# data URLs and base64


PNG = png_bytes(6, 4)


@pytest.mark.parametrize(
    "url",
    [
        "DATA:IMAGE/PNG;BASE64," + base64.b64encode(PNG).decode(),
        "Data:image/Png;charset=binary;Base64," + base64.b64encode(PNG).decode(),
        "data:image/png ; base64," + base64.b64encode(PNG).decode(),
        "data:image/png;base64," + base64.encodebytes(PNG).decode(),  # 76 columns
        "data:image/png;base64,\r\n " + base64.b64encode(PNG).decode().replace("A", "A\t", 3),
    ],
    ids=["upper-case", "mixed-case-with-parameter", "spaces", "76-columns", "crlf-and-tabs"],
)
def test_data_urls_read_as_their_rfcs_allow(url: str) -> None:
    assert read_image_url(url, LIMITS, PART) == PNG


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("data:image/png," + base64.b64encode(PNG).decode(), "must be base64"),
        ("DATA:TEXT/PLAIN;BASE64,aGVsbG8=", "'text/plain', not an image"),
        ("data:audio/wav;base64,aGVsbG8=", "not an image"),
        ("data:image/png;base64,aGVs\u00a0bG8=", "not valid base64"),  # no-break space
    ],
)
def test_other_data_urls_are_still_refused(url: str, says: str) -> None:
    err = refused(read_image_url, url, LIMITS, PART)
    assert err.status_code == 400 and says in str(err)


def test_wrapped_base64_audio_decodes() -> None:
    raw = audio_bytes(0.1)
    assert decode_base64(base64.encodebytes(raw).decode(), LIMITS, PART) == raw


def test_upper_case_http_scheme_is_a_url() -> None:
    err = refused(read_image_url, "HTTPS://example.com/cat.png", LIMITS, PART)
    assert "media.allow_urls" in str(err)


# messages and defaults


_REPR = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>|0x[0-9a-fA-F]{6,}")


@pytest.mark.parametrize(
    ("fn", "raw", "fmt"),
    [
        (decode_image, b"GIF89a but not really", None),
        (decode_image, b"\x89PNG\r\n\x1a\n" + b"\0" * 40, None),
        (decode_image, png_bytes(64, 64)[:80], None),
        (decode_image, zip_bytes("a.png", PNG), None),
        (decode_audio, zip_bytes("a.wav", b"RIFF"), "wav"),
        (decode_audio, audio_bytes(1.0)[:30], "wav"),
        (decode_audio, b"RIFF" + b"\0" * 40, "wav"),
        (decode_audio, audio_bytes(0.5, fmt="FLAC")[:200], "flac"),
        (decode_audio, b"ID3" + b"\0" * 50, "mp3"),
    ],
)
def test_no_message_carries_an_object_repr(fn: object, raw: bytes, fmt: str | None) -> None:
    args = (raw, LIMITS, PART) if fmt is None else (raw, fmt, 16000, LIMITS, PART)
    err = refused(fn, *args)
    assert not _REPR.search(str(err)) and str(err).startswith(PART), str(err)


def test_reason_replaces_object_reprs() -> None:
    exc = OSError("cannot identify image file <_io.BytesIO object at 0x7f3a2b1c9d00>")
    assert reason(exc) == "cannot identify image file"
    assert reason(RuntimeError("Error opening <_io.BytesIO object at 0x7f01>: bad")) == (
        "Error opening: bad"
    )
    assert reason(ValueError()) == "ValueError"


def test_default_item_bytes_fit_under_the_router_s_body_limit() -> None:
    """An inline file arrives as base64 in the JSON body: 4/3 of its size, under the body
    limit, so a larger `max_item_bytes` could never be reached."""
    assert MediaLimits().max_item_bytes * 4 / 3 <= RequestLimits().max_body_bytes
