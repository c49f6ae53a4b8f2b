"""Every case of tests/data/serving.json (from shared/cases/), against the running server over real HTTP."""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
import pytest
from serve_helpers import CASES, MODEL, post_stream, stream_text

SERVING_CASES = json.loads((CASES / "serving.json").read_text())


def _with_model(request: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(request)
    if body.get("model") == "MODEL":
        body["model"] = MODEL
    return body


def _get(obj: Any, path: str) -> Any:
    for key in path.split("."):
        obj = obj[int(key)] if isinstance(obj, list) else obj[key]
    return obj


def _nonstream(http: httpx.Client, endpoint: str, body: dict[str, Any]) -> tuple[int, Any]:
    body = {**body, "stream": False}
    body.pop("stream_options", None)
    resp = http.post(endpoint, json=body)
    return resp.status_code, resp.json()


def _texts_nonstream(data: dict[str, Any]) -> dict[int, str]:
    return {
        c["index"]: (c["message"]["content"] if "message" in c else c["text"]) or ""
        for c in data["choices"]
    }


class Result:
    """What one case's request produced, in the form the checks need."""

    def __init__(self, http: httpx.Client, case: dict[str, Any]) -> None:
        self.http = http
        self.case = case
        self.endpoint = case["endpoint"]
        self.body = _with_model(case["request"])
        self.stream = bool(case.get("stream"))
        if self.stream:
            self.status, payload = post_stream(http, self.endpoint, self.body)
            self.events, self.done = payload if self.status == 200 else ([], False)
            self.error = payload if self.status != 200 else None
        else:
            self.status, self.data = _nonstream(http, self.endpoint, self.body)
            self.error = self.data if self.status != 200 else None

    def indices(self) -> set[int]:
        if self.stream:
            return {c["index"] for ev in self.events for c in ev.get("choices", [])}
        return {c["index"] for c in self.data["choices"]}

    def texts(self) -> dict[int, str]:
        if self.stream:
            return {i: stream_text(self.events, i) for i in self.indices()}
        return _texts_nonstream(self.data)

    def finish_reasons(self) -> dict[int, str | None]:
        if not self.stream:
            return {c["index"]: c["finish_reason"] for c in self.data["choices"]}
        reasons: dict[int, str | None] = {}
        for ev in self.events:
            for c in ev.get("choices", []):
                if c.get("finish_reason"):
                    reasons[c["index"]] = c["finish_reason"]
        return reasons

    def usage(self) -> dict[str, int]:
        if not self.stream:
            return self.data["usage"]
        usages = [ev["usage"] for ev in self.events if ev.get("usage")]
        assert len(usages) == 1, f"expected one usage chunk, got {len(usages)}"
        return usages[0]


def check(r: Result, name: str, arg: Any) -> None:  # noqa: C901 - one branch per check kind
    if name == "status":
        assert r.status == arg, r.error
    elif name == "status_class":
        assert str(r.status).startswith(arg[0]), f"status {r.status}"
    elif name == "error_body":
        err = r.error["error"]
        assert {"message", "type", "param", "code"} <= set(err), err
        assert err["message"]
    elif name == "finish_reason_in":
        assert set(r.finish_reasons().values()) <= set(arg), r.finish_reasons()
        assert r.finish_reasons()
    elif name == "not_contains":
        assert all(arg not in t for t in r.texts().values()), r.texts()
    elif name == "no_replacement_char":
        texts = r.texts()
        if any("\ufffd" in t for t in texts.values()):
            _, ref = _nonstream(r.http, r.endpoint, r.body)
            assert _texts_nonstream(ref) == texts, "U+FFFD in the stream only"
    elif name == "usage_consistent":
        u = r.usage()
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], u
    elif name == "completion_tokens_max":
        assert r.usage()["completion_tokens"] <= arg
    elif name == "same_output_twice":
        again = Result(r.http, r.case)
        Result(r.http, {**r.case, "request": {**r.case["request"], "seed": 1}})  # traffic between
        assert again.texts() == r.texts()
    elif name == "stream_equals_nonstream":
        status, ref = _nonstream(r.http, r.endpoint, r.body)
        assert status == 200
        assert r.texts() == _texts_nonstream(ref)
    elif name == "stream_has_done":
        assert r.done
    elif name == "stream_final_has_finish_reason":
        assert set(r.finish_reasons()) == r.indices()
        last = [c for ev in r.events for c in ev.get("choices", [])][-1]
        assert last["finish_reason"] in ("stop", "length", "tool_calls")
    elif name == "stream_usage_chunk":
        last = r.events[-1]
        assert last["choices"] == [] and last["usage"]["total_tokens"] > 0
    elif name == "field_present":
        assert _get(r.data, arg) is not None
    elif name == "n_choices":
        assert len(r.indices()) == arg
    elif name == "choice_indices_unique":
        firsts = [c["index"] for ev in r.events for c in ev["choices"] if "role" in c["delta"]]
        assert sorted(firsts) == sorted(set(firsts)) == sorted(r.indices())
    elif name == "stream_has_role_first":
        ids = {ev["id"] for ev in r.events}
        assert len(ids) == 1, "chunk ids differ"
        assert all(ev["object"] == "chat.completion.chunk" for ev in r.events)
        seen: set[int] = set()
        for ev in r.events:
            for c in ev["choices"]:
                has_role = "role" in c["delta"]
                assert has_role == (c["index"] not in seen), f"role placement in {c}"
                seen.add(c["index"])
    else:
        raise AssertionError(f"unknown check {name!r}")


@pytest.mark.serve
@pytest.mark.parametrize("case", SERVING_CASES, ids=[c["id"] for c in SERVING_CASES])
def test_serving_case(http: httpx.Client, case: dict[str, Any]) -> None:
    result = Result(http, case)
    for item in case["checks"]:
        ((name, arg),) = item.items()
        check(result, name, arg)


@pytest.mark.serve
def test_out_of_vocab_token_id_is_400(http: httpx.Client) -> None:
    resp = http.post("/v1/completions", json={"model": MODEL, "prompt": [[99999999]]})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "prompt"
