"""API keys: a second router application with keys, in front of the local app's models."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from serve_helpers import extra_router, local_args

pytestmark = pytest.mark.serve

KEYS = ["key-one", "key-two"]
BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture(scope="module")
def keyed_url(serve_url: str) -> Iterator[str]:
    with extra_router(serve_url, "keyed", {**local_args(), "api_keys": KEYS}) as url:
        yield url


POSTS = ("/v1/chat/completions", "/v1/load_lora_adapter", "/v1/unload_lora_adapter")


@pytest.mark.parametrize("path", [*POSTS, "/v1/models", "/metrics"])
@pytest.mark.parametrize(
    "authorization", [None, "Bearer wrong", "Basic key-one", "Bearer"], ids=str
)
def test_missing_or_wrong_key_is_401(keyed_url: str, path: str, authorization: str | None) -> None:
    headers = {"authorization": authorization} if authorization else {}
    with httpx.Client(base_url=keyed_url, timeout=60, headers=headers) as client:
        resp = client.post(path, json=BODY) if path in POSTS else client.get(path)
    assert resp.status_code == 401 and resp.headers["www-authenticate"] == "Bearer"
    error = resp.json()["error"]
    assert (error["type"], error["code"]) == ("authentication_error", "invalid_api_key")
    assert "key-one" not in resp.text


def test_right_key_is_served_and_health_stays_open(keyed_url: str) -> None:
    for key in KEYS:
        with httpx.Client(
            base_url=keyed_url, timeout=60, headers={"authorization": f"Bearer {key}"}
        ) as c:
            assert c.post("/v1/chat/completions", json=BODY).status_code == 200
            assert c.get("/v1/models").status_code == 200 and c.get("/metrics").status_code == 200
            off = c.post("/v1/load_lora_adapter", json={"lora_name": "x", "lora_path": "x"})
            assert off.status_code == 403  # past the key check: runtime loading is off here
    assert httpx.get(f"{keyed_url}/health", timeout=60).status_code == 200


def test_openai_client_with_and_without_key(keyed_url: str) -> None:
    good = openai.OpenAI(base_url=f"{keyed_url}/v1", api_key=KEYS[1], max_retries=0)
    assert good.chat.completions.create(model="auto", **BODY).choices  # type: ignore[call-overload]
    bad = openai.OpenAI(base_url=f"{keyed_url}/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
