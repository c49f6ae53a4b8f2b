"""Audio files -> mono float32 waveforms at the feature extractor's rate: `soundfile`
(libsndfile) reads WAV, FLAC and MP3, the duration is checked from the header before the
samples are decoded, channels are averaged, and `soxr` resamples."""

from __future__ import annotations

import io

import numpy as np
import soundfile
import soxr

from configs.media_limits import MediaLimits
from deployments.media.errors import bad_media, over_limit

CONTAINERS: dict[str, frozenset[str]] = {
    "wav": frozenset({"WAV", "WAVEX", "RF64"}),
    "mp3": frozenset({"MP3"}),
    "flac": frozenset({"FLAC"}),
}
"""`input_audio.format` -> the libsndfile major formats (`soundfile.info(...).format`) a file
of that name may be."""

_SLACK = 1.01
"""Decoded length allowed past the header's duration (MP3 headers estimate it)."""


def decode_audio(
    raw: bytes, fmt: str, sampling_rate: int, limits: MediaLimits, param: str
) -> np.ndarray:
    """Decode an audio file to a mono waveform.

    Args:
        raw: the file's bytes.
        fmt: the part's `input_audio.format` (`wav`, `mp3`, `flac`).
        sampling_rate: the rate to resample to, Hz (the feature extractor's).
        limits: `max_audio_seconds` is checked from the header, then on the samples.
        param: the content part, for errors.

    Returns:
        float32 samples in [-1, 1], shape `[samples]`, at `sampling_rate`.

    Raises:
        OpenAIError: 400 for a file that libsndfile cannot read, whose container is not
            `fmt`, with no samples, or longer than `max_audio_seconds`.
    """
    try:
        info = soundfile.info(io.BytesIO(raw))
    except (RuntimeError, TypeError, ValueError) as exc:  # LibsndfileError is a RuntimeError
        reason = getattr(exc, "error_string", None) or str(exc)  # without the BytesIO's repr
        raise bad_media(param, f"not a readable {fmt} file: {reason}") from None
    if info.format not in CONTAINERS[fmt]:
        raise bad_media(param, f"input_audio.format is {fmt!r}, but the data is {info.format}")
    if info.samplerate <= 0 or info.frames <= 0:
        raise bad_media(param, "the audio has no samples")
    seconds = info.frames / info.samplerate
    if seconds > limits.max_audio_seconds:
        raise _too_long(param, seconds, limits)
    try:
        samples, rate = soundfile.read(io.BytesIO(raw), dtype="float32", always_2d=True)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise bad_media(param, f"the audio data is damaged or truncated: {exc}") from None
    if len(samples) == 0:
        raise bad_media(param, "the audio has no samples")
    if len(samples) / rate > limits.max_audio_seconds * _SLACK:
        raise _too_long(param, len(samples) / rate, limits)
    mono = samples.mean(axis=1)
    if rate != sampling_rate:
        mono = soxr.resample(mono, rate, sampling_rate)
    return np.asarray(mono, dtype=np.float32)


def _too_long(param: str, seconds: float, limits: MediaLimits) -> Exception:
    return over_limit(
        param,
        f"{seconds:.1f} s of audio",
        f"media.max_audio_seconds={limits.max_audio_seconds}",
    )
