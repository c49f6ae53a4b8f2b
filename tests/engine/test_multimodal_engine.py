"""Images and audio through the engine: greedy output equals transformers' `generate` on the
same processor outputs (fp32, the tiny Qwen2.5-VL and Qwen2-Audio checkpoints of
`fixtures.tiny_multimodal`), in continuous batches mixed with text-only requests, prefilled in
chunks that never split an item, with prefix-cache hits that never cross different images, and
one encoder batch per step.

Near-ties are handled as in `test_greedy_equals_transformers`: a divergence is accepted only
where the reference's top-2 logits are within 1e-4.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from engine_helpers import assert_blocks_free, greedy, run_to_completion, step
from PIL import Image
from transformers import (
    AutoImageProcessor,
    AutoTokenizer,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2AudioForConditionalGeneration,
    Qwen2AudioProcessor,
    WhisperFeatureExtractor,
)

from configs.engine_config import EngineConfig
from configs.policy_config import CHECKPOINT_MODALITIES
from engine.fused_layers import RegistryLayerNorm, RegistryRMSNorm
from engine.llm_engine import LLMEngine
from engine.multimodal.encoder_attention import ENCODER_ATTENTION_NAME
from engine.multimodal.encoder_cache import EncoderCache
from engine.multimodal.families import FAMILIES
from engine.multimodal.inputs import MediaItem, config_modalities
from engine.step_input import StepInput
from fixtures.family_tokenizers import save_family_tokenizer
from fixtures.tiny_multimodal import make_tiny_multimodal_checkpoint, tiny_multimodal_config

IMAGE_PAD, VISION_START, VISION_END, AUDIO = 151655, 151652, 151653, 151646
MAX_TOKENS = 8

Prompt = tuple[list[int], tuple[MediaItem, ...], dict[str, torch.Tensor]]
"""Token ids, media items, and the same processor outputs as transformers' keyword args."""


def _checkpoint(family: str, root: Path) -> Path:
    path = make_tiny_multimodal_checkpoint(family, root / family, seed=3)
    save_family_tokenizer(family, path)
    return path


@pytest.fixture(scope="module")
def vl_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _checkpoint("qwen2_5_vl", tmp_path_factory.mktemp("mm"))


@pytest.fixture(scope="module")
def audio_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _checkpoint("qwen2_audio", tmp_path_factory.mktemp("mm"))


def _engine(path: Path, **overrides: Any) -> LLMEngine:
    fields: dict[str, Any] = {
        "dtype": "float32",
        "max_model_len": 512,
        "num_kv_blocks": 96,
        "block_size": 8,
    }
    fields.update(overrides)
    return LLMEngine(str(path), EngineConfig(**fields))


def _recorded_steps(engine: LLMEngine) -> list[StepInput]:
    """Every `StepInput` the engine executes from now on."""
    steps: list[StepInput] = []
    execute = engine.executor.execute

    def record(s: StepInput) -> Any:
        steps.append(s)
        return execute(s)

    engine.executor.execute = record  # type: ignore[method-assign]
    return steps


# ---- prompts, as the processors make them ------------------------------------------------


@cache
def _tokenizer(path: Path) -> Any:
    return AutoTokenizer.from_pretrained(path)


@cache
def _image_processor(path: Path) -> Any:
    return AutoImageProcessor.from_pretrained(path)


@cache
def _audio_processor(path: Path) -> Qwen2AudioProcessor:
    return Qwen2AudioProcessor(
        feature_extractor=WhisperFeatureExtractor.from_pretrained(path), tokenizer=_tokenizer(path)
    )


def _image(seed: int, height: int, width: int) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def image_prompt(path: Path, text: str, images: list[Image.Image]) -> Prompt:
    """`text` then each image as `<|vision_start|><|image_pad|> x n<|vision_end|>`, with
    `<|image_pad|>` expanded to the merged patches as `Qwen2_5_VLProcessor` does."""
    tok, processor = _tokenizer(path), _image_processor(path)
    ids: list[int] = tok.encode(text)
    items: list[MediaItem] = []
    for image in images:
        out = processor(images=[image], return_tensors="pt")
        n = int(out["image_grid_thw"].prod()) // processor.merge_size**2
        ids.append(VISION_START)
        data = {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}
        items.append(MediaItem("image", len(ids), n, data))
        ids += [IMAGE_PAD] * n + [VISION_END]
    ids += tok.encode(" What is in it?")
    hf = {
        "pixel_values": torch.cat([i.data["pixel_values"] for i in items]),
        "image_grid_thw": torch.cat([i.data["image_grid_thw"] for i in items]),
    }
    return ids, tuple(items), hf


def audio_prompt(path: Path, text: str, seed: int, seconds: float) -> Prompt:
    """One clip through `Qwen2AudioProcessor` (which expands `<|AUDIO|>` itself)."""
    processor = _audio_processor(path)
    clip = np.random.default_rng(seed).standard_normal(int(16000 * seconds)).astype(np.float32)
    out = processor(
        text=f"Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\n{text}",
        audio=[clip * 0.1],
        sampling_rate=16000,
        return_tensors="pt",
    )
    ids = out["input_ids"][0].tolist()
    offset, n = ids.index(AUDIO), ids.count(AUDIO)
    data = {
        "input_features": out["input_features"],
        "feature_attention_mask": out["feature_attention_mask"].long(),
    }
    return ids, (MediaItem("audio", offset, n, data),), dict(data)


# ---- transformers' reference -------------------------------------------------------------


def _hf_kwargs(
    model: torch.nn.Module, ids: list[int], hf: dict[str, torch.Tensor]
) -> dict[str, Any]:
    t = torch.tensor([ids])
    kwargs: dict[str, Any] = {"input_ids": t, "attention_mask": torch.ones_like(t), **hf}
    if isinstance(model, Qwen2_5_VLForConditionalGeneration) and hf:
        kwargs["mm_token_type_ids"] = (t == IMAGE_PAD).int()  # as Qwen2_5_VLProcessor returns
    return kwargs


def reference(model: torch.nn.Module, prompt: Prompt) -> list[int]:
    ids, _, hf = prompt
    out = model.generate(**_hf_kwargs(model, ids, hf), max_new_tokens=MAX_TOKENS, do_sample=False)
    return out[0, len(ids) :].tolist()


def assert_same_until_tie(ours: list[int], model: torch.nn.Module, prompt: Prompt) -> None:
    ids, _, hf = prompt
    ref = reference(model, prompt)
    for i, (a, b) in enumerate(zip(ours, ref, strict=True)):
        if a != b:
            with torch.no_grad():
                logits = model(**_hf_kwargs(model, ids + ref[:i], hf), use_cache=False).logits
            top2 = logits[0, -1].topk(2).values
            gap = float(top2[0] - top2[1])
            assert gap < 1e-4, f"token {i}: ours {a}, transformers {b} (top-2 gap {gap:.2e})"
            return
    assert len(ours) == len(ref) == MAX_TOKENS


def _hf(cls: type, path: Path) -> torch.nn.Module:
    return cls.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()


def assert_items_whole(steps: list[StepInput]) -> None:
    """No step's prefill chunk ends strictly inside an item."""
    for s in steps:
        for items, start, q in zip(s.media, s.starts, s.q_lens, strict=True):
            for item in items:
                assert not (start < item.offset < start + q < item.end), (start, q, item.offset)
                assert not (item.offset < start < item.end), (start, q, item.offset)


def _prefill_chunks(steps: list[StepInput], request_id: str) -> int:
    """Steps that prefilled part of the request's prompt."""
    return sum(
        1
        for s in steps
        for rid, start, plen in zip(s.request_ids, s.starts, s.prompt_lens, strict=True)
        if rid == request_id and start < plen
    )


# ---- tests -------------------------------------------------------------------------------


def test_image_prompts_in_a_mixed_chunked_batch_equal_generate(vl_path: Path) -> None:
    engine = _engine(vl_path, max_num_batched_tokens=16)
    steps = _recorded_steps(engine)
    media = engine.executor.runner.media  # type: ignore[attr-defined]
    small, other = _image(1, 56, 84), _image(2, 56, 84)  # 6 merged tokens each
    prompts = {
        "one": image_prompt(vl_path, "Describe the picture below in one long sentence.", [small]),
        "other": image_prompt(vl_path, "Describe the picture below in one long sentence.", [other]),
        "two": image_prompt(vl_path, "Compare", [_image(3, 112, 56), small]),
        "big": image_prompt(vl_path, "Look:", [_image(4, 112, 112)]),  # 16 tokens
    }
    text = _tokenizer(vl_path).encode("Write a poem about the sea and sky.")
    ours: dict[str, list[int]] = {}
    for name, (ids, items, _) in prompts.items():
        engine.add_request(name, ids, greedy(MAX_TOKENS), media=items)
        if name == "one":
            engine.add_request("text", text, greedy(MAX_TOKENS))
            step(engine, ours)  # the rest join a running batch
    run_to_completion(engine, ours)

    hf = _hf(Qwen2_5_VLForConditionalGeneration, vl_path)
    for name, prompt in prompts.items():
        assert_same_until_tie(ours[name], hf, prompt)
    assert_same_until_tie(ours["text"], hf, (text, (), {}))
    assert _prefill_chunks(steps, "big") >= 3
    assert_items_whole(steps)
    # one encoder batch per step that had items to encode, and a step with two or more items
    per_step = [sum(1 for items in s.media for _ in items) for s in steps]
    assert media.encoder_calls <= sum(1 for n in per_step if n)
    assert max(per_step) >= 2

    # the same image prompt again: prefix-cache hit, same tokens; same text, other image: none
    ids, items, _ = prompts["one"]
    engine.add_request("again", ids, greedy(MAX_TOKENS), media=items)
    cached = {}
    while engine.has_unfinished():
        for out in engine.step():
            ours.setdefault(out.request_id, []).extend(out.new_token_ids)
            cached[out.request_id] = out.num_cached_tokens
    assert cached["again"] > 0
    assert ours["again"] == ours["one"]
    assert ours["one"] != ours["other"]
    assert_blocks_free(engine)
    engine.shutdown()


def test_a_prefix_hit_that_ends_inside_an_image_recomputes_only_its_tail(vl_path: Path) -> None:
    """Full blocks are cached whatever they hold, so a repeated prompt that ends with its image
    hits blocks that end inside the image: the step starts mid-item, and the encoder output's
    tail fills its rows (what a served repeat of an image question does)."""
    engine = _engine(vl_path)
    ids, items, hf_inputs = image_prompt(vl_path, "Look:", [_image(3, 56, 84)])
    ids = ids[: items[0].end + 1]  # ... <|image_pad|> x n <|vision_end|>
    ours: dict[str, list[int]] = {}
    cached: dict[str, int] = {}
    for name in ("first", "again"):
        engine.add_request(name, ids, greedy(MAX_TOKENS), media=items)
        while engine.has_unfinished():
            for out in engine.step():
                ours.setdefault(out.request_id, []).extend(out.new_token_ids)
                cached[out.request_id] = out.num_cached_tokens
    assert items[0].offset < cached["again"] < items[0].end  # the hit ends inside the image
    assert ours["again"] == ours["first"]
    hf = _hf(Qwen2_5_VLForConditionalGeneration, vl_path)
    assert_same_until_tie(ours["first"], hf, (ids, items, hf_inputs))
    assert_blocks_free(engine)
    engine.shutdown()


def test_different_images_never_share_blocks(vl_path: Path) -> None:
    engine = _engine(vl_path, max_num_batched_tokens=64)
    text = "Describe the picture below in one long sentence, please, with care."
    first = image_prompt(vl_path, text, [_image(5, 56, 84)])
    second = image_prompt(vl_path, text, [_image(6, 56, 84)])
    assert first[0] == second[0], "same token ids, different images"
    engine.add_request("a", first[0], greedy(MAX_TOKENS), media=first[1])
    out = run_to_completion(engine)
    engine.add_request("b", second[0], greedy(MAX_TOKENS), media=second[1])
    cached: dict[str, int] = {}
    while engine.has_unfinished():
        for o in engine.step():
            out.setdefault(o.request_id, []).extend(o.new_token_ids)
            cached[o.request_id] = o.num_cached_tokens
    # blocks before the image are shared; none from the image's block on
    image_block = first[1][0].offset // 8
    assert 0 < cached["b"] <= image_block * 8
    hf = _hf(Qwen2_5_VLForConditionalGeneration, vl_path)
    assert_same_until_tie(out["a"], hf, first)
    assert_same_until_tie(out["b"], hf, second)
    engine.shutdown()


def test_audio_prompt_in_a_mixed_chunked_batch_equals_generate(audio_path: Path) -> None:
    engine = _engine(audio_path, max_num_batched_tokens=32, encoder_cache_items=4)
    steps = _recorded_steps(engine)
    long_text = "Transcribe the clip, then say in three long sentences what kind of sound it is."
    prompts = {
        "clip": audio_prompt(audio_path, long_text, seed=1, seconds=1.0),  # 25 audio tokens
        "short": audio_prompt(audio_path, "What is it?", seed=2, seconds=0.5),
    }
    text = _tokenizer(audio_path).encode("Say something about rivers.")
    ours: dict[str, list[int]] = {}
    engine.add_request("text", text, greedy(MAX_TOKENS))
    for name, (ids, items, _) in prompts.items():
        engine.add_request(name, ids, greedy(MAX_TOKENS), media=items)
        step(engine, ours)
    run_to_completion(engine, ours)
    assert _prefill_chunks(steps, "clip") >= 3
    assert_items_whole(steps)

    hf = _hf(Qwen2AudioForConditionalGeneration, audio_path)
    for name, prompt in prompts.items():
        assert_same_until_tie(ours[name], hf, prompt)
    assert_same_until_tie(ours["text"], hf, (text, (), {}))
    assert_blocks_free(engine)
    engine.shutdown()


def test_two_clips_in_one_step_run_one_encoder_batch(audio_path: Path) -> None:
    engine = _engine(audio_path, max_num_batched_tokens=256)
    media = engine.executor.runner.media  # type: ignore[attr-defined]
    one = audio_prompt(audio_path, "What is it?", seed=7, seconds=0.5)
    two = audio_prompt(audio_path, "And this?", seed=8, seconds=1.0)
    engine.add_request("one", one[0], greedy(2), media=one[1])
    engine.add_request("two", two[0], greedy(2), media=two[1])
    step(engine, {})
    assert media.encoder_calls == 1
    run_to_completion(engine)
    engine.shutdown()


@pytest.mark.parametrize(
    ("family", "encoder", "norm"),
    [("vl_path", "visual", RegistryRMSNorm), ("audio_path", "audio_tower", RegistryLayerNorm)],
)
def test_encoders_run_through_the_op_registry(
    family: str, encoder: str, norm: type, request: pytest.FixtureRequest
) -> None:
    """The towers' attention is the registry's `encoder_attention`, their norms its ops."""
    engine = _engine(request.getfixturevalue(family))
    model = engine.executor.runner.model  # type: ignore[attr-defined]
    tower = getattr(model.model, encoder)
    assert tower.config._attn_implementation == ENCODER_ATTENTION_NAME
    norms = [m for m in tower.modules() if isinstance(m, norm)]
    assert norms and not any(isinstance(m, torch.nn.LayerNorm) for m in tower.modules())
    engine.shutdown()


def test_multimodal_model_refuses_what_it_does_not_run(vl_path: Path) -> None:
    eager_off = EngineConfig(dtype="float32", enforce_eager=False, batch_invariant=False)
    with pytest.raises(ValueError, match=r"enforce_eager: false \(use true\)"):
        LLMEngine(str(vl_path), eager_off)
    with pytest.raises(ValueError, match=r"tensor_parallel_size > 1 \(use 1\)"):
        LLMEngine(str(vl_path), EngineConfig(dtype="float32"), tensor_parallel_size=2)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_takes_what_its_config_says(family: str) -> None:
    # the engine admits media by `config_modalities` (`CHECKPOINT_MODALITIES`); the runner
    # encodes by the family: the two cover the same model types
    assert set(FAMILIES) == set(CHECKPOINT_MODALITIES)
    expected = {CHECKPOINT_MODALITIES[family]}
    assert config_modalities(tiny_multimodal_config(family)) == expected


@pytest.mark.parametrize(("shared", "calls"), [(0, 2), (4, 1)])
def test_encoder_cache_across_requests(vl_path: Path, shared: int, calls: int) -> None:
    # the same image after different text: no prefix-cache hit reaches it, so it is encoded
    # again unless encoder_cache_items keeps its output across requests
    engine = _engine(vl_path, max_num_batched_tokens=64, encoder_cache_items=shared)
    media = engine.executor.runner.media  # type: ignore[attr-defined]
    image = _image(9, 56, 84)
    outs: dict[str, list[int]] = {}
    for rid, text in (("a", "First, look at this."), ("b", "Now tell me about this one.")):
        prompt = image_prompt(vl_path, text, [image])
        engine.add_request(rid, prompt[0], greedy(2), media=prompt[1])
        run_to_completion(engine, outs)
    assert media.encoder_calls == calls
    assert len(media.cache) == min(shared, 1)  # per-request entries went with the prefills
    engine.shutdown()


def test_encoder_cache_bounds_requests_and_drops_finished_prefills() -> None:
    cache = EncoderCache(shared_items=1, max_requests=2)
    rows = [torch.full((2, 4), float(i)) for i in range(3)]
    for i, rid in enumerate(("r0", "r1", "r2")):  # r0, never finished (aborted), is evicted
        cache.put(rid, bytes([i]), rows[i])
    assert cache.get("r0", bytes([0])) is None
    assert cache.get("r1", bytes([1])) is rows[1]
    cache.finish_prefill("r1")
    assert cache.get("r1", bytes([1])) is None
    assert cache.get("anyone", bytes([2])) is rows[2]  # the shared tier: the last one only
    assert len(cache) == 1  # r2's own entry and the shared one are the same output
