"""The ingress deployment: OpenAI HTTP API and the Python handle API, in front of the models.

HTTP routes: `POST /v1/chat/completions`, `POST /v1/completions`, Anthropic's
`POST /v1/messages` and `POST /v1/messages/count_tokens`, OpenAI's `POST /v1/responses`,
`GET /v1/responses/{id}` and `DELETE /v1/responses/{id}` (the last five translated onto the chat
path at the edge: `router.apis`), `POST /tokenize`,
`POST /detokenize` (vLLM's bodies: `deployments.protocol.tokenize`), `GET /v1/models`,
`GET /v1/models/{model}`, `POST /v1/load_lora_adapter`, `POST /v1/unload_lora_adapter`
(`router.lora_admin`), `GET /metrics` (Prometheus text format) and `GET /health`; with API
keys configured every route but `/health` needs `Authorization: Bearer <key>` or
`x-api-key: <key>`. Every answer
given after a routing decision carries the headers `x-ascend-router-model`,
`x-ascend-router-rule`, `x-ascend-router-reason`, after a fallback `x-ascend-router-fallback`,
and, when preprocessing changed the request, `x-ascend-router-preprocess`. A request over a
rate limit is answered 429 with `Retry-After`.

Python callers use `serve.get_app_handle("ascend-router")` and the methods `chat`,
`completions`, `tokenize`, `detokenize` and `models`, which return the same objects as the HTTP
bodies (`model_dump()` equals the JSON), or an async generator of chunks when the request
streams (call with `handle.options(stream=True)`); errors come back as an `ErrorResponse` (the
first stream item when streaming). The Python API is not behind the API keys (nor their rate
limits): it is reachable only from inside the Ray cluster.
"""

# FastAPI reads these annotations at runtime, so no `from __future__ import annotations`.

import asyncio
import logging
import time
from collections.abc import Coroutine
from functools import partial
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.exceptions import HTTPException as StarletteHTTPException

from configs.model_config import RouterAppConfig
from deployments.protocol.errors import ErrorResponse, OpenAIError, internal_error
from deployments.protocol.limits import check_body_size, parse_body
from deployments.protocol.request_id import current_request_id
from deployments.protocol.requests import ChatCompletionRequest, CompletionRequest
from deployments.protocol.responses import ModelCard, ModelList
from deployments.protocol.tokenize import DetokenizeRequest, tokenize_schema
from deployments.protocol.validation import wants_stream
from router.apis.anthropic import AnthropicEdge
from router.apis.edge import ApiEdge
from router.apis.http import EdgeJSONResponse, edge_answer, edge_error
from router.apis.responses import ResponsesEdge, ResponseStore
from router.auth import authorized
from router.dispatch import Routed
from router.gateway import Gateway
from router.http_errors import (
    error_json,
    method_not_allowed,
    not_found,
    unauthorized,
)
from router.openai_answers import ErrorRender, http_result, python_result
from router.replica_metrics import batch_limits, replica_expositions

logger = logging.getLogger(__name__)

# no /docs, /redoc or /openapi.json: the API is OpenAI's, and Swagger UI would load from a CDN
app = FastAPI(title="ascend-router", docs_url=None, redoc_url=None, openapi_url=None)

_INLINE_BYTES = 256 * 1024
"""Bodies up to this size are parsed on the event loop (well under a millisecond)."""


@app.exception_handler(StarletteHTTPException)
async def _http_exception(request: Request, exc: StarletteHTTPException) -> Response:
    """Unknown routes and wrong methods, as OpenAI errors instead of Starlette's `detail`."""
    if exc.status_code == 404:
        return error_json(not_found(request.url.path))
    if exc.status_code == 405:
        return error_json(method_not_allowed(request.method, request.url.path))
    return error_json(OpenAIError(str(exc.detail), status_code=exc.status_code))


def _unary(body: Any) -> Any:
    """A tokenize body never streams, whatever its `stream` says."""
    return {**body, "stream": False} if isinstance(body, dict) else body


# Helpers above stay above: `serve.ingress` pickles the class when it is defined.
@serve.deployment
@serve.ingress(app)
class Router:
    """Routes OpenAI requests to model deployments by the configured policy.

    Args:
        config: the application config (`RouterAppConfig` as a dict or model).
        handles: model id -> handle of its `ModelServer` deployment.
        lora_registry: handle of the application's `LoraRegistry` (None: no model allows
            runtime LoRA loading).
    """

    async def __init__(  # type: ignore[misc]  # Ray Serve awaits an async constructor
        self,
        config: RouterAppConfig | dict[str, Any],
        handles: dict[str, DeploymentHandle],
        lora_registry: DeploymentHandle | None = None,
    ) -> None:
        self.config = RouterAppConfig.model_validate(config)
        self.gateway = Gateway(self.config, handles, lora_registry)
        await self.gateway.start()
        self.created = int(time.time())
        self.anthropic = AnthropicEdge()
        store = self.config.responses_store
        self.responses = ResponsesEdge(
            ResponseStore(store.max_responses, store.ttl_s, store.max_bytes)
        )

    # ---- Python API (also used by the HTTP routes) ----------------------------------------

    async def chat(self, request: ChatCompletionRequest | dict[str, Any]) -> Any:
        """Chat completion: `ChatCompletion`, or an async generator of `ChatCompletionChunk`
        when `request.stream` (call with `handle.options(stream=True)`); errors come back as an
        `ErrorResponse` (the first stream item when streaming)."""
        outcome = await self.gateway.route("chat", ChatCompletionRequest, request, {})
        return python_result(outcome, wants_stream(request))

    async def completions(self, request: CompletionRequest | dict[str, Any]) -> Any:
        """Legacy completion: `Completion` or a stream of them; errors as for `chat`."""
        outcome = await self.gateway.route("completions", CompletionRequest, request, {})
        return python_result(outcome, wants_stream(request))

    async def tokenize(self, request: dict[str, Any]) -> Any:
        """`/tokenize`: a `TokenizeResponse` (or `ErrorResponse`) for a chat (`messages`) or
        `prompt` body, routed as a chat or completion request would be."""
        outcome = await self.gateway.route(
            "tokenize", tokenize_schema(request), _unary(request), {}
        )
        return python_result(outcome, False)

    async def detokenize(self, request: dict[str, Any]) -> Any:
        """`/detokenize`: a `DetokenizeResponse` (or `ErrorResponse`) for `{model, tokens}`."""
        outcome = await self.gateway.route("detokenize", DetokenizeRequest, _unary(request), {})
        return python_result(outcome, False)

    async def models(self) -> ModelList:
        """The served model ids, then the aliases (`auto` included)."""
        return self.gateway.model_list(self.created)

    async def model(self, model: str) -> ModelCard | ErrorResponse:
        """One served model or alias; an `ErrorResponse` (404) for any other id."""
        try:
            return self.gateway.model_card(model, self.created)
        except OpenAIError as exc:
            return exc.response()

    # ---- HTTP ------------------------------------------------------------------------------

    def _denied(self, request: Request, render: ErrorRender = error_json) -> Response | None:
        if authorized(request.headers, self.config.api_keys):
            return None
        return render(unauthorized(), {"www-authenticate": "Bearer"})

    async def _guarded(
        self,
        what: str,
        request: Request,
        work: Coroutine[Any, Any, Response],
        render: ErrorRender = error_json,
    ) -> Response:
        """`work`'s answer behind the API keys; an `OpenAIError` it raises is that error's
        answer, anything else an opaque 500 (a router bug), each rendered in the API's error
        shape (`render`: OpenAI's unless the route's API has its own)."""
        denied = self._denied(request, render)
        if denied is not None:
            work.close()  # never awaited
            return denied
        try:
            return await work
        except OpenAIError as exc:
            return render(exc, None)
        except Exception:
            rid = current_request_id()
            logger.exception("request %s: %s failed in the router", rid, what)
            return render(internal_error(rid, "the router"), None)

    async def _body(self, request: Request) -> Any:
        """The request's JSON body within the request limits.

        Raises:
            OpenAIError: 400/413 for a body over the limits or not JSON.
        """
        limits = self.config.request_limits
        declared = request.headers.get("content-length", "")
        check_body_size(int(declared) if declared.isdigit() else 0, limits)  # before reading
        raw = await request.body()
        # a large body is scanned and parsed off the event loop, which other requests share
        if len(raw) > _INLINE_BYTES:
            return await asyncio.to_thread(parse_body, raw, limits)
        return parse_body(raw, limits)

    async def _route(self, method: str, schema: type[Any], request: Request) -> Response:
        body = await self._body(request)
        outcome = await self.gateway.route(method, schema, body, request.headers, sse=True)
        return http_result(outcome)

    async def _http(self, method: str, schema: type[Any], request: Request) -> Response:
        return await self._guarded(method, request, self._route(method, schema, request))

    @app.post("/v1/chat/completions")
    async def http_chat(self, request: Request) -> Response:
        """OpenAI chat completions over HTTP (JSON or SSE)."""
        return await self._http("chat", ChatCompletionRequest, request)

    @app.post("/v1/completions")
    async def http_completions(self, request: Request) -> Response:
        """OpenAI legacy completions over HTTP (JSON or SSE)."""
        return await self._http("completions", CompletionRequest, request)

    async def _route_unary(self, method: str, request: Request) -> Response:
        body = await self._body(request)
        schema = tokenize_schema(body) if method == "tokenize" else DetokenizeRequest
        outcome = await self.gateway.route(method, schema, _unary(body), request.headers)
        return http_result(outcome)

    @app.post("/tokenize")
    async def http_tokenize(self, request: Request) -> Response:
        """vLLM's `/tokenize`: the token ids (and with `return_prompt` the text) of the prompt
        the chosen model would prefill for these `messages` or this `prompt`."""
        return await self._guarded("tokenize", request, self._route_unary("tokenize", request))

    @app.post("/detokenize")
    async def http_detokenize(self, request: Request) -> Response:
        """vLLM's `/detokenize`: `{model, tokens}` -> `{prompt}`."""
        return await self._guarded("detokenize", request, self._route_unary("detokenize", request))

    async def _route_api(self, edge: ApiEdge, request: Request) -> Response:
        chat = await edge.chat_body(await self._body(request))
        outcome = await self.gateway.route("chat", ChatCompletionRequest, chat, request.headers)
        return edge_answer(edge, chat, outcome)

    async def _api(self, edge: ApiEdge, request: Request) -> Response:
        work = self._route_api(edge, request)
        return await self._guarded(edge.api, request, work, partial(edge_error, edge))

    @app.post("/v1/messages")
    async def http_messages(self, request: Request) -> Response:
        """Anthropic's Messages API (JSON or Anthropic's SSE events), served through the chat
        path (`router.apis.anthropic`); errors in Anthropic's shape."""
        return await self._api(self.anthropic, request)

    async def _count_tokens(self, request: Request) -> Response:
        body = self.anthropic.count_body(await self._body(request))
        schema = tokenize_schema(body)
        outcome = await self.gateway.route("tokenize", schema, body, request.headers)
        result = outcome.result if isinstance(outcome, Routed) else outcome
        if isinstance(result, ErrorResponse):
            return edge_error(self.anthropic, result)
        return JSONResponse(self.anthropic.count_answer(result.count))

    @app.post("/v1/messages/count_tokens")
    async def http_count_tokens(self, request: Request) -> Response:
        """Anthropic's token count: the prompt tokens of the same `/v1/messages` body, by the
        chosen model's own template and tokenizer."""
        render = partial(edge_error, self.anthropic)
        return await self._guarded("count_tokens", request, self._count_tokens(request), render)

    @app.post("/v1/responses")
    async def http_responses(self, request: Request) -> Response:
        """OpenAI's Responses API (JSON or the Responses SSE events), served through the chat
        path (`router.apis.responses`)."""
        return await self._api(self.responses, request)

    async def _stored(self, response_id: str, delete: bool) -> Response:
        if delete:
            return EdgeJSONResponse(self.responses.delete(response_id))
        return EdgeJSONResponse(self.responses.get(response_id))

    @app.get("/v1/responses/{response_id}")
    async def http_get_response(self, response_id: str, request: Request) -> Response:
        """A stored response (`store`), 404 once unknown or expired."""
        return await self._guarded("responses", request, self._stored(response_id, False))

    @app.delete("/v1/responses/{response_id}")
    async def http_delete_response(self, response_id: str, request: Request) -> Response:
        """Forget a stored response; 404 when unknown or expired."""
        return await self._guarded("responses", request, self._stored(response_id, True))

    @app.get("/v1/models")
    async def http_models(self, request: Request) -> Response:
        """The served model ids, then the aliases."""
        return self._denied(request) or JSONResponse((await self.models()).model_dump(mode="json"))

    @app.get("/v1/models/{model:path}")
    async def http_model(self, model: str, request: Request) -> Response:
        """One served model or alias as an OpenAI model object; ids may contain `/`; 404
        `model_not_found` for any other id."""
        denied = self._denied(request)
        if denied is not None:
            return denied
        card = await self.model(model)
        if isinstance(card, ErrorResponse):
            return error_json(card)
        return JSONResponse(card.model_dump(mode="json"))

    async def _lora(self, action: str, request: Request) -> Response:
        admin = self.gateway.lora
        body = await self._body(request)
        # shielded: a client that goes away mid-load leaves the registry and replicas consistent
        text = await asyncio.shield(admin.load(body) if action == "load" else admin.unload(body))
        return PlainTextResponse(text)

    @app.post("/v1/load_lora_adapter")
    async def http_load_lora(self, request: Request) -> Response:
        """Load a LoRA adapter at run time (vLLM's endpoint and body: `lora_name`,
        `lora_path`; `model` names the base when several allow it): 200 with vLLM's success
        text, or an OpenAI error (`router.lora_admin`)."""
        return await self._guarded("LoRA load", request, self._lora("load", request))

    @app.post("/v1/unload_lora_adapter")
    async def http_unload_lora(self, request: Request) -> Response:
        """Unload a runtime-loaded LoRA adapter (`lora_name`); running requests finish."""
        return await self._guarded("LoRA unload", request, self._lora("unload", request))

    @app.get("/metrics")
    async def http_metrics(self, request: Request) -> Response:
        """Routing counters and the engine metrics of every live replica of every model
        (Prometheus text; replicas told apart by the `replica` label)."""
        denied = self._denied(request)
        if denied is not None:
            return denied
        metrics = self.gateway.metrics
        engine = await replica_expositions(
            self.gateway.caller.handles, self.config.health_probe_timeout_s
        )
        return Response(metrics.render(engine), media_type=metrics.content_type)

    @app.get("/health")
    async def health(self) -> Response:
        """The router's view of its models: 200 while at least one can serve, else 503.

        Body: `status` (`ok`: all serve; `degraded`: some are starting or down; `unavailable`:
        none can serve yet), `models`, `starting` (deployments with no running replica yet),
        `down` (model -> reason) and `replicas` (model -> replicas the Serve controller last
        reported running, `null` before its first report; 0 for a model scaled to zero, which
        counts as serving: a call starts a replica) and `batch_limits` (model -> replica ->
        the `max_num_seqs` / `max_num_batched_tokens` its engine admits by now, as its last
        metrics push said: with `engine.slo` they move, `router.replica_metrics.batch_limits`).
        """
        caller = self.gateway.caller
        down, starting = caller.unavailable(), caller.starting()
        serving = set(caller.handles) - set(down) - set(starting)
        status = "ok" if not down and not starting else "degraded" if serving else "unavailable"
        body = {"status": status, "models": sorted(caller.handles), "starting": starting}
        body["down"] = down
        body["replicas"] = {m: caller.deployments.get(m).replicas for m in sorted(caller.handles)}
        pushed = await replica_expositions(caller.handles, self.config.health_probe_timeout_s)
        body["batch_limits"] = batch_limits(pushed)
        return JSONResponse(body, status_code=503 if status == "unavailable" else 200)
