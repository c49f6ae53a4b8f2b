"""Routing by modality: `input_modalities`, the `has_image` / `has_audio` features and rules,
the 400 for a modality no candidate takes, and the shipped `configs/multimodal.yaml`.

Pure functions on requests parsed as the router parses them; no Ray, no HTTP.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from configs.model_config import RouterAppConfig
from configs.policy_config import ModelCapabilities, PolicyConfig
from configs.policy_validation import check_policy
from deployments.protocol.requests import ChatCompletionRequest, CompletionRequest
from deployments.protocol.validation import parse_request
from router.dispatch import MODEL_HEADER, REASON_HEADER, RULE_HEADER, Routed
from router.http_errors import policy_error
from router.policy import NoModelCanServe, RequestFeatures, decide, extract_features

SHIPPED = Path(__file__).resolve().parents[2] / "configs" / "multimodal.yaml"

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
AUDIO = {
    "type": "input_audio",
    "input_audio": {"data": base64.b64encode(b"RIFF").decode(), "format": "wav"},
}
TEXT = {"type": "text", "text": "What is in this?"}


def caps(*modalities: str, context: int = 4096) -> ModelCapabilities:
    return ModelCapabilities(
        context_length=context,
        supports_tools=False,
        supports_structured_output=True,
        input_modalities=["text", *modalities],
    )


MODELS = {"text": caps(), "vl": caps("image"), "audio": caps("audio")}
AUDIO_RULE = {"name": "audio", "when": {"has_audio": True}, "targets": ["audio"]}
IMAGE_RULE = {"name": "image", "when": {"has_image": True, "model": ["auto"]}, "targets": ["vl"]}


def make_policy(rules: list[dict[str, Any]], models: dict[str, ModelCapabilities]) -> PolicyConfig:
    """Alias `auto`: every model; alias `chat`: the text model and the VLM, when served."""
    chat_models = [m for m in ("text", "vl") if m in models]
    raw = {"aliases": {"auto": list(models), "chat": chat_models}, "rules": rules}
    return PolicyConfig.model_validate(raw | {"default_targets": ["text"]})


POLICY = make_policy([AUDIO_RULE, IMAGE_RULE], MODELS)


def chat(*contents: Any, **body: Any) -> ChatCompletionRequest:
    """A chat request with one user message per content, parsed as the router parses it."""
    messages = [{"role": "user", "content": content} for content in contents]
    raw = {"model": "auto", "messages": messages, **body}
    request = parse_request(ChatCompletionRequest, raw)
    assert isinstance(request, ChatCompletionRequest)
    return request


def features(*contents: Any, **body: Any) -> RequestFeatures:
    return extract_features(chat(*contents, **body), {})


def test_check_policy_accepts_the_test_policy() -> None:
    check_policy(POLICY, MODELS)


def test_input_modalities_default_to_text() -> None:
    assert ModelCapabilities(
        context_length=8, supports_tools=False, supports_structured_output=False
    ).input_modalities == ["text"]


# fmt: off
@pytest.mark.parametrize(("modalities", "message"), [
    pytest.param(["image"], r"lacks 'text': every served model takes a text prompt", id="no-text"),
    pytest.param(["text", "audio", "audio"], "lists 'audio' more than once", id="duplicate"),
    pytest.param(["text", "video"], "'text', 'image' or 'audio'", id="unknown-modality"),
])
# fmt: on
def test_bad_input_modalities_name_the_problem(modalities: list[str], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ModelCapabilities.model_validate(
            {
                "context_length": 8,
                "supports_tools": False,
                "supports_structured_output": False,
                "input_modalities": modalities,
            }
        )


# fmt: off
@pytest.mark.parametrize(("contents", "media"), [
    pytest.param(["hi"], {}, id="string-content"),
    pytest.param([[TEXT]], {}, id="text-parts"),
    pytest.param([[TEXT, IMAGE]], {"image": "messages[0].content[1]"}, id="image"),
    pytest.param([[AUDIO, TEXT]], {"audio": "messages[0].content[0]"}, id="audio"),
    pytest.param(["hi", [TEXT, IMAGE, IMAGE], [AUDIO]],
                 {"image": "messages[1].content[1]", "audio": "messages[2].content[0]"},
                 id="first-part-of-each-modality"),
])
# fmt: on
def test_features_locate_the_media_parts(contents: list[Any], media: dict[str, str]) -> None:
    found = features(*contents)
    assert dict(found.media) == media
    assert (found.has_image, found.has_audio) == ("image" in media, "audio" in media)


def test_completions_hold_no_media() -> None:
    request = parse_request(CompletionRequest, {"prompt": "hi"})
    assert isinstance(request, CompletionRequest)
    found = extract_features(request, {})
    assert (found.media, found.has_image, found.has_audio) == ({}, False, False)


# fmt: off
@pytest.mark.parametrize(("contents", "model", "rule", "candidates", "reason"), [
    pytest.param([[TEXT, AUDIO]], "auto", "audio", ("audio",),
                 "rule 'audio' matched (has_audio=True) for alias 'auto'", id="audio"),
    pytest.param([[TEXT, IMAGE]], "auto", "image", ("vl",),
                 "rule 'image' matched (model=['auto'], has_image=True)", id="image"),
    pytest.param(["hi"], "auto", "default", ("text",),
                 "no rule matched alias 'auto'; using default_targets", id="text"),
    pytest.param([[TEXT, IMAGE]], "chat", "alias:chat", ("vl",),
                 "filtered out text: does not take image input", id="alias-filters-by-modality"),
    pytest.param([[TEXT, IMAGE]], "vl", "model:vl", ("vl",), "model 'vl' requested by id",
                 id="pinned-capable"),
])
# fmt: on
def test_decide_routes_by_modality(
    contents: list[Any], model: str, rule: str, candidates: tuple[str, ...], reason: str
) -> None:
    decision = decide(features(*contents, model=model), MODELS, {}, POLICY)
    assert (decision.rule, decision.candidates) == (rule, candidates)
    assert reason in decision.reason


def test_the_headers_say_why() -> None:
    decision = decide(features([TEXT, AUDIO]), MODELS, {}, POLICY)
    routed = Routed("audio", decision.rule, decision.reason, (), chat("hi"))
    headers = routed.headers()
    assert headers[MODEL_HEADER] == "audio"
    assert headers[RULE_HEADER] == "audio"
    assert "has_audio=True" in headers[REASON_HEADER]


# fmt: off
@pytest.mark.parametrize(("models", "contents", "model", "param", "message"), [
    pytest.param({"text": caps(), "vl": caps("image")}, [[TEXT, AUDIO]], "auto",
                 "messages[0].content[1]",
                 "text: does not take audio input; models taking audio input: none",
                 id="nobody-takes-audio"),
    pytest.param(MODELS, ["hi", [IMAGE]], "text", "messages[1].content[0]",
                 "text: does not take image input; models taking image input: vl",
                 id="pinned-model-lacks-image"),
    pytest.param(MODELS, [[IMAGE, AUDIO]], "auto", "messages[0].content[0]",
                 "audio: does not take image input; models taking image input: vl",
                 id="no-model-takes-both"),
])
# fmt: on
def test_a_modality_no_candidate_takes_is_a_400_naming_it(
    models: dict[str, ModelCapabilities],
    contents: list[Any],
    model: str,
    param: str,
    message: str,
) -> None:
    policy = make_policy([AUDIO_RULE, IMAGE_RULE] if "audio" in models else [IMAGE_RULE], models)
    check_policy(policy, models)
    with pytest.raises(NoModelCanServe) as raised:
        decide(features(*contents, model=model), models, {}, policy)
    assert message in str(raised.value)
    assert raised.value.param == param
    error = policy_error(raised.value).response()
    assert (error.status_code, error.error.param, error.error.code) == (400, param, None)
    assert error.error.type == "invalid_request_error"
    assert message in error.error.message


# fmt: off
@pytest.mark.parametrize(("rules", "message"), [
    pytest.param([{"name": "a", "when": {"has_audio": True}, "targets": ["text", "vl"]}],
                 r"rule 'a': none of its targets \['text', 'vl'\] has 'audio' in input_modalities",
                 id="audio-rule-without-audio-model"),
    pytest.param([{"name": "i", "when": {"has_image": True}, "targets": ["text"]}],
                 "has 'image' in input_modalities", id="image-rule-without-vlm"),
    pytest.param([{"name": "i", "when": {"has_image": True}, "targets": ["vl"]},
                  {"name": "i-long", "when": {"has_image": True, "prompt_tokens_gt": 100},
                   "targets": ["vl"]}],
                 r"rule 'i-long' is unreachable: earlier rule 'i'", id="image-rule-shadowed"),
])
# fmt: on
def test_check_policy_rejects_rules_no_target_can_serve(
    rules: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        check_policy(make_policy(rules, MODELS), MODELS)


def test_image_and_audio_rules_do_not_shadow_each_other() -> None:
    rules = [
        {"name": "no-image", "when": {"has_image": False}, "targets": ["text", "audio"]},
        {"name": "image", "when": {"has_image": True}, "targets": ["vl"]},
        {"name": "audio", "when": {"has_audio": True}, "targets": ["audio"]},
    ]
    check_policy(make_policy(rules, MODELS), MODELS)


@pytest.fixture(scope="module")
def shipped() -> RouterAppConfig:
    args = yaml.safe_load(SHIPPED.read_text())["applications"][0]["args"]
    return RouterAppConfig.model_validate(args)


# fmt: off
@pytest.mark.parametrize(("contents", "body", "model", "rule"), [
    pytest.param([[TEXT, AUDIO]], {"temperature": 1.0}, "tiny-qwen2-audio", "audio", id="audio"),
    pytest.param([[TEXT, IMAGE]], {"max_tokens": 16}, "tiny-qwen2-5-vl", "image", id="image"),
    pytest.param(["Write a poem."], {"temperature": 1.1}, "smollm2-big", "creative",
                 id="creative"),
    pytest.param(["2+2?"], {"max_tokens": 8}, "smollm2-small", "short", id="short"),
    pytest.param(["Hello"], {}, "smollm2-big", "default", id="text-default"),
])
# fmt: on
def test_the_shipped_config_routes_the_guides_three_ways(
    shipped: RouterAppConfig, contents: list[Any], body: dict[str, Any], model: str, rule: str
) -> None:
    decision = decide(features(*contents, **body), shipped.capabilities(), {}, shipped.policy)
    assert (decision.candidates[0], decision.rule) == (model, rule)


def test_the_shipped_config_says_how_to_make_its_models(shipped: RouterAppConfig) -> None:
    text = SHIPPED.read_text()
    assert "ascend-router make-tiny-models --families qwen2_5_vl,qwen2_audio" in text
    paths = {m.source.path for m in shipped.models if m.source.path is not None}
    assert paths == {".tiny_models/qwen2_5_vl", ".tiny_models/qwen2_audio"}
