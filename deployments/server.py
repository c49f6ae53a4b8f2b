"""The Ray Serve deployment that owns one engine replica for one model.

Methods return protocol objects and never raise for a request: any failure comes back as an
`ErrorResponse` (non-streamed) or as the first item of the stream, so the router can answer
with a real status before any SSE byte is sent, and tell request errors (4xx, `internal_error`)
from engine faults (`engine_error`, `engine_unavailable`: see `deployments.protocol.errors`).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from ray import serve
from ray.serve.handle import DeploymentHandle

from configs.envs import log_level
from configs.model_config import ModelDeploymentConfig
from configs.monitoring import MonitoringConfig
from deployments.engine_client import EngineClient
from deployments.handlers.chat import ChatHandler, ChatSettings
from deployments.handlers.completions import CompletionHandler
from deployments.handlers.preparation import Preparer
from deployments.handlers.tokenize import TokenizeHandler
from deployments.lora_adapters import ReplicaAdapters
from deployments.media.loader import load_media_loader
from deployments.metrics.push import MetricsPusher
from deployments.prompting.chat_template import ChatTemplate
from deployments.prompting.structured_output import GrammarFactory
from deployments.prompting.tokenizer import load_tokenizer
from deployments.protocol.error_stream import end_on_failure, error_stream
from deployments.protocol.errors import (
    ErrorResponse,
    OpenAIError,
    engine_unavailable,
    internal_error,
)
from deployments.protocol.lora import LoraSpec
from deployments.protocol.preprocess_plan import PreprocessPlan
from deployments.protocol.request_id import current_request_id
from deployments.protocol.requests import ChatCompletionRequest, CompletionRequest
from deployments.protocol.responses import RouterNotes
from deployments.protocol.tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
    TokenizeResponse,
)
from deployments.protocol.validation import parse_request, wants_stream
from deployments.streaming.sse_relay import sse_batches
from engine.async_engine import AsyncEngine
from engine.llm_engine import EngineStats, LLMEngine
from engine.metrics import EngineMetrics
from engine.process_engine import ProcessEngine

logger = logging.getLogger(__name__)

Req = TypeVar("Req", ChatCompletionRequest, CompletionRequest)
T = TypeVar("T")
Handler = Callable[[Req, str | None], Awaitable[Any]]
"""A handler's `complete` or `stream`: (request, LoRA adapter or None) -> its answer."""


def engine_class(path: str | None) -> type[LLMEngine]:
    """The engine class a replica drives: `LLMEngine`, or the `module:Class` at `path`.

    Raises:
        ValueError: `path` is not `module:Class`, or names nothing importable.
    """
    if path is None:
        return LLMEngine
    module, sep, name = path.partition(":")
    try:
        cls = getattr(importlib.import_module(module), name) if sep else None
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"engine_class {path!r} cannot be imported: {exc}") from None
    if not isinstance(cls, type):
        raise ValueError(f"engine_class {path!r} is not 'module:Class'")
    return cls


@serve.deployment
class ModelServer:
    """One replica: tokenizer + engine for `config.model_id`.

    Args:
        config: the model deployment config (a dict or the pydantic model).
        metrics_board: handle of the application's `MetricsBoard`, which this replica reports
            its engine metrics to (None: not reported; `metrics_text` still serves them).
        monitoring: how often to report (`MonitoringConfig` or its dict; default settings if
            None).
        lora_registry: handle of the application's `LoraRegistry` (`router.lora_registry`):
            with `engine.lora.allow_runtime_lora`, the replica reconciles its runtime-loaded
            adapters with it every `engine.lora.runtime_sync_s`.
    """

    async def __init__(  # type: ignore[misc]  # Ray Serve awaits an async constructor
        self,
        config: ModelDeploymentConfig | dict[str, Any],
        metrics_board: DeploymentHandle | None = None,
        monitoring: MonitoringConfig | dict[str, Any] | None = None,
        lora_registry: DeploymentHandle | None = None,
    ) -> None:
        logging.basicConfig(level=log_level())  # start-up figures (KV budget) reach the log
        self.config = ModelDeploymentConfig.model_validate(config)
        checkpoint = self.config.source.resolve()
        self.tokenizer = load_tokenizer(checkpoint)
        cfg = self.config
        cls = engine_class(cfg.engine_class)
        build = functools.partial(
            cls, checkpoint, cfg.engine, cfg.tensor_parallel_size, cfg.expert_parallel
        )
        front = ProcessEngine if cfg.engine_process else AsyncEngine
        engine = front(build, None, cfg.engine_stall_timeout_s)
        try:
            self._set_up(engine, checkpoint, metrics_board, monitoring, lora_registry)
        except BaseException:  # a replica that fails to start leaves no engine (core) behind
            engine.shutdown()
            raise

    def _set_up(
        self,
        engine: AsyncEngine | ProcessEngine,
        checkpoint: str,
        metrics_board: DeploymentHandle | None,
        monitoring: MonitoringConfig | dict[str, Any] | None,
        lora_registry: DeploymentHandle | None,
    ) -> None:
        """Everything of the replica around its started engine (see the class's Args)."""
        cfg = self.config
        replica_id = serve.get_replica_context().replica_id.unique_id
        self.replica_id = replica_id
        spec = cfg.engine.speculative
        self.metrics = EngineMetrics(
            cfg.model_id,
            replica_id,
            engine.max_model_len,
            spec.num_speculative_tokens if spec is not None else 0,
        )
        engine.metrics = self.metrics  # its buckets needed the engine's max_model_len
        self.metrics.observe_step(engine.stats())  # the gauges from start-up: KV bytes, limits
        self.engine: EngineClient = engine
        template = ChatTemplate(self.tokenizer, cfg.tool_chat_template, cfg.family)
        settings = ChatSettings(cfg.model_id, cfg.tool_parser, cfg.strict_tool_history)
        grammars = GrammarFactory(self.tokenizer, self.engine.vocab_size)
        preparer = Preparer(cfg.prepare_timeout_s)
        media = load_media_loader(
            checkpoint, self.tokenizer, cfg.media, cfg.model_id, cfg.input_modalities
        )
        self.chat_handler = ChatHandler(
            self.engine, self.tokenizer, template, grammars, settings, preparer, media
        )
        self.completion_handler = CompletionHandler(
            self.engine, self.tokenizer, cfg.model_id, preparer
        )
        self.tokenize_handler = TokenizeHandler(self.chat_handler, preparer)
        self.adapters = ReplicaAdapters(self.engine, cfg.engine.lora, cfg.model_id)
        self.lora_sync: asyncio.Task[None] | None = None
        if lora_registry is not None and cfg.engine.lora and cfg.engine.lora.allow_runtime_lora:
            interval_s = cfg.engine.lora.runtime_sync_s
            self.lora_sync = asyncio.create_task(self._sync_adapters(lora_registry, interval_s))
        self.where = f"model {cfg.model_id}"
        self.batching_interval_s = cfg.stream_batching_interval_ms / 1000
        self.metrics_pusher = None
        if metrics_board is not None:  # last: a replica reports once it can serve
            interval_s = MonitoringConfig.model_validate(monitoring or {}).push_interval_s
            self.metrics_pusher = MetricsPusher(
                metrics_board, replica_id, cfg.model_id, self.metrics.exposition, interval_s
            )

    async def _sync_adapters(self, registry: DeploymentHandle, interval_s: float) -> None:
        """Reconcile the runtime-loaded adapters with the registry every `interval_s`."""
        while True:
            try:
                snapshot = await registry.snapshot.remote()
                await self.adapters.sync(snapshot.adapters)
            except Exception as exc:  # a registry restarting: try again next interval
                logger.warning("%s: LoRA registry sync failed: %s", self.where, exc)
            await asyncio.sleep(interval_s)

    async def _serve(
        self,
        what: str,
        request: Req | dict[str, Any],
        model: type[Req],
        complete: Handler[Req],
        stream: Handler[Req],
        sse: bool,
        lora: LoraSpec | None,
        timing: bool = False,
    ) -> Any:
        """One `what` request: a response or a stream; every failure becomes an `ErrorResponse`
        (see `_answer`; an engine that is not running is 503 `engine_unavailable`), the first
        item of a stream when the request streams. With `sse`, a stream's items after the first
        are SSE bytes (`deployments.streaming.sse_relay`), each event led by its timestamps with
        `timing` (`deployments.streaming.token_timing`). `lora`: the adapter it runs under
        (loaded first if this replica lacks it)."""

        async def run() -> Any:
            dead = self.engine.dead_reason()
            if dead is not None:
                raise engine_unavailable(dead)
            req = parse_request(model, request)  # the router's validated model passes as is
            adapter = await self.adapters.use(lora)
            if adapter is not None:
                self.metrics.count_lora_request(adapter)
            if req.stream:
                chunks = self._mark_first(await stream(req, adapter))
                items = end_on_failure(chunks, self.where)
                return sse_batches(items, self.batching_interval_s, timing) if sse else items
            return self._mark(await complete(req, adapter))

        result = await self._answer(what, run())
        if isinstance(result, ErrorResponse) and wants_stream(request):
            return error_stream(result)
        return result

    def _mark(self, answer: T) -> T:
        """`answer`, named as this replica's (`from_replica`) when it is a response."""
        if isinstance(answer, RouterNotes):
            answer.from_replica(self.replica_id)
        return answer

    async def _mark_first(self, items: AsyncIterator[T]) -> AsyncIterator[T]:
        """`items`, the first named as this replica's answer (the router's replica header)."""
        first = True
        async for item in items:
            yield self._mark(item) if first else item
            first = False

    async def chat(
        self,
        request: ChatCompletionRequest | dict[str, Any],
        sse: bool = False,
        preprocess: PreprocessPlan | None = None,
        lora: LoraSpec | None = None,
        session: str | None = None,
        timing: bool = False,
    ) -> Any:
        """Chat completion: a `ChatCompletion`, or (when `request.stream`) an async generator of
        `ChatCompletionChunk`; user errors as `ErrorResponse` (first stream item). `sse=True`
        (the router's HTTP path): after the first chunk, SSE bytes instead of chunk models.
        `preprocess`: the router's preprocessing plan (truncation; its report rides on the
        response or first chunk). `lora`: the LoRA adapter to run under (None: the base
        model); the response's `model` is then the adapter's id. `session`: the session key,
        read by the caller's request router (`router.replica_router`), not here. `timing`: with
        `sse`, lead each event with its timestamps (`deployments.streaming.token_timing`)."""
        h = self.chat_handler

        def complete(req: ChatCompletionRequest, adapter: str | None) -> Awaitable[Any]:
            return h.complete(req, preprocess, adapter)

        def stream(req: ChatCompletionRequest, adapter: str | None) -> Awaitable[Any]:
            return h.stream(req, preprocess, adapter)

        return await self._serve(
            "chat", request, ChatCompletionRequest, complete, stream, sse, lora, timing
        )

    async def completions(
        self,
        request: CompletionRequest | dict[str, Any],
        sse: bool = False,
        lora: LoraSpec | None = None,
        session: str | None = None,
        timing: bool = False,
    ) -> Any:
        """Legacy completion: a `Completion` or a stream of them; errors, `sse`, `lora`,
        `session` and `timing` as for `chat`."""
        h = self.completion_handler
        return await self._serve(
            "completions", request, CompletionRequest, h.complete, h.stream, sse, lora, timing
        )

    async def tokenize(
        self,
        request: TokenizeChatRequest | TokenizeCompletionRequest,
        preprocess: PreprocessPlan | None = None,
        lora: LoraSpec | None = None,
        session: str | None = None,
    ) -> TokenizeResponse | ErrorResponse:
        """`POST /tokenize`: the prompt's token ids as this model's engine would prefill them
        (`preprocess` and `session` as for `chat`; a LoRA adapter shares its base's prompt);
        errors as an `ErrorResponse`."""
        return await self._answer("tokenize", self.tokenize_handler.tokenize(request, preprocess))

    async def detokenize(
        self,
        request: DetokenizeRequest,
        lora: LoraSpec | None = None,
        session: str | None = None,
    ) -> DetokenizeResponse | ErrorResponse:
        """`POST /detokenize`: the text of token ids; errors as an `ErrorResponse` (`session`
        as for `chat`)."""

        async def run() -> DetokenizeResponse:
            return self.tokenize_handler.detokenize(request)

        return await self._answer("detokenize", run())

    async def _answer(self, what: str, work: Awaitable[T]) -> T | ErrorResponse:
        """`work`'s result, or its failure as an `ErrorResponse`: a request error (4xx) as it is,
        anything unexpected an opaque 500 `internal_error`, its traceback logged under the
        request id (the replica keeps serving)."""
        try:
            return await work
        except OpenAIError as exc:
            return exc.response()
        except Exception:
            rid = current_request_id()
            logger.exception("request %s: %s failed in %s", rid, what, self.where)
            return internal_error(rid, self.where).response()

    async def load_lora_adapter(self, name: str, path: str) -> ErrorResponse | None:
        """Load a runtime adapter on this replica (the router's check of a
        `POST /v1/load_lora_adapter` before it answers); None when loaded, else the 4xx
        `ErrorResponse` naming what is wrong (see `ReplicaAdapters.load`)."""
        try:
            await self.adapters.load(name, path)
        except OpenAIError as exc:
            return exc.response()
        return None

    def info(self) -> dict[str, Any]:
        """Model id and context length, for `/v1/models` and routing; the router's probe. Also
        the engine's admission limits now (`batch_limits`: `max_num_seqs`,
        `max_num_batched_tokens`) and, with `engine.slo`, its latency controller's figures
        (`slo`: `tpot_p90_s`, `ttft_p90_s`, `num_decreases`, `num_increases`; else None).

        Raises:
            RuntimeError: the engine loop is not running (the probe then fails).
        """
        self.check_health()
        info = {"id": self.config.model_id, "max_model_len": self.engine.max_model_len}
        return {**info, **self.engine.stats().batching()}

    def stats(self) -> EngineStats:
        """The engine's current load."""
        return self.engine.stats()

    def metrics_text(self) -> bytes:
        """This replica's Prometheus exposition (vLLM metric names; `model_name` and `replica`
        labels). The router reads every replica's from the metrics board instead."""
        return self.metrics.exposition()

    def check_health(self) -> None:
        """Ray Serve health probe: the engine loop must run and no step may be stalled.

        Raises:
            RuntimeError: the engine loop died or stalled (Serve then replaces the replica).
        """
        dead = self.engine.dead_reason()
        if dead is not None:
            raise RuntimeError(f"engine loop is not serving: {dead}")

    def __del__(self) -> None:
        sync = getattr(self, "lora_sync", None)
        if sync is not None:
            sync.cancel()
        pusher = getattr(self, "metrics_pusher", None)
        if pusher is not None:
            pusher.close()
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()
