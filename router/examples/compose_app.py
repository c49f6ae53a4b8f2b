"""A second Ray Serve application that uses the router through its Python API.

`Assistant` holds the handle of the `ascend-router` application and calls its `chat` method:
the request is a plain OpenAI dict, the answer the same `ChatCompletion` (or stream of
`ChatCompletionChunk`) that HTTP clients get as JSON, routed by the same policy; an error comes
back as an `ErrorResponse` (the first stream item when streaming). Run it next to the router on
the same Serve instance::

    serve run configs/local.yaml                       # the router app, in one shell
    python - <<'PY'                                    # this app, from another
    import ray
    from ray import serve
    from router.examples.compose_app import build_app
    ray.init(address="auto")
    serve.run(build_app({}), name="assistant", route_prefix=None)
    handle = serve.get_app_handle("assistant")
    print(handle.ask.remote("Name three planets.").result())
    for text in handle.options(stream=True).ask_stream.remote("Name three planets."):
        print(text, end="", flush=True)
    PY
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ray import serve
from ray.serve import Application
from ray.serve.handle import DeploymentResponseGenerator

from deployments.protocol.errors import ErrorResponse
from router import APP_NAME


class RouterError(RuntimeError):
    """The router answered with an OpenAI error (`status code: message`).

    Args:
        error: the router's `ErrorResponse`.
    """

    def __init__(self, error: ErrorResponse) -> None:
        super().__init__(f"{error.status_code} {error.error.code}: {error.error.message}")
        self.error = error

    def __reduce__(self) -> tuple[type[RouterError], tuple[ErrorResponse]]:
        # Ray sends it to the caller: rebuild it from the error, not from the message
        return (RouterError, (self.error,))


@serve.deployment(ray_actor_options={"num_cpus": 0.05})
class Assistant:
    """Answers questions with one greedy chat completion through the router.

    Args:
        router_app: Name of the router application.
        max_tokens: Completion limit of each answer.
    """

    def __init__(self, router_app: str = APP_NAME, max_tokens: int = 64) -> None:
        self.router = serve.get_app_handle(router_app)
        self.max_tokens = max_tokens

    def _request(self, question: str, stream: bool) -> dict[str, Any]:
        messages = [{"role": "user", "content": question}]
        return {
            "messages": messages,
            "max_tokens": self.max_tokens,
            "temperature": 0,
            "stream": stream,
        }

    async def ask(self, question: str) -> str:
        """The answer to `question`.

        Raises:
            RouterError: the router answered with an error.
        """
        response = await self.router.chat.remote(self._request(question, stream=False))
        if isinstance(response, ErrorResponse):
            raise RouterError(response)
        return response.choices[0].message.content or ""

    async def ask_stream(self, question: str) -> AsyncIterator[str]:
        """The answer to `question`, as text pieces while they are generated.

        Call with `handle.options(stream=True)`.

        Raises:
            RouterError: the router answered with an error.
        """
        chunks = self.router.options(stream=True).chat.remote(self._request(question, True))
        assert isinstance(chunks, DeploymentResponseGenerator), "stream=True gives a generator"
        async for chunk in chunks:
            if isinstance(chunk, ErrorResponse):
                raise RouterError(chunk)
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content


def build_app(args: dict[str, Any]) -> Application:
    """Application builder (`import_path: router.examples.compose_app:build_app`).

    Args:
        args: optional `router_app` (default `ascend-router`) and `max_tokens` (default 64).
    """
    return Assistant.bind(**args)
