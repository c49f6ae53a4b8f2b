"""The fuzzer's image and audio parts: each hostile file is one that every model's replica
refuses (so the local verdict counts it invalid, with the replica's reason), each valid one is
read, and drawn chat examples carry both kinds."""

from __future__ import annotations

import base64
import random
from collections import Counter
from typing import Any

import numpy as np
import pytest

from fixtures.media_files import (
    audio_bytes,
    audio_part,
    data_url,
    flac_header,
    image_part,
    png_bytes,
    samples_bytes,
)
from load_tests.fuzz_checks import run_examples
from load_tests.fuzz_media_mutators import MEDIA_LIMITS, PRIVATE_URLS, mutate_media_parts, samples
from load_tests.fuzz_requests import FuzzExample, fuzz_examples, make_example

MODELS = ["vlm"]


def _b64(name: str) -> str:
    return base64.b64encode(samples()[name]).decode()


def _verdict(*parts: dict[str, Any]) -> tuple[bool, str]:
    content = [{"type": "text", "text": "What is this?"}, *parts]
    body = {"model": "vlm", "max_tokens": 2, "messages": [{"role": "user", "content": content}]}
    example = make_example("chat", body, MODELS)
    return example.expected_invalid, example.reason


@pytest.mark.parametrize(
    "part",
    [
        image_part(f"data:image/png;base64,{_b64('png')}"),
        image_part(f"data:image/jpeg;base64,{_b64('jpeg')}"),
        audio_part(_b64("wav")),
        audio_part(_b64("wav_8k_stereo")),
        image_part(f"DATA:IMAGE/PNG;BASE64,{base64.encodebytes(samples()['png']).decode()}"),
    ],
    ids=["png", "jpeg", "wav", "wav-8k-stereo", "upper-case-wrapped-data-url"],
)
def test_valid_media_is_counted_served(part: dict[str, Any]) -> None:
    assert _verdict(part) == (False, "")


@pytest.mark.parametrize(
    ("part", "says"),
    [
        (image_part(f"data:image/png;base64,{_b64('truncated_png')}"), "truncated"),
        (image_part(f"data:image/png;base64,{_b64('huge_header_png')}"), "2500000000 pixels"),
        (image_part("data:image/png;base64,not base64!!"), "not valid base64"),
        (image_part(PRIVATE_URLS[0]), "data URLs only"),
        (image_part("file:///etc/passwd"), "must be a data: or http(s): URL"),
        (audio_part(_b64("zip")), "not a readable wav file"),
        (audio_part(_b64("wav"), "mp3"), "format is 'mp3', but the data is WAV"),
        (audio_part(_b64("wav"), "ogg"), "input_audio.format"),
        (audio_part(_b64("long_wav")), "max_audio_seconds"),
        (audio_part("===="), "not valid base64"),
        (image_part(data_url(png_bytes(1, 201))), "200:1 for the aspect ratio"),
        (audio_part(audio_bytes(0.001, channels=1000)), "media.max_audio_channels"),
        (audio_part(flac_header(192_000, 8, 29), "flac"), "media.max_audio_samples"),
        (
            audio_part(samples_bytes(np.array([0.0, np.nan] * 800), subtype="FLOAT")),
            "non-finite",
        ),
    ],
    ids=[
        "truncated-png",
        "50000x50000-header",
        "garbage-base64",
        "loopback-url",
        "file-url",
        "zip-called-wav",
        "wav-called-mp3",
        "unknown-format",
        "31-second-clip",
        "audio-garbage",
        "1x201-image",
        "1000-channels",
        "flac-bomb-header",
        "nan-samples",
    ],
)
def test_hostile_media_is_counted_refused_with_the_replica_s_reason(
    part: dict[str, Any], says: str
) -> None:
    invalid, reason = _verdict(part)
    assert invalid and says in reason, reason


def test_counts_over_the_limits_and_mixed_modalities_are_refused() -> None:
    png = image_part(f"data:image/png;base64,{_b64('png')}")
    wav = audio_part(_b64("wav"))
    assert _verdict(*[png] * MEDIA_LIMITS.max_images) == (False, "")
    assert "max_images" in _verdict(*[png] * (MEDIA_LIMITS.max_images + 1))[1]
    assert "max_audios" in _verdict(*[wav] * (MEDIA_LIMITS.max_audios + 1))[1]
    assert "each served model reads one" in _verdict(png, wav)[1]


def test_the_mutator_makes_a_user_turn_of_text_and_media_parts() -> None:
    kinds: Counter[str] = Counter()
    for seed in range(60):
        body = mutate_media_parts(random.Random(seed), {"messages": [], "max_tokens": 2}, "chat")
        (turn,) = body["messages"]
        assert turn["role"] == "user"
        kinds.update(part["type"] for part in turn["content"])
    assert {"text", "image_url", "input_audio"} <= set(kinds)


def test_the_mutator_makes_served_and_refused_media() -> None:
    verdicts = set()
    for seed in range(100):
        body = {"model": "vlm", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}
        body = mutate_media_parts(random.Random(seed), body, "chat")
        verdicts.add(make_example("chat", body, MODELS).expected_invalid)
    assert verdicts == {True, False}


def test_drawn_chat_examples_carry_media() -> None:
    examples: list[FuzzExample] = []
    run_examples(fuzz_examples(MODELS, ("chat",)), examples.append, 150)
    assert any(e.family == "media_parts" for e in examples), "no media_parts example drawn"
