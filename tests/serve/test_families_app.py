"""configs/families.yaml on real Ray Serve: the tiny Qwen2, DeepSeek-V3 and DeepSeek-V4 answer
the `openai` client with their real tokenizers and tool-capable chat templates (V4: its prompt
encoder, DSML tool calls and `/tokenize`).

The tiny checkpoints are made into a temporary folder (as `ascend-router make-tiny-models`
does) and deployed as a second application, `/families`, on the session's Serve instance.
SmolLM2, the config's third model, is left out: the session's local app already serves it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from ray import serve
from transformers import AutoTokenizer

from cli.tiny_models_cmd import make_tiny_models
from deployments.prompting.chat_template import ChatTemplate
from deployments.toolcalls.assemble import accumulate
from router.app import build_app
from tests.scripted_engine import script_marker, script_tokens

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
V4 = "tiny-deepseek-v4"


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
    for m in models:  # V4 writes the DSML cases when asked to (`script_marker`), else as usual
        if m["model_id"] == V4:
            m["engine_class"] = "tests.scripted_engine:ScriptedEngine"
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


# ---- DeepSeek-V4: prompt encoder, DSML tool calls, /tokenize ---------------------------------

FORECAST = {  # bounded, so a random model cannot run past max_tokens inside a value
    "type": "function",
    "function": {
        "name": "get_forecast",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "metric": {"type": "boolean"},
            },
            "required": ["city", "metric"],
        },
    },
}
ASK = [{"role": "user", "content": "Weather in Lima?"}]


def _client(families: dict[str, Any]) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{families['url']}/v1", api_key="unused", max_retries=0)


def _streamed_calls(stream: Any) -> tuple[list[dict[str, str]], str | None]:
    """(name, arguments) per call index, and the finish reason, from chunks."""
    calls: dict[int, dict[str, str]] = {}
    reason = None
    for chunk in stream:
        for c in chunk.choices:
            reason = c.finish_reason or reason
            for tc in c.delta.tool_calls or ():
                call = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                call["name"] += (tc.function.name or "") if tc.function else ""
                call["arguments"] += (tc.function.arguments or "") if tc.function else ""
    return [calls[i] for i in sorted(calls)], reason


def _check_call(name: str, arguments: str) -> dict[str, Any]:
    assert name == "get_forecast"
    args = json.loads(arguments)
    assert isinstance(args["city"], str) and len(args["city"]) <= 12
    assert isinstance(args["metric"], bool)
    return args


@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": "get_forecast"}}]
)
def test_v4_dsml_round_trip(families: dict[str, Any], tool_choice: Any) -> None:
    """Call (constrained to DSML, parsed by the deepseek_v4 parser) -> tool result -> answer,
    streamed and not; /tokenize shows the V4 prompt of the second turn, with the count the
    engine prefilled."""
    client = _client(families)
    first = client.chat.completions.create(
        model=V4,
        messages=ASK,
        tools=[FORECAST],
        tool_choice=tool_choice,
        parallel_tool_calls=False,  # one call: a random model would keep adding invokes
        max_tokens=160,
        seed=1,
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert not (choice.message.content or "").strip()
    (call,) = choice.message.tool_calls or []
    _check_call(call.function.name, call.function.arguments)
    streamed, reason = _streamed_calls(
        client.chat.completions.create(
            model=V4,
            messages=ASK,
            tools=[FORECAST],
            tool_choice=tool_choice,
            parallel_tool_calls=False,
            max_tokens=160,
            seed=1,
            stream=True,
        )
    )
    assert reason == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in streamed] == [
        (call.function.name, json.loads(call.function.arguments))
    ]
    history = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "19 C, sunny"},
    ]
    answer = client.chat.completions.create(
        model=V4, messages=history, tools=[FORECAST], tool_choice="auto", max_tokens=8
    )
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert answer.usage is not None
    body = {"model": V4, "messages": history, "tools": [FORECAST], "return_prompt": True}
    tok = httpx.post(f"{families['url']}/tokenize", json=body, timeout=60)
    assert tok.status_code == 200, tok.text
    data = tok.json()
    assert data["count"] == len(data["tokens"]) == answer.usage.prompt_tokens
    assert data["max_model_len"] == 2048
    prompt = data["prompt"]
    assert prompt.startswith("<｜begin▁of▁sentence｜>")
    assert '"name": "get_forecast"' in prompt  # the tools section
    assert '<｜DSML｜invoke name="get_forecast">' in prompt  # the call, re-encoded
    assert "<｜User｜><tool_result>19 C, sunny</tool_result><｜Assistant｜></think>" in prompt
    assert tok.headers["x-ascend-router-model"] == V4


def test_v4_constrained_calls_always_parse(families: dict[str, Any]) -> None:
    """24 seeded sampled generations (4 requests x n=6, sent at once so that the engine batches
    them) under `required` and a named choice: every one is one valid call of the tool. (52, at
    n=13, took 67 s alone on 2 cores and over 600 s beside the other xdist worker's tests.)"""
    client = _client(families)
    named = {"type": "function", "function": {"name": "get_forecast"}}

    def ask(seed: int) -> Any:
        return client.chat.completions.create(
            model=V4,
            messages=ASK,
            tools=[FORECAST],
            tool_choice="required" if seed % 2 else named,
            parallel_tool_calls=False,
            max_tokens=160,
            temperature=1.0,
            n=6,
            seed=seed,
        )

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(ask, range(4)))
    for resp in answers:
        for choice in resp.choices:
            assert choice.finish_reason == "tool_calls", choice
            (call,) = choice.message.tool_calls or []
            _check_call(call.function.name, call.function.arguments)


def test_v4_thinking_mode_splits_reasoning(families: dict[str, Any]) -> None:
    """Thinking mode: the prompt ends in `<think>`, so the output starts as reasoning."""
    client = _client(families)
    kwargs = {"chat_template_kwargs": {"thinking": True}}
    resp = client.chat.completions.create(
        model=V4, messages=ASK, max_tokens=6, temperature=0, extra_body=kwargs
    )
    message = resp.choices[0].message.model_dump()
    assert message.get("reasoning_content"), message
    body = {"model": V4, "messages": ASK, "return_prompt": True, **kwargs}
    data = httpx.post(f"{families['url']}/tokenize", json=body, timeout=60).json()
    assert data["prompt"].endswith("<｜User｜>Weather in Lima?<｜Assistant｜><think>")
    assert data["count"] == resp.usage.prompt_tokens
    text = httpx.post(
        f"{families['url']}/detokenize", json={"model": V4, "tokens": data["tokens"]}, timeout=60
    )
    assert text.status_code == 200 and text.json() == {"prompt": data["prompt"]}


DSML_CASES = [
    c
    for c in json.loads((Path(__file__).parents[1] / "data" / "toolcalls.json").read_text())
    if c["family"] in ("deepseek-v4", "deepseek-v32") and "raw" in c["input"]
]


def _text(value: str | None) -> str | None:
    return (value or "").strip() or None


def _args(calls: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("case", DSML_CASES, ids=[c["id"] for c in DSML_CASES])
def test_v4_dsml_cases_written_by_the_served_model(
    families: dict[str, Any], case: dict[str, Any]
) -> None:
    """Every public DSML case, written token by token by the served tiny V4 (the scripted
    engine), through its real tokenizer, prompt encoder, parser and the router, streamed and
    not."""
    inp, exp = case["input"], case["expected"]
    tokenizer = AutoTokenizer.from_pretrained(families["models"][V4])
    cut = inp.get("engine_finish_reason") == "length"
    thinking = inp.get("prompt_suffix", "").endswith("<think>")
    request = {
        "model": V4,
        "messages": [{"role": "user", "content": script_marker(inp["raw"])}],
        "tools": inp["tools"] or None,
        "max_tokens": script_tokens(tokenizer, inp["raw"]) if cut else 512,
        "temperature": 0,
        "extra_body": {"chat_template_kwargs": {"thinking": thinking}},
    }
    client = _client(families)
    answer = client.chat.completions.create(**request).choices[0]
    whole = [(t["name"], t["arguments"]) for t in exp["tool_calls"]]
    assert _args(answer.message.model_dump()["tool_calls"] or []) == whole
    assert answer.finish_reason == exp["finish_reason"]
    contents = exp.get("content_any_of", [exp.get("content")])
    assert _text(answer.message.content) in [_text(c) for c in contents]
    reasoning = answer.message.model_dump().get("reasoning_content")
    assert _text(reasoning) == _text(exp.get("reasoning_content"))
    chunks = list(client.chat.completions.create(**request, stream=True))
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason]
    assert reasons == [exp["finish_reason"]]
    streamed = accumulate(c.choices[0].delta.model_dump(exclude_none=True) for c in chunks)
    assert _args(streamed["tool_calls"][: len(whole)]) == whole
    for call in streamed["tool_calls"][len(whole) :]:  # cut off: streamed, never whole
        assert cut
        with pytest.raises(json.JSONDecodeError):
            json.loads(call["function"]["arguments"])


def test_v4_completions_take_token_ids_streamed_and_not(families: dict[str, Any]) -> None:
    """The real tiny DeepSeek-V4 (hybrid KV cache) over /v1/completions with a prompt given
    as token ids, as OpenAI's API allows: the streamed text equals the non-streamed one."""
    client = _client(families)
    ids = [0, 128803, 100, 2000, 30000, 128804]  # BOS, <｜User｜>, three tokens, <｜Assistant｜>
    whole = client.completions.create(model=V4, prompt=ids, max_tokens=12, temperature=0)
    assert whole.usage is not None and whole.usage.prompt_tokens == len(ids)
    assert whole.choices[0].finish_reason in ("stop", "length")
    streamed = client.completions.create(
        model=V4, prompt=ids, max_tokens=12, temperature=0, stream=True
    )
    text = "".join(c.choices[0].text for c in streamed if c.choices)
    assert text == whole.choices[0].text
