"""Audio files -> mono float32 waveforms at the feature extractor's rate: `soundfile`
(libsndfile) reads WAV, FLAC and MP3; the duration, channels, sample rate and decoded size are
checked from the header before the samples are decoded (a 165 KB FLAC may claim 8 channels at
655 kHz: 600 MB decoded), then again on the samples, which must be finite; channels are
averaged, and `soxr` resamples."""

from __future__ import annotations

import io

import numpy as np
import soundfile
import soxr

from configs.media_limits import MediaLimits
from deployments.media.errors import bad_media, over_limit, reason

CONTAINERS: dict[str, frozenset[str]] = {
    "wav": frozenset({"WAV", "WAVEX", "RF64"}),
    "mp3": frozenset({"MP3"}),
    "flac": frozenset({"FLAC"}),
}
"""`input_audio.format` -> the libsndfile major formats (`soundfile.info(...).format`) a file
of that name may be."""

_SLACK = 1.01
"""Decoded length allowed past the header's duration (MP3 headers estimate it)."""

MAX_SAMPLE_RATE = 384_000
"""The highest sample rate read, Hz (the highest rate audio interfaces record at)."""


def decode_audio(
    raw: bytes, fmt: str, sampling_rate: int, limits: MediaLimits, param: str
) -> np.ndarray:
    """Decode an audio file to a mono waveform.

    Args:
        raw: the file's bytes.
        fmt: the part's `input_audio.format` (`wav`, `mp3`, `flac`).
        sampling_rate: the rate to resample to, Hz (the feature extractor's).
        limits: durations, channels and sizes, checked from the header, then on the samples.
        param: the content part, for errors.

    Returns:
        float32 samples (in [-1, 1] from an integer file), shape `[samples]`, at
        `sampling_rate`.

    Raises:
        OpenAIError: 400 for a file that libsndfile cannot read, whose container is not
            `fmt`, with no samples, with a sample that is NaN or infinite, over
            `max_audio_seconds`, `max_audio_channels`, `max_audio_samples` or
            `MAX_SAMPLE_RATE`.
    """
    try:
        info = soundfile.info(io.BytesIO(raw))
    except (RuntimeError, TypeError, ValueError) as exc:  # LibsndfileError is a RuntimeError
        raise bad_media(param, f"not a readable {fmt} file: {reason(exc)}") from None
    if info.format not in CONTAINERS[fmt]:
        raise bad_media(param, f"input_audio.format is {fmt!r}, but the data is {info.format}")
    if info.samplerate <= 0 or info.frames <= 0 or info.channels <= 0:
        raise bad_media(param, "the audio has no samples")
    _check_size(info.frames, info.channels, info.samplerate, limits, param)
    try:
        samples, rate = soundfile.read(io.BytesIO(raw), dtype="float32", always_2d=True)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise bad_media(param, f"the audio data is damaged or truncated: {reason(exc)}") from None
    if len(samples) == 0:
        raise bad_media(param, "the audio has no samples")
    if len(samples) / rate > limits.max_audio_seconds * _SLACK:
        raise _too_long(param, len(samples) / rate, limits)
    if samples.size > limits.max_audio_samples * _SLACK:
        raise _too_many(param, samples.size, limits)
    if not np.isfinite(samples).all():
        raise bad_media(param, "the audio has non-finite samples (NaN or infinity)")
    mono = samples.mean(axis=1)
    if rate != sampling_rate:
        mono = soxr.resample(mono, rate, sampling_rate)
    return np.asarray(mono, dtype=np.float32)


def _check_size(frames: int, channels: int, rate: int, limits: MediaLimits, param: str) -> None:
    """The header's figures against the limits, before anything is decoded."""
    if channels > limits.max_audio_channels:
        raise over_limit(
            param,
            f"{channels} audio channels",
            f"media.max_audio_channels={limits.max_audio_channels}",
        )
    if rate > MAX_SAMPLE_RATE:
        raise over_limit(param, f"a sample rate of {rate} Hz", f"{MAX_SAMPLE_RATE} Hz")
    if frames / rate > limits.max_audio_seconds:
        raise _too_long(param, frames / rate, limits)
    if frames * channels > limits.max_audio_samples:
        raise _too_many(param, frames * channels, limits)


def _too_long(param: str, seconds: float, limits: MediaLimits) -> Exception:
    return over_limit(
        param,
        f"{seconds:.1f} s of audio",
        f"media.max_audio_seconds={limits.max_audio_seconds}",
    )


def _too_many(param: str, samples: int, limits: MediaLimits) -> Exception:
    return over_limit(
        param,
        f"{samples} audio samples (frames x channels)",
        f"media.max_audio_samples={limits.max_audio_samples}",
    )
