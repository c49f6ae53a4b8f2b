"""configs/multimodal.yaml on real Ray Serve: images and audio over real HTTP with the official
clients, routed by what a request holds (audio -> the tiny Qwen2-Audio, images -> the tiny
Qwen2.5-VL, text -> SmolLM2), bad media refused with a 4xx while the server keeps serving.

The tiny checkpoints are made into a temporary folder (`ascend-router make-tiny-models`'s
function) and the shipped config is deployed as the application `/multimodal`, its models on
smaller CPU shares so they fit beside the session's local app.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import yaml
from hypothesis import strategies as st
from PIL import Image
from ray import serve
from serve_helpers import wait_healthy

from cli.tiny_models_cmd import make_tiny_models
from fixtures.media_files import (
    audio_bytes,
    audio_part,
    data_url,
    encode_image,
    image_bytes,
    image_part,
    png_bytes,
    png_header,
    zip_bytes,
)
from load_tests.fuzz_checks import RequestPathChecker, run_examples
from load_tests.fuzz_media_mutators import mutate_media_parts
from load_tests.fuzz_requests import FuzzExample, make_example
from router.app import build_app

pytestmark = pytest.mark.serve

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "multimodal.yaml"
APP = "multimodal"
VLM, AUDIO, SMALL, BIG = "tiny-qwen2-5-vl", "tiny-qwen2-audio", "smollm2-small", "smollm2-big"
QUESTION = "What is in this picture? Answer in a long sentence, please, with some detail."


@pytest.fixture(scope="module")
def app(serve_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of the deployed config."""
    args = yaml.safe_load(CONFIG.read_text())["applications"][0]["args"]
    out = tmp_path_factory.mktemp("tiny_models")
    tiny = [m for m in args["models"] if m["source"].get("path")]
    make_tiny_models(out, [Path(m["source"]["path"]).name for m in tiny])
    for m in args["models"]:
        if m["source"].get("path"):
            m["source"]["path"] = str(out / Path(m["source"]["path"]).name)
        m["deployment"]["ray_actor_options"]["num_cpus"] = 0.1
    args["router_deployment"] = {"ray_actor_options": {"num_cpus": 0.05}}
    serve.run(build_app(args), name=APP, route_prefix=f"/{APP}")
    try:
        with httpx.Client(base_url=f"{serve_url}/{APP}", timeout=180) as client:
            wait_healthy(client)
        yield f"{serve_url}/{APP}"
    finally:
        serve.delete(APP)


@pytest.fixture(scope="module")
def http(app: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=app, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def oai(app: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{app}/v1", api_key="unused", max_retries=0)


def routed(headers: httpx.Headers) -> tuple[str | None, str | None]:
    return headers.get("x-ascend-router-model"), headers.get("x-ascend-router-rule")


def user(*parts: dict[str, Any], text: str = QUESTION) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "text", "text": text}, *parts]}]


IMAGE = image_part(data_url(image_bytes(224, 160, "PNG")))
AUDIO_CLIP = audio_part(audio_bytes(1.0), "wav")


@pytest.mark.parametrize(
    ("part", "model", "rule"), [(IMAGE, VLM, "image"), (AUDIO_CLIP, AUDIO, "audio")]
)
def test_media_over_the_openai_client_not_streamed(
    oai: openai.OpenAI, part: dict[str, Any], model: str, rule: str
) -> None:
    raw = oai.chat.completions.with_raw_response.create(
        model="auto",
        messages=user(part),
        max_tokens=6,
        temperature=0,  # type: ignore[arg-type]
    )
    resp = raw.parse()
    assert routed(raw.headers) == (model, rule)
    assert resp.model == model and resp.choices[0].message.content
    assert resp.usage is not None and resp.usage.completion_tokens == 6
    text_only = len(QUESTION) // 2  # the media's placeholder tokens are counted too
    assert resp.usage.prompt_tokens > text_only + 16


@pytest.mark.parametrize(
    ("part", "model", "rule"), [(IMAGE, VLM, "image"), (AUDIO_CLIP, AUDIO, "audio")]
)
def test_media_over_the_openai_client_streamed(
    oai: openai.OpenAI, part: dict[str, Any], model: str, rule: str
) -> None:
    with oai.chat.completions.with_streaming_response.create(
        model="auto",
        messages=user(part),  # type: ignore[arg-type]
        max_tokens=6,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    ) as raw:
        assert routed(raw.headers) == (model, rule)
        chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6
    # the same request not streamed gives the same greedy text
    again = oai.chat.completions.create(
        model=model,
        messages=user(part),
        max_tokens=6,
        temperature=0,  # type: ignore[arg-type]
    )
    assert again.choices[0].message.content == text


def test_a_streamed_request_beyond_grpcs_default_message_size_is_answered(
    http: httpx.Client,
) -> None:
    """The router streams from a model over Serve's gRPC channel between replicas, the request
    in one message: one the router accepts but over gRPC's 4 MiB default (a 4.5 MB image of
    noise) is answered (`configs.deployment_options.GRPC_MESSAGE_ENV`)."""
    rng = random.Random(7)
    noise = Image.frombytes("RGB", (1250, 1200), rng.randbytes(1250 * 1200 * 3))
    body = {
        "model": VLM,
        "messages": user(image_part(data_url(encode_image(noise)))),
        "max_tokens": 4,
        "temperature": 0,
        "stream": True,
    }
    assert len(json.dumps(body)) > 5 * 2**20
    with http.stream("POST", "/v1/chat/completions", json=body) as resp:
        text = resp.read().decode()
    assert resp.status_code == 200, text
    assert text.rstrip().endswith("data: [DONE]") and '"finish_reason":"length"' in text


def test_text_goes_to_the_text_models(http: httpx.Client) -> None:
    hi = [{"role": "user", "content": "Name a colour."}]
    short = http.post("/v1/chat/completions", json={"messages": hi, "max_tokens": 8})
    creative = http.post(
        "/v1/chat/completions", json={"messages": hi, "max_tokens": 200, "temperature": 0.9}
    )
    assert (short.status_code, routed(short.headers)) == (200, (SMALL, "short"))
    assert (creative.status_code, routed(creative.headers)) == (200, (BIG, "creative"))


def test_the_anthropic_client_sends_an_image_to_the_vlm(app: str) -> None:
    client = anthropic.Anthropic(base_url=app, api_key="unused", max_retries=0)
    png = base64.b64encode(image_bytes(224, 160, "PNG")).decode()
    raw = client.messages.with_raw_response.create(
        model="auto",
        max_tokens=4,
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": png},
                    },
                    {"type": "text", "text": "Describe it."},
                ],
            }
        ],
    )
    assert raw.headers.get("x-ascend-router-model") == VLM
    assert raw.parse().usage.output_tokens == 4


def test_the_prefix_cache_keys_on_the_image(http: httpx.Client) -> None:
    """The same image again reuses its blocks; another image with the same text reuses only
    the blocks before it."""

    def cached(png: bytes) -> int:
        body = {"messages": user(image_part(data_url(png))), "max_tokens": 2, "temperature": 0}
        resp = http.post("/v1/chat/completions", json=body)
        assert resp.status_code == 200, resp.text
        return int(resp.json()["usage"]["prompt_tokens_details"]["cached_tokens"])

    first = image_bytes(112, 84, "PNG")
    cached(first)
    same = cached(first)
    other = cached(image_bytes(84, 112, "PNG"))  # as many placeholder tokens, other pixels
    assert same > other > 0


BAD_MEDIA = [
    pytest.param(image_part(data_url(png_bytes(64, 64)[:90])), "truncated", id="truncated-png"),
    pytest.param(
        audio_part(zip_bytes("speech.wav", b"x" * 64)), "not a readable wav", id="zip-as-wav"
    ),
    pytest.param(
        image_part(data_url(png_header(50_000, 50_000))), "max_image_pixels", id="huge-png-header"
    ),
    pytest.param(
        image_part("http://169.254.169.254/latest/meta-data/"), "data URLs only", id="private-url"
    ),
    pytest.param(audio_part(audio_bytes(0.5), "mp3"), "but the data is WAV", id="format-lies"),
]


@pytest.mark.parametrize(("part", "message"), BAD_MEDIA)
def test_bad_media_is_a_4xx_and_the_server_keeps_serving(
    http: httpx.Client, part: dict[str, Any], message: str
) -> None:
    resp = http.post("/v1/chat/completions", json={"messages": user(part), "max_tokens": 2})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and message in error["message"]
    assert http.get("/health").json()["status"] == "ok"
    served = http.post("/v1/chat/completions", json={"messages": user(IMAGE), "max_tokens": 2})
    assert served.status_code == 200


@pytest.mark.parametrize(
    ("body", "modality"),
    [
        ({"model": SMALL, "messages": user(IMAGE)}, "image"),  # by id: a text model
        ({"messages": user(IMAGE, AUDIO_CLIP)}, "image"),  # both: no model takes the pair
    ],
)
def test_a_modality_no_candidate_takes_is_a_400_naming_it(
    http: httpx.Client, body: dict[str, Any], modality: str
) -> None:
    resp = http.post("/v1/chat/completions", json={**body, "max_tokens": 2})
    assert resp.status_code == 400
    assert f"does not take {modality} input" in resp.json()["error"]["message"]


def test_fuzzed_media_parts_get_4xx_or_answers_and_leave_the_server_serving(
    http: httpx.Client,
) -> None:
    """The fuzzer's image and audio parts (valid, damaged, hostile, over the limits) sent to
    the policy (`auto`) and to each model by id: no 5xx, errors in OpenAI's shape, `/health`
    unchanged, and a valid request served after each."""
    models = [VLM, AUDIO, SMALL, BIG]

    @st.composite
    def media_examples(draw: st.DrawFn) -> FuzzExample:
        rng = random.Random(draw(st.integers(0, 2**32 - 1)))
        model = draw(st.sampled_from([None, *models]))
        body: dict[str, Any] = {"max_tokens": 2, "messages": user(text="Hi")}
        if model is not None:
            body["model"] = model
        return make_example("chat", mutate_media_parts(rng, body, "chat"), models, ("media_parts",))

    checker = RequestPathChecker(http, models, check_every=1, probe_max_tokens=1)
    run_examples(media_examples(), checker.check, 24)
    assert checker.stats.examples == 24 and not checker.stats.violations, checker.stats.violations
