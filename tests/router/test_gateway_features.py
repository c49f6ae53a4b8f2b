"""Gateway features on scripted model handles (no Ray): per-candidate preprocessing and the
truncation permission, rate limits before routing, and the models API. The real stack is
exercised in tests/serve/test_operator_features.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fake_models import Behaviour, FakeHandle

from configs.model_config import RouterAppConfig
from deployments.protocol.errors import ErrorResponse, OpenAIError
from deployments.protocol.preprocess_plan import PREPROCESS_HEADER, PreprocessReport
from deployments.protocol.requests import ChatCompletionRequest
from router.dispatch import Routed
from router.gateway import Gateway


def gateway(order: list[str], a: Behaviour = "ok", **args: Any) -> Gateway:
    models = [
        {"model_id": m, "source": {"path": f"/ckpt/{m}"}, "engine": {"max_model_len": ctx}}
        for m, ctx in (("a", 2048), ("b", 8192))
    ]
    config = RouterAppConfig.model_validate(
        {"models": models, "policy": {"aliases": {"auto": order}}, **args}
    )
    handles = {"a": FakeHandle("a", a), "b": FakeHandle("b")}
    return Gateway(config, handles)  # type: ignore[arg-type]


TRUNCATE_BOTH = {"models": {"a": {"truncation": {}}, "b": {"truncation": {}}}}


def run(gw: Gateway, headers: dict[str, str] | None = None, **body: Any) -> Any:
    body = {"messages": [{"role": "user", "content": "hi   there\n\n\n\nyou"}], **body}
    return asyncio.run(gw.route("chat", ChatCompletionRequest, body, headers or {}))


@pytest.mark.parametrize("stream", [False, True])
def test_truncation_is_allowed_only_where_no_longer_context_remains(stream: bool) -> None:
    gw = gateway(["a", "b"], a="context", preprocessing=TRUNCATE_BOTH)
    routed = run(gw, stream=stream)
    assert isinstance(routed, Routed) and routed.model == "b" and routed.fallback == ("a",)
    (to_a,), (to_b,) = gw.caller.handles["a"].sent(), gw.caller.handles["b"].sent()  # type: ignore[attr-defined]
    assert not to_a.preprocess.fit_context, "b holds more: a must not drop content"
    assert to_b.preprocess.fit_context
    gw = gateway(["b", "a"], preprocessing=TRUNCATE_BOTH)
    run(gw)
    (to_b,) = gw.caller.handles["b"].sent()  # type: ignore[attr-defined]
    assert to_b.preprocess.fit_context, "the longest context goes first: it may truncate"


def test_text_rules_follow_the_scope_of_each_candidate() -> None:
    rules = {
        "aliases": {"auto": {"system_prompt": {"text": "alias prompt"}}},
        "models": {"b": {"compact_whitespace": True}},
        "tenants": {"t": {"system_prompt": {"text": "tenant prompt", "mode": "replace"}}},
    }
    gw = gateway(["a", "b"], a="context", preprocessing=rules)
    run(gw)
    (to_a,), (to_b,) = gw.caller.handles["a"].sent(), gw.caller.handles["b"].sent()  # type: ignore[attr-defined]
    assert [m.text() for m in to_a.request.messages] == [
        "alias prompt",
        "hi   there\n\n\n\nyou",
    ]
    assert to_a.preprocess.system == "injected" and not to_a.preprocess.compacted
    assert [m.text() for m in to_b.request.messages] == ["alias prompt", "hi there\n\nyou"]
    assert to_b.preprocess.compacted == [("hi   there\n\n\n\nyou", "hi there\n\nyou")]
    gw = gateway(["a", "b"], preprocessing=rules)
    run(gw, {"x-ascend-router-tenant": "t"}, model="a")
    (to_a,) = gw.caller.handles["a"].sent()  # type: ignore[attr-defined]
    assert to_a.request.messages[0].text() == "tenant prompt", "tenant over alias"
    gw = gateway(["a", "b"])
    run(gw)
    (to_a,) = gw.caller.handles["a"].sent()  # type: ignore[attr-defined]
    assert to_a.preprocess is None, "no rules: nothing extra is sent"


def test_the_report_becomes_the_header() -> None:
    report = PreprocessReport(
        system="injected",
        compacted_messages=1,
        truncated_messages=3,
        tokens_saved={"compact_whitespace": 12, "truncation": 500},
    )
    routed = Routed("a", "default", "why", (), ErrorResponse.model_validate(
        {"error": {"message": "m", "type": "t"}}), preprocess=report)  # fmt: skip
    assert routed.headers()[PREPROCESS_HEADER] == (
        "system=injected; compacted_messages=1; truncated_messages=3; tokens_saved=512"
    )
    assert PREPROCESS_HEADER not in Routed("a", "r", "w", (), routed.result).headers()


def test_a_flooding_key_gets_429_before_any_model_is_called() -> None:
    gw = gateway(
        ["a", "b"], api_keys=["k1", "k2"], rate_limits={"per_key": {"requests_per_minute": 2}}
    )
    flood = {"authorization": "Bearer k1"}
    assert [isinstance(run(gw, flood), Routed) for _ in range(2)] == [True, True]
    refused = run(gw, flood)
    assert isinstance(refused, ErrorResponse) and refused.status_code == 429
    assert refused.retry_after_s == 30 and refused.error.code == "rate_limit_exceeded"
    assert isinstance(run(gw, {"authorization": "Bearer k2"}), Routed)
    assert len(gw.caller.handles["a"].sent()) == 3  # type: ignore[attr-defined]
    text = gw.metrics.render().decode()
    assert 'ascend_router_rate_limited_total{kind="requests",limit="per_key"} 1.0' in text


def test_model_objects_and_404() -> None:
    gw = gateway(["a", "b"])
    card = gw.model_card("a", 5)
    assert (card.id, card.root, card.parent, card.max_model_len) == ("a", "/ckpt/a", None, 2048)
    assert gw.model_card("auto", 5).root is None
    with pytest.raises(OpenAIError) as info:
        gw.model_card("Qwen/Qwen2.5-7B-Instruct", 5)
    assert info.value.status_code == 404 and info.value.code == "model_not_found"
    assert [c.id for c in gw.model_list(5).data] == ["a", "b", "auto"]
