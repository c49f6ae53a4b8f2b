"""A second Ray Serve application calls the router through its handle (router/examples)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ray import serve
from ray.serve.handle import DeploymentHandle

from router.app import APP_NAME
from router.examples.compose_app import RouterError, build_app

pytestmark = pytest.mark.serve

QUESTION = "Name one planet."


@pytest.fixture(scope="module")
def assistant(serve_url: str) -> Iterator[DeploymentHandle]:
    serve.run(build_app({"max_tokens": 12}), name="assistant", route_prefix=None)
    try:
        yield serve.get_app_handle("assistant")
    finally:
        serve.delete("assistant")


def test_second_app_gets_the_routers_answers(assistant: DeploymentHandle) -> None:
    text = assistant.ask.remote(QUESTION).result()
    direct = serve.get_app_handle(APP_NAME).chat.remote(
        {"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 12, "temperature": 0}
    )
    assert text and text == direct.result().choices[0].message.content
    pieces = list(assistant.options(stream=True).ask_stream.remote(QUESTION))
    assert len(pieces) > 1 and "".join(pieces) == text


def test_router_errors_reach_the_second_app(serve_url: str) -> None:
    serve.run(build_app({"max_tokens": 9000}), name="assistant-bad", route_prefix=None)
    try:
        handle = serve.get_app_handle("assistant-bad")
        with pytest.raises(RouterError, match="400 context_length_exceeded"):
            handle.ask.remote(QUESTION).result()
        with pytest.raises(RouterError, match="400 context_length_exceeded"):
            list(handle.options(stream=True).ask_stream.remote(QUESTION))
    finally:
        serve.delete("assistant-bad")
