"""The chat prompt of a request with images or audio on the tiny Qwen2.5-VL and Qwen2-Audio
checkpoints' real tokenizers, templates and processors: placeholders expanded as the HF
processors expand them, one `MediaItem` per part at its offset, the expanded length counted by
the context check and truncation, and each wrong request a 400 naming what is wrong."""

from __future__ import annotations

import asyncio
import functools
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
import torch
from scripted_client import Script, ScriptedClient
from transformers import Qwen2AudioProcessor

from configs.media_limits import MediaLimits
from configs.preprocessing import Truncation
from deployments.handlers.chat import ChatHandler, ChatSettings, Rendered
from deployments.handlers.preparation import Preparer
from deployments.media.loader import MediaLoader, load_media_loader
from deployments.prompting.chat_template import ChatTemplate
from deployments.prompting.structured_output import GrammarFactory
from deployments.prompting.tokenizer import load_tokenizer
from deployments.protocol.errors import OpenAIError
from deployments.protocol.preprocess_plan import PreprocessPlan
from deployments.protocol.requests import ChatCompletionRequest
from fixtures.family_tokenizers import save_family_tokenizer
from fixtures.media_files import (
    audio_bytes,
    audio_part,
    data_url,
    image_part,
    png_bytes,
    samples_bytes,
)
from fixtures.tiny_multimodal import save_tiny_preprocessor, tiny_multimodal_config

IMAGE_PAD, AUDIO_PAD = 151655, 151646


def tiny_replica_dir(root: Path, family: str) -> tuple[str, Any]:
    """Config, preprocessor and tokenizer of a tiny family (the replica reads no weights), and
    the tokenizer loaded as the replica loads it."""
    tiny_multimodal_config(family).save_pretrained(root)
    save_tiny_preprocessor(family, root)
    save_family_tokenizer(family, root)
    return str(root), load_tokenizer(str(root))


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any]:
    return tiny_replica_dir(tmp_path_factory.mktemp("qwen2_5_vl"), "qwen2_5_vl")


@pytest.fixture(scope="module")
def audio_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any]:
    return tiny_replica_dir(tmp_path_factory.mktemp("qwen2_audio"), "qwen2_audio")


@functools.cache
def grammars(tokenizer: Any) -> GrammarFactory:
    """One grammar factory per tokenizer (building one reads the whole vocabulary)."""
    return GrammarFactory(tokenizer, len(tokenizer))


def make_handler(
    checkpoint: tuple[str, Any], family: str, max_model_len: int = 4096, **limits: Any
) -> ChatHandler:
    """A chat handler for a tiny multimodal family over an engine client that records media."""
    path, tokenizer = checkpoint
    takes = ["text", "image" if family == "qwen2_5_vl" else "audio"]
    loader = load_media_loader(path, tokenizer, MediaLimits(**limits), family, takes)
    return ChatHandler(
        ScriptedClient(tokenizer, max_model_len=max_model_len),
        tokenizer,
        ChatTemplate(tokenizer, None, family),
        grammars(tokenizer),
        ChatSettings(family, None),
        Preparer(timeout_s=30),
        loader,
    )


@pytest.fixture(scope="module")
def vlm(vlm_dir: tuple[str, Any]) -> ChatHandler:
    return make_handler(vlm_dir, "qwen2_5_vl")


@pytest.fixture(scope="module")
def audio_lm(audio_dir: tuple[str, Any]) -> ChatHandler:
    return make_handler(audio_dir, "qwen2_audio")


def user(*parts: Any) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "text", "text": p} if isinstance(p, str) else p for p in parts],
    }


def render(
    handler: ChatHandler, *messages: dict[str, Any], plan: PreprocessPlan | None = None
) -> Rendered:
    return handler.render(ChatCompletionRequest(messages=list(messages)), plan)


def refused(handler: ChatHandler, *messages: dict[str, Any]) -> OpenAIError:
    with pytest.raises(OpenAIError) as info:
        render(handler, *messages)
    return info.value


def test_media_loader_only_for_multimodal_checkpoints(
    vlm_dir: tuple[str, Any], smollm2_path: str, tokenizer: Any
) -> None:
    assert load_media_loader(smollm2_path, tokenizer, MediaLimits(), "smollm2") is None
    loader = load_media_loader(vlm_dir[0], vlm_dir[1], MediaLimits(), "vlm", ["text", "image"])
    assert isinstance(loader, MediaLoader) and loader.modalities == {"image"}


@pytest.mark.parametrize("declared", [["text"], ["text", "image", "audio"], ["text", "audio"]])
def test_input_modalities_must_match_the_checkpoint(
    vlm_dir: tuple[str, Any], declared: list[str]
) -> None:
    """The router routes by `input_modalities`: one the checkpoint lacks would fail every
    request sent for it, and one left out would never be sent; the replica refuses to start."""
    with pytest.raises(ValueError, match=r"input_modalities .* set input_modalities: \['image'"):
        load_media_loader(vlm_dir[0], vlm_dir[1], MediaLimits(), "vlm", declared)


def test_a_text_model_declaring_images_is_refused(smollm2_path: str, tokenizer: Any) -> None:
    with pytest.raises(ValueError, match=r"takes \['text'\]"):
        load_media_loader(smollm2_path, tokenizer, MediaLimits(), "smollm2", ["text", "image"])


def test_images_expand_as_the_qwen2_5_vl_processor_does(vlm: ChatHandler) -> None:
    """Two images of different sizes: each `<|image_pad|>` becomes grid.prod() / merge² pads
    (Qwen2_5_VLProcessor.__call__), and each item's tensors are its own."""
    big, small = png_bytes(200, 120), png_bytes(56, 56)
    out = render(
        vlm, user("compare ", image_part(data_url(big)), " and ", image_part(data_url(small)))
    )
    assert out.text.count("<|vision_start|><|image_pad|><|vision_end|>") == 2
    lengths = [int(m.data["image_grid_thw"].prod()) // 4 for m in out.media]
    assert [m.length for m in out.media] == lengths and lengths[0] > lengths[1] == 4
    expanded = out.text.replace("<|image_pad|>", "<|IMG|>")
    for n in lengths:
        expanded = expanded.replace("<|IMG|>", "<|image_pad|>" * n, 1)
    assert out.prompt == vlm.tokenizer.encode(expanded, add_special_tokens=False)
    for item in out.media:
        assert item.modality == "image" and out.prompt[item.offset - 1] == 151652  # vision start
        assert set(out.prompt[item.offset : item.end]) == {IMAGE_PAD}
        assert item.data["pixel_values"].shape == (item.length * 4, 1176)
    assert out.media[0].content_hash != out.media[1].content_hash


def test_audio_expands_as_qwen2_audio_processor_does(audio_lm: ChatHandler) -> None:
    """The whole prompt equals Qwen2AudioProcessor's own expansion of the rendered text."""
    clips = [audio_bytes(2.0), audio_bytes(1.0, rate=8000, channels=2)]
    out = render(audio_lm, user(audio_part(clips[0]), "and", audio_part(clips[1]), "what is it?"))
    loader = audio_lm.media
    assert loader is not None
    waves = [soundfile.read(io.BytesIO(clips[0]), dtype="float32")[0]]  # 16 kHz mono already
    processor: Qwen2AudioProcessor = loader.processing.processor  # type: ignore[union-attr]
    first = processor(text="<|AUDIO|>", audio=waves, sampling_rate=16000, return_tensors="pt")
    assert out.media[0].length == int((first["input_ids"] == AUDIO_PAD).sum())
    assert torch.equal(out.media[0].data["input_features"], first["input_features"])
    full = processor(
        text=out.text,
        audio=[np.zeros(32000, np.float32), np.zeros(16000, np.float32)],
        sampling_rate=16000,
    )
    assert out.prompt == list(full["input_ids"][0])
    for item in out.media:
        assert item.data["input_features"].shape == (1, 128, 3000)
        assert item.data["feature_attention_mask"].dtype == torch.int64
        assert set(out.prompt[item.offset : item.end]) == {AUDIO_PAD}


def test_text_only_request_on_a_vlm_has_no_media(vlm: ChatHandler) -> None:
    out = render(vlm, {"role": "user", "content": "hello"})
    assert out.media == () and IMAGE_PAD not in out.prompt


def test_a_modality_the_model_lacks_is_a_400_naming_it(vlm: ChatHandler) -> None:
    err = refused(vlm, user("hear this", audio_part(audio_bytes(0.5))))
    assert (err.status_code, err.param, err.code) == (
        400,
        "messages[0].content[1]",
        "unsupported_modality",
    )
    assert "audio" in str(err)


def test_a_text_model_refuses_media_parts(tokenizer: Any) -> None:
    handler = ChatHandler(
        ScriptedClient(tokenizer),
        tokenizer,
        ChatTemplate(tokenizer, None, "llama"),
        GrammarFactory(tokenizer, len(tokenizer)),
        ChatSettings("smollm2", None),
        Preparer(timeout_s=30),
    )
    err = refused(handler, user("look", image_part(data_url(png_bytes(8, 8)))))
    assert (err.status_code, err.param) == (400, "messages[0].content")
    assert "'image_url'" in str(err)


def test_count_limit_is_a_400_naming_it(vlm_dir: tuple[str, Any]) -> None:
    handler = make_handler(vlm_dir, "qwen2_5_vl", max_images=1)
    url = data_url(png_bytes(28, 28))
    err = refused(handler, user(image_part(url), image_part(url)))
    assert err.status_code == 400 and "media.max_images=1" in str(err)


def test_a_broken_image_names_its_part(vlm: ChatHandler) -> None:
    raw = png_bytes(64, 64)
    err = refused(
        vlm, {"role": "user", "content": "hi"}, user("see", image_part(data_url(raw[:100])))
    )
    assert (err.status_code, err.param) == (400, "messages[1].content[1]")


def test_media_outside_user_messages_is_refused(vlm: ChatHandler) -> None:
    msg = {"role": "assistant", "content": [image_part(data_url(png_bytes(28, 28)))]}
    err = refused(vlm, {"role": "user", "content": "hi"}, msg)
    assert err.param == "messages[1].content[0]" and "user messages" in str(err)


def test_placeholder_tokens_in_text_are_refused(vlm: ChatHandler) -> None:
    err = refused(vlm, {"role": "user", "content": "<|vision_start|><|image_pad|><|vision_end|>"})
    assert err.status_code == 400 and "placeholder" in str(err)


def test_context_check_counts_the_expanded_tokens(vlm_dir: tuple[str, Any]) -> None:
    handler = make_handler(vlm_dir, "qwen2_5_vl", max_model_len=60)
    req = ChatCompletionRequest(messages=[user("see", image_part(data_url(png_bytes(224, 224))))])
    with pytest.raises(OpenAIError) as info:
        asyncio.run(handler.complete(req))
    assert info.value.code == "context_length_exceeded" and "has 8" in str(info.value)


def test_truncation_drops_old_turns_with_their_images(vlm: ChatHandler) -> None:
    """The dropped turn's image goes with it; the kept one's item points into the kept prompt."""
    old, new = png_bytes(224, 224), png_bytes(56, 56)
    history = [
        user("first", image_part(data_url(old))),
        {"role": "assistant", "content": "a square"},
        user("second", image_part(data_url(new))),
    ]
    full = render(vlm, *history)
    plan = PreprocessPlan(truncation=Truncation(max_prompt_tokens=len(full.prompt) - 10))
    cut = render(vlm, *history, plan=plan)
    assert len(full.media) == 2 and len(cut.media) == 1
    assert cut.media[0].content_hash == full.media[1].content_hash
    assert set(cut.prompt[cut.media[0].offset : cut.media[0].end]) == {IMAGE_PAD}
    assert len(cut.prompt) == len(full.prompt) - (full.media[1].offset - cut.media[0].offset)


def test_completion_queues_the_media_and_counts_expanded_prompt_tokens(
    vlm_dir: tuple[str, Any],
) -> None:
    """Both choices of `n=2` get the image; usage counts the expanded prompt."""
    handler = make_handler(vlm_dir, "qwen2_5_vl")
    client = handler.engine
    assert isinstance(client, ScriptedClient)
    client.scripts = [Script("a red square")]
    req = ChatCompletionRequest(
        messages=[user("what is this?", image_part(data_url(png_bytes(112, 84))))], n=2
    )
    response = asyncio.run(handler.complete(req))
    rendered = render(handler, *[m.model_dump(exclude_none=True) for m in req.messages])
    assert response.choices[0].message.content == "a red square"
    assert response.usage.prompt_tokens == len(rendered.prompt)
    media = [added.media for added in client.added]
    assert [len(m) for m in media] == [1, 1]
    assert media[0][0].content_hash == rendered.media[0].content_hash
    assert media[0][0].offset == rendered.media[0].offset


def test_a_decode_past_its_time_limit_is_a_400(vlm_dir: tuple[str, Any]) -> None:
    """Decoding and resizing a 1500 x 1500 PNG takes far more than 1 ms."""
    handler = make_handler(vlm_dir, "qwen2_5_vl", decode_timeout_s=0.001)
    err = refused(handler, user(image_part(data_url(png_bytes(1500, 1500)))))
    assert (err.status_code, err.code) == (400, "media_decode_timeout")
    assert "media.decode_timeout_s" in str(err)


@pytest.mark.parametrize("size", [(1, 201), (10_000, 1)])
def test_an_extreme_aspect_ratio_is_a_400_on_the_render_path(
    vlm: ChatHandler, size: tuple[int, int]
) -> None:
    """`render` is also `/tokenize`'s path; the processor's own ValueError would be a 500."""
    err = refused(vlm, user("see", image_part(data_url(png_bytes(*size)))))
    assert (err.status_code, err.param) == (400, "messages[0].content[1]")
    assert "200:1 for the aspect ratio" in str(err)


def test_the_image_processor_s_value_error_is_a_400(
    vlm: ChatHandler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backstop: a rule of the processor's that the header check misses names the part."""
    monkeypatch.setattr("deployments.media.images.MAX_ASPECT_RATIO", 1000)
    err = refused(vlm, user("see", image_part(data_url(png_bytes(1, 201)))))
    assert (err.status_code, err.param) == (400, "messages[0].content[1]")
    assert "image processor refused it: absolute aspect ratio must be smaller than 200" in str(err)


def test_min_samples_follows_the_processor_s_length_rule(audio_lm: ChatHandler) -> None:
    """`AudioProcessing.min_samples` (321 at 16 kHz) is where Qwen2AudioProcessor's expansion
    first gives a token."""
    processing = audio_lm.media.processing  # type: ignore[union-attr]
    assert processing.min_samples == 321
    waves = [np.zeros(n, np.float32) for n in (320, 321)]
    out = processing.processor(text=["<|AUDIO|>"] * 2, audio=waves, sampling_rate=16000)
    assert [row.count(AUDIO_PAD) for row in out["input_ids"]] == [0, 1]


def test_a_clip_too_short_for_one_audio_token_is_a_400(audio_lm: ChatHandler) -> None:
    short = samples_bytes(np.full(320, 0.1, np.float32))
    err = refused(audio_lm, user(audio_part(short), "what is it?"))
    assert (err.status_code, err.param) == (400, "messages[0].content[0]")
    assert "the clip is 20.0 ms; at least 20.1 ms" in str(err)
    out = render(audio_lm, user(audio_part(samples_bytes(np.full(321, 0.1, np.float32)))))
    assert [item.length for item in out.media] == [1]


def test_an_item_the_processor_gives_no_tokens_is_a_400(
    audio_lm: ChatHandler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backstop behind `min_samples`: the engine refuses an item of no tokens (a 500)."""
    monkeypatch.setattr(audio_lm.media.processing, "min_samples", 1)  # type: ignore[union-attr]
    err = refused(audio_lm, user(audio_part(samples_bytes(np.full(100, 0.1, np.float32)))))
    assert err.status_code == 400 and "the clip is 6.2 ms" in str(err)
