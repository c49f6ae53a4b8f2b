"""Decoding a request's images and audio within the model's `media` limits: every bad file is
a 4xx naming the content part and the limit, checked before decoding where the header tells."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from configs.media_limits import MediaLimits
from deployments.media.audio import decode_audio
from deployments.media.images import decode_image
from deployments.media.sources import decode_base64, read_image_url
from deployments.protocol.errors import OpenAIError
from fixtures.media_files import audio_bytes, b64, data_url, png_bytes, png_header

PART = "messages[0].content[1]"
LIMITS = MediaLimits()


def refused(fn: object, *args: object) -> OpenAIError:
    with pytest.raises(OpenAIError) as info:
        fn(*args)  # type: ignore[operator]
    return info.value


def test_png_data_url_decodes_to_rgb() -> None:
    raw = read_image_url(data_url(png_bytes(30, 20)), LIMITS, PART)
    image = decode_image(raw, LIMITS, PART)
    assert (image.mode, image.size) == ("RGB", (30, 20))


def test_truncated_png_is_a_400_naming_the_part() -> None:
    raw = png_bytes(64, 64)
    err = refused(decode_image, raw[: len(raw) // 2], LIMITS, PART)
    assert (err.status_code, err.param, err.code) == (400, PART, "invalid_media")
    assert PART in str(err)


def test_huge_png_header_is_refused_before_decoding() -> None:
    """50,000 x 50,000 RGB would be 7.5 GB: the header alone is read."""
    err = refused(decode_image, png_header(50_000, 50_000), LIMITS, PART)
    assert (err.status_code, err.code) == (400, "media_limit_exceeded")
    assert "media.max_image_pixels" in str(err)


def test_header_over_our_pixel_limit_is_refused_before_decoding() -> None:
    """5,000 x 5,000 is under PIL's own bomb limit, over the default `max_image_pixels`."""
    err = refused(decode_image, png_header(5_000, 5_000), LIMITS, PART)
    assert (err.status_code, err.code) == (400, "media_limit_exceeded")
    assert "5000x5000" in str(err)


def test_pixel_limit_names_the_size() -> None:
    err = refused(decode_image, png_bytes(40, 30), MediaLimits(max_image_pixels=1000), PART)
    assert "40x30" in str(err) and "media.max_image_pixels=1000" in str(err)


@pytest.mark.parametrize(
    "url",
    [
        "data:image/png,not-base64-flag",
        "data:text/plain;base64,aGVsbG8=",
        "data:image/png;base64,%%%notbase64",
        "ftp://example.com/a.png",
    ],
)
def test_bad_image_urls_are_400s(url: str) -> None:
    err = refused(read_image_url, url, LIMITS, PART)
    assert (err.status_code, err.param) == (400, PART)


def test_not_an_image_is_a_400() -> None:
    err = refused(decode_image, b"GIF89a but not really", LIMITS, PART)
    assert err.status_code == 400 and "image" in str(err)


def test_bytes_limit_is_a_413_before_decoding() -> None:
    limits = MediaLimits(max_item_bytes=100)
    err = refused(decode_base64, b64(b"x" * 1000), limits, PART)
    assert (err.status_code, err.code) == (413, "media_limit_exceeded")
    assert "media.max_item_bytes=100" in str(err)


def test_http_url_refused_when_urls_are_not_allowed() -> None:
    err = refused(read_image_url, "https://example.com/cat.png", LIMITS, PART)
    assert err.status_code == 400 and "media.allow_urls" in str(err)


def test_stereo_wav_is_downmixed_and_resampled() -> None:
    raw = audio_bytes(1.0, rate=8000, channels=2)
    wave = decode_audio(raw, "wav", 16000, LIMITS, PART)
    assert wave.dtype == np.float32 and wave.ndim == 1
    assert abs(len(wave) - 16000) <= 2
    assert 0.4 < float(np.abs(wave).max()) <= 0.51


@pytest.mark.parametrize("fmt", ["flac", "mp3"])
def test_flac_and_mp3_decode(fmt: str) -> None:
    wave = decode_audio(audio_bytes(0.5, fmt=fmt.upper()), fmt, 16000, LIMITS, PART)
    assert abs(len(wave) - 8000) < 2000  # MP3 adds encoder delay


def test_zip_called_wav_is_a_400() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("a.txt", "not audio" * 100)
    err = refused(decode_audio, out.getvalue(), "wav", 16000, LIMITS, PART)
    assert (err.status_code, err.param, err.code) == (400, PART, "invalid_media")


def test_format_must_match_the_container() -> None:
    err = refused(decode_audio, audio_bytes(0.2, fmt="FLAC"), "wav", 16000, LIMITS, PART)
    assert err.status_code == 400 and "'wav'" in str(err) and "FLAC" in str(err)


def test_audio_over_the_duration_limit_is_refused_from_the_header() -> None:
    raw = audio_bytes(3.0)
    err = refused(decode_audio, raw, "wav", 16000, MediaLimits(max_audio_seconds=2), PART)
    assert (err.status_code, err.code) == (400, "media_limit_exceeded")
    assert "3.0 s" in str(err) and "media.max_audio_seconds=2.0" in str(err)


def test_truncated_wav_is_a_400() -> None:
    raw = audio_bytes(1.0)
    err = refused(decode_audio, raw[:30], "wav", 16000, LIMITS, PART)
    assert err.status_code == 400
