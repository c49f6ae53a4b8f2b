"""configs/families.yaml on real Ray Serve: the tiny Qwen2 and DeepSeek-V3 answer the `openai`
client with their real tokenizers and tool-capable chat templates.

The tiny checkpoints are made into a temporary folder (as `ascend-router make-tiny-models`
does) and deployed as a second application, `/families`, on the session's Serve instance.
SmolLM2, the config's third model, is left out: the session's local app already serves it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from ray import serve
from transformers import AutoTokenizer

from cli.tiny_models_cmd import make_tiny_models
from deployments.chat_template import ChatTemplate
from router.app import build_app

pytestmark = pytest.mark.serve

FAMILIES_YAML = Path(__file__).resolve().parents[2] / "configs" / "families.yaml"
APP = "families"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
MESSAGES = [{"role": "user", "content": "北京今天天气怎么样？☀️"}]
MAX_TOKENS = 6


def _tiny_models(args: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    """The config's checkpoint-directory models, with their paths moved under `out`."""
    models = [m for m in args["models"] if m["source"].get("path")]
    for m in models:
        m["source"]["path"] = str(out / Path(m["source"]["path"]).name)
    return models


@pytest.fixture(scope="module")
def families(serve_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Base URL of the deployed app and its models (`model_id` -> checkpoint path)."""
    args = yaml.safe_load(FAMILIES_YAML.read_text())["applications"][0]["args"]
    out = tmp_path_factory.mktemp("tiny_models")
    models = _tiny_models(args, out)
    make_tiny_models(out, [Path(m["source"]["path"]).name for m in models])
    args = {
        **args,
        "models": models,
        "default_model": models[0]["model_id"],
        "router_deployment": {"ray_actor_options": {"num_cpus": 0.05}},
    }
    serve.run(build_app(args), name=APP, route_prefix=f"/{APP}")
    try:
        yield {
            "url": f"{serve_url}/{APP}",
            "models": {m["model_id"]: m["source"]["path"] for m in models},
        }
    finally:
        serve.delete(APP)


@pytest.mark.parametrize("model_id", ["tiny-qwen2", "tiny-deepseek-v3"])
def test_tiny_model_answers_openai_client(families: dict[str, Any], model_id: str) -> None:
    client = openai.OpenAI(base_url=f"{families['url']}/v1", api_key="unused", max_retries=0)
    resp = client.chat.completions.create(
        model=model_id, messages=MESSAGES, tools=[WEATHER], max_tokens=MAX_TOKENS, temperature=0
    )
    assert resp.model == model_id
    choice = resp.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    assert isinstance(choice.message.content, str) or choice.message.tool_calls
    tokenizer = AutoTokenizer.from_pretrained(families["models"][model_id])
    prompt = ChatTemplate(tokenizer).render(MESSAGES, [WEATHER])
    assert "get_weather" in prompt
    usage = resp.usage
    assert usage is not None
    assert usage.prompt_tokens == len(tokenizer.encode(prompt, add_special_tokens=False))
    assert 1 <= usage.completion_tokens <= MAX_TOKENS
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    if choice.finish_reason == "length":
        assert usage.completion_tokens == MAX_TOKENS
