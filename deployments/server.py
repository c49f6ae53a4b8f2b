"""The Ray Serve deployment that owns one engine replica for one model.

Methods return protocol objects, never raise for a bad request: a user error comes back as an
`ErrorResponse` (non-streamed) or as the first item of the stream, so the router can answer
with a real 4xx before any SSE byte is sent.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from ray import serve

from configs.envs import log_level
from configs.model_config import ModelDeploymentConfig
from deployments.chat import ChatHandler, ChatSettings
from deployments.chat_template import ChatTemplate
from deployments.completions import CompletionHandler
from deployments.protocol.errors import ErrorResponse, OpenAIError
from deployments.protocol.requests import ChatCompletionRequest, CompletionRequest
from deployments.protocol.validation import parse_request
from deployments.structured_output import GrammarFactory
from deployments.tokenizer import load_tokenizer
from deployments.toolcalls.registry import DEFAULT_PARSER_BY_FAMILY
from engine.async_engine import AsyncEngine
from engine.llm_engine import EngineStats, LLMEngine
from engine.metrics import EngineMetrics

logger = logging.getLogger(__name__)

Req = TypeVar("Req", ChatCompletionRequest, CompletionRequest)


async def _guarded(stream: AsyncIterator[BaseModel]) -> AsyncIterator[BaseModel | ErrorResponse]:
    """Relay a stream; a failure mid-stream becomes a final `ErrorResponse` item."""
    try:
        async for item in stream:
            yield item
    except OpenAIError as exc:
        yield exc.response()
    except Exception as exc:  # reported to this client; the replica keeps serving
        logger.exception("stream failed")
        yield OpenAIError(f"internal error: {exc!r}", status_code=500).response()


async def _single(item: ErrorResponse) -> AsyncIterator[ErrorResponse]:
    yield item


def _tool_parser(config: ModelDeploymentConfig, template: ChatTemplate) -> str:
    """The configured parser; else the family's when its own template renders tools; else
    `hermes`, the format of the shipped fallback template."""
    if config.tool_parser:
        return config.tool_parser
    if template.native_tools and config.family in DEFAULT_PARSER_BY_FAMILY:
        return DEFAULT_PARSER_BY_FAMILY[config.family]
    return "hermes"


@serve.deployment
class ModelServer:
    """One replica: tokenizer + engine for `config.model_id`.

    Args:
        config: the model deployment config (a dict or the pydantic model).
    """

    def __init__(self, config: ModelDeploymentConfig | dict[str, Any]) -> None:
        logging.basicConfig(level=log_level())  # start-up figures (KV budget) reach the log
        self.config = ModelDeploymentConfig.model_validate(config)
        checkpoint = self.config.source.resolve()
        self.tokenizer = load_tokenizer(checkpoint)
        self.metrics = EngineMetrics(self.config.model_id)
        self.engine = AsyncEngine(
            lambda: LLMEngine(
                checkpoint,
                self.config.engine,
                self.config.tensor_parallel_size,
                self.config.expert_parallel,
            ),
            self.metrics,
        )
        cfg = self.config
        template = ChatTemplate(self.tokenizer, cfg.tool_chat_template)
        settings = ChatSettings(cfg.model_id, _tool_parser(cfg, template), cfg.strict_tool_history)
        grammars = GrammarFactory(self.tokenizer, self.engine.engine.vocab_size)
        self.chat_handler = ChatHandler(self.engine, self.tokenizer, template, grammars, settings)
        self.completion_handler = CompletionHandler(self.engine, self.tokenizer, cfg.model_id)

    async def _serve(
        self,
        request: Req | dict[str, Any],
        model: type[Req],
        complete: Callable[[Req], Awaitable[BaseModel]],
        stream: Callable[[Req], AsyncIterator[BaseModel]],
    ) -> Any:
        try:
            req = parse_request(model, request)
            if req.stream:
                return _guarded(stream(req))
            return await complete(req)
        except OpenAIError as exc:
            err = exc.response()
        except ValidationError as exc:  # e.g. a validator raised on a nested field
            err = OpenAIError(str(exc)).response()
        if isinstance(request, dict) and request.get("stream") or getattr(request, "stream", False):
            return _single(err)
        return err

    async def chat(self, request: ChatCompletionRequest | dict[str, Any]) -> Any:
        """Chat completion: a `ChatCompletion`, or (when `request.stream`) an async generator of
        `ChatCompletionChunk`; user errors as `ErrorResponse` (first stream item)."""
        h = self.chat_handler
        return await self._serve(request, ChatCompletionRequest, h.complete, h.stream)

    async def completions(self, request: CompletionRequest | dict[str, Any]) -> Any:
        """Legacy completion: a `Completion` or a stream of them; errors as for `chat`."""
        h = self.completion_handler
        return await self._serve(request, CompletionRequest, h.complete, h.stream)

    def info(self) -> dict[str, Any]:
        """Model id and context length, for `/v1/models` and routing."""
        return {"id": self.config.model_id, "max_model_len": self.engine.max_model_len}

    def stats(self) -> EngineStats:
        """The engine's current load."""
        return self.engine.stats()

    def metrics_text(self) -> bytes:
        """This replica's Prometheus exposition (vLLM metric names, `model_name` label)."""
        return self.metrics.exposition()

    def check_health(self) -> None:
        """Ray Serve health probe: the engine thread must be alive.

        Raises:
            RuntimeError: the engine loop died.
        """
        if not self.engine.alive():
            raise RuntimeError("engine loop is not running")

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()
