"""The engine as a model replica sees it: the seam between the replica and `engine/`.

The handlers (`deployments.handlers`), the replica's LoRA glue and the Serve deployment
(`deployments.server`) are written against `EngineClient`, never against a concrete engine.
`engine.async_engine.AsyncEngine` (driving `LLMEngine` on a thread of the replica) and
`engine.process_engine.ProcessEngine` (driving it in a child process, `engine_process: true`)
satisfy it structurally; a unit test passes a scripted client that yields `RequestOutput`s without
a model or Ray (`tests/deployments/scripted_client.py`).
"""

from __future__ import annotations

from typing import Protocol

from engine.llm_engine import EngineStats
from engine.multimodal.inputs import MediaItem
from engine.outputs import RequestOutput
from engine.request_stats import SampleGroup
from engine.sampling_params import SamplingParams


class OutputStream(Protocol):
    """The outputs of one admitted request, until the one with `finished` set.

    A request that fails in the engine ends with an output whose `error` (and `error_kind`) is
    set. Closing the stream before its last output aborts the request, which frees what it
    holds in the engine.
    """

    def __aiter__(self) -> OutputStream:
        """The stream itself."""
        ...

    async def __anext__(self) -> RequestOutput:
        """The request's next output (one engine step's tokens).

        Raises:
            StopAsyncIteration: after the finished output, or once closed.
        """
        ...

    async def aclose(self) -> None:
        """Abort the request unless it has finished."""
        ...


class EngineClient(Protocol):
    """What a model replica uses of its engine.

    The replica validates every request (context length, token ids, LoRA adapter) before
    `add`: the engine's own checks are invariants, not request errors.
    """

    @property
    def max_model_len(self) -> int:
        """Context length in tokens (prompt and output together)."""
        ...

    @property
    def vocab_size(self) -> int:
        """Width of the model's logits: every valid token id is below it."""
        ...

    async def add(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        group: SampleGroup | None = None,
        media: tuple[MediaItem, ...] = (),
    ) -> OutputStream:
        """Queue a request; return once the engine holds it.

        Args:
            request_id: unique id, which the engine's log lines name.
            prompt_token_ids: the prompt as the engine prefills it.
            params: how to sample, and when to stop.
            group: the sample group of one prompt sampled several times (OpenAI `n`), for
                the metrics; None for a prompt sampled once.
            media: the prompt's images and audio clips, each over its run of placeholder
                tokens in `prompt_token_ids` (`engine.multimodal.inputs.MediaItem`); empty
                for a text prompt.

        Raises:
            engine.request_stream.EngineDead: the engine loop is not running.
            engine.request_stream.RequestRejected: the engine refused the request.
        """
        ...

    async def load_lora(self, name: str, path: str) -> None:
        """Load the LoRA adapter at `path` under `name`.

        Raises:
            ValueError: the adapter is refused (the message names what is wrong).
        """
        ...

    async def unload_lora(self, name: str) -> None:
        """Unload the LoRA adapter `name`.

        Raises:
            ValueError: unknown adapter, or requests that use it are queued or running.
        """
        ...

    def dead_reason(self) -> str | None:
        """Why the engine cannot serve (its loop ended, or a step stalled); None while it can."""
        ...

    def stats(self) -> EngineStats:
        """Load figures as of the last engine step."""
        ...

    def shutdown(self) -> None:
        """Stop the engine; outstanding requests end with finish reason `abort`."""
        ...
