"""The ingress deployment: OpenAI HTTP API and the Python handle API, in front of the models.

HTTP routes: `POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models`,
`GET /health`. Python callers use `serve.get_app_handle("ascend-router")` and the methods
`chat`, `completions` and `models`, which return the same objects as the HTTP bodies
(`model_dump()` equals the JSON), or an async generator of chunks when the request streams.
"""

# FastAPI reads these annotations at runtime, so no `from __future__ import annotations`.

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel
from ray import serve
from ray.serve.handle import DeploymentHandle

from configs.model_config import RouterAppConfig
from deployments.protocol.errors import ErrorResponse, OpenAIError
from deployments.protocol.requests import ChatCompletionRequest, CompletionRequest
from deployments.protocol.responses import ModelCard, ModelList
from deployments.protocol.validation import parse_request
from router.http_errors import error_json, error_sse

logger = logging.getLogger(__name__)

app = FastAPI(title="ascend-router")


async def _sse(first: BaseModel, rest: AsyncIterator[Any]) -> AsyncIterator[str]:
    """Relay chunks as server-sent events, ending with `data: [DONE]`."""
    yield f"data: {first.model_dump_json()}\n\n"
    try:
        async for item in rest:
            if isinstance(item, ErrorResponse):
                yield error_sse(item)
                break
            yield f"data: {item.model_dump_json()}\n\n"
    finally:
        # client gone or stream done: cancelling reaches the model replica, which aborts
        cancel = getattr(rest, "cancel", None)
        if cancel is not None:
            cancel()
    yield "data: [DONE]\n\n"


def _is_stream(result: Any) -> bool:
    return not isinstance(result, BaseModel)


async def _one(item: ErrorResponse) -> AsyncIterator[ErrorResponse]:
    yield item


async def _relay(stream: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for item in stream:
        yield item


# Helpers above stay above: `serve.ingress` pickles the class when it is defined.
@serve.deployment
@serve.ingress(app)
class Router:
    """Routes OpenAI requests to model deployments.

    Args:
        config: the application config (`RouterAppConfig` as a dict or model).
        handles: model id -> handle of its `ModelServer` deployment.
    """

    def __init__(
        self, config: RouterAppConfig | dict[str, Any], handles: dict[str, DeploymentHandle]
    ) -> None:
        self.config = RouterAppConfig.model_validate(config)
        self.handles = handles
        self.created = int(time.time())

    # ---- Python API (also used by the HTTP routes) ----------------------------------------

    def _target(self, model: str | None) -> DeploymentHandle:
        model_id = model or self.config.default
        handle = self.handles.get(model_id)
        if handle is None:
            raise OpenAIError(
                f"the model {model_id!r} does not exist; available: {sorted(self.handles)}",
                status_code=404, param="model", code="model_not_found",
            )
        return handle

    async def _call(
        self, method: str, model: type[ChatCompletionRequest | CompletionRequest], request: Any
    ) -> Any:
        try:
            req = parse_request(model, request)
            handle = self._target(req.model)
        except OpenAIError as exc:
            if isinstance(request, dict) and request.get("stream"):
                return _one(exc.response())
            return exc.response()
        if req.stream:
            return handle.options(stream=True).__getattr__(method).remote(req)
        return await handle.__getattr__(method).remote(req)

    async def chat(self, request: ChatCompletionRequest | dict[str, Any]) -> Any:
        """Chat completion: `ChatCompletion`, or an async generator of `ChatCompletionChunk`
        when `request.stream` (call with `handle.options(stream=True)`); errors come back as an
        `ErrorResponse` (the first stream item when streaming)."""
        result = await self._call("chat", ChatCompletionRequest, request)
        return _relay(result) if _is_stream(result) else result

    async def completions(self, request: CompletionRequest | dict[str, Any]) -> Any:
        """Legacy completion: `Completion` or a stream of them; errors as for `chat`."""
        result = await self._call("completions", CompletionRequest, request)
        return _relay(result) if _is_stream(result) else result

    async def models(self) -> ModelList:
        """The served models."""
        cards = []
        for model_id, handle in self.handles.items():
            info = await handle.info.remote()
            cards.append(
                ModelCard(id=model_id, created=self.created, max_model_len=info["max_model_len"])
            )
        return ModelList(data=cards)

    # ---- HTTP ------------------------------------------------------------------------------

    async def _http(self, method: str, model: type[Any], request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return error_json(OpenAIError(f"the request body is not valid JSON: {exc}"))
        try:
            result = await self._call(method, model, body)
            if isinstance(result, BaseModel):
                return error_json(result) if isinstance(result, ErrorResponse) else JSONResponse(
                    result.model_dump(mode="json")
                )
            first = await anext(result, None)
        except Exception as exc:  # a failed replica is a server error, still in OpenAI form
            logger.exception("%s failed", method)
            return error_json(OpenAIError(f"the model server failed: {exc}", status_code=500))
        if first is None:
            return error_json(OpenAIError("the model returned no output", status_code=500))
        if isinstance(first, ErrorResponse):
            cancel = getattr(result, "cancel", None)
            if cancel is not None:
                cancel()
            return error_json(first)
        return StreamingResponse(_sse(first, result), media_type="text/event-stream")

    @app.post("/v1/chat/completions")
    async def http_chat(self, request: Request) -> Response:
        """OpenAI chat completions over HTTP (JSON or SSE)."""
        return await self._http("chat", ChatCompletionRequest, request)

    @app.post("/v1/completions")
    async def http_completions(self, request: Request) -> Response:
        """OpenAI legacy completions over HTTP (JSON or SSE)."""
        return await self._http("completions", CompletionRequest, request)

    @app.get("/v1/models")
    async def http_models(self) -> Response:
        """The served models."""
        return JSONResponse((await self.models()).model_dump(mode="json"))

    @app.get("/health")
    async def health(self) -> Response:
        """Liveness of the router (200 while it serves)."""
        return JSONResponse({"status": "ok", "models": sorted(self.handles)})

