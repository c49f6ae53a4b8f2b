"""The router's model deployments: their handles, capabilities, load and health, and one call.

Every call is counted in flight while it runs and bounded in time: when no answer (the first
stream item, or the whole non-streamed response) has come after `first_token_timeout_s`, the
model is probed and the call ends unless the probe succeeds, and no call waits longer than
`response_timeout_s`; while the Serve controller reports the model's deployment as still
starting, or scaled to zero (`router.deployment_status`), or reports it serving while this
router's calls in flight there take every slot of its replicas (a probe would queue), the call
waits without probing. The policy skips a deployment reported failed, and one still starting
while another candidate serves.

A failed call is classified, and only replica faults touch health:
- *saturated*: Ray's `BackPressureError` (the handle's `max_queued_requests` is exceeded) or
  the router's own limit;
- *down* (a replica fault): a first-item timeout, or a replica that died or cannot be reached
  (`RayActorError`, `ReplicaUnavailableError`, ...); the model is marked down until a probe
  succeeds (`router.health`);
- *failed*: the replica's method raised for this request (`RayTaskError`): the replica lives,
  so health is unchanged; the request ends with an opaque 500.
A started stream that yields nothing for `inter_token_timeout_s` is cancelled (the replica aborts
the engine request and frees its KV blocks) and ends with an error event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel
from ray.exceptions import RayActorError, RaySystemError, RayTaskError
from ray.serve.exceptions import (
    BackPressureError,
    DeploymentUnavailableError,
    ReplicaUnavailableError,
)
from ray.serve.handle import DeploymentHandle, DeploymentResponseGenerator

from configs.model_config import RouterAppConfig
from configs.policy_config import ModelCapabilities
from deployments.protocol.preprocess import PreprocessPlan
from deployments.protocol.request_id import current_request_id
from router.adapter_index import AdapterIndex
from router.deployment_status import DeploymentStatusView
from router.health import HealthView
from router.http_errors import mid_stream_error
from router.load import LoadTracker, ModelLimits
from router.policy import ModelState

logger = logging.getLogger(__name__)

FailureKind = Literal["saturated", "down", "failed"]

# Raised by a handle call when no replica could take or finish it: replica faults.
_REPLICA_FAULTS: tuple[type[BaseException], ...] = (
    RayActorError,
    RaySystemError,
    ReplicaUnavailableError,
    DeploymentUnavailableError,
    TimeoutError,
)


def _replica_fault(exc: Exception) -> bool:
    """Whether a failed call says the replica is at fault (not this one request)."""
    if isinstance(exc, RayTaskError):  # the method raised: look at what it raised
        return isinstance(exc.cause, _REPLICA_FAULTS)
    return isinstance(exc, _REPLICA_FAULTS)


class CallFailed(Exception):
    """A model did not answer a call.

    Attributes:
        model: The model id.
        kind: `saturated` (over its queue limit), `down` (a replica fault or a timeout; now
            marked down) or `failed` (the replica raised for this request; health unchanged).
    """

    def __init__(self, model: str, kind: FailureKind, detail: str) -> None:
        super().__init__(f"{model}: {kind} ({detail})")
        self.model = model
        self.kind = kind


class ModelStream:
    """A stream from one model whose first item has arrived.

    Args:
        first: The first item (a chunk, or an `ErrorResponse`).
        response: The handle's stream, for the remaining items.
        done: Called once when the stream ends, fails or is closed.
    """

    def __init__(
        self,
        model: str,
        first: BaseModel,
        response: DeploymentResponseGenerator,
        done: Callable[[], None],
        inter_token_timeout_s: float,
    ) -> None:
        self.model = model
        self.first = first
        self._response = response
        self._done: Callable[[], None] | None = done
        self._timeout_s = inter_token_timeout_s

    async def items(self) -> AsyncGenerator[BaseModel | bytes, None]:
        """The first item, then the rest; a failure or a stall mid-stream becomes a final
        error item (and the model's request is cancelled)."""
        rid = current_request_id()
        try:
            yield self.first
            while True:
                try:
                    item = await asyncio.wait_for(anext(self._response), self._timeout_s)
                except StopAsyncIteration:
                    return
                yield item
        except asyncio.TimeoutError:
            logger.warning("request %s: %s sent nothing for %s s", rid, self.model, self._timeout_s)
            yield mid_stream_error(self.model, f"no output for {self._timeout_s} s")
        except Exception:  # reported to the client as the stream's last event
            logger.exception("request %s: stream from %s failed mid-stream", rid, self.model)
            yield mid_stream_error(self.model, f"the stream broke (request {rid})")
        finally:
            self.close()

    def close(self) -> None:
        """Stop the stream (the model replica aborts the request) and stop counting it."""
        if self._done is not None:
            # cancelling reaches the model replica, which aborts and frees the KV blocks
            self._response.cancel()
            self._done()
            self._done = None


class ModelPool:
    """The served models as the router sees them.

    A LoRA adapter (`router.adapter_index`) is a model of its own for the policy, with its
    base model's capabilities, health and load: its calls go to its base's deployment with the
    adapter's `LoraSpec`, and count against the base's limits.

    Args:
        config: The application config.
        handles: Model id -> handle of its `ModelServer` deployment.
    """

    def __init__(self, config: RouterAppConfig, handles: dict[str, DeploymentHandle]) -> None:
        self.config = config
        self.handles = handles
        self.configs = {m.model_id: m for m in config.models}
        assert set(handles) == set(self.configs), f"handles {sorted(handles)} != config models"
        self.learned: dict[str, int] = {}
        self.capabilities: dict[str, ModelCapabilities] = config.capabilities()
        self.adapters = AdapterIndex(config, self._refresh_capabilities)
        self.health = HealthView(self.probe, config.health_cooldown_s)
        self.deployments = DeploymentStatusView(handles, config.deployment_status_poll_s)
        self.load = LoadTracker(
            {m.model_id: ModelLimits.from_options(m.deployment) for m in config.models},
            lambda model: self.deployments.get(model).replicas,
        )
        self.first_token_s = config.first_token_timeout_s

    async def start(self, lora_registry: DeploymentHandle | None = None) -> None:
        """Read the deployments' state (then keep polling it), and the registry of runtime LoRA
        adapters if there is one; probe the models whose context length only their replica
        knows."""
        await self.deployments.start()
        if lora_registry is not None:
            self.adapters.follow(lora_registry, self.config.deployment_status_poll_s)
        for model in self.handles:
            if self.context_length(model) is None:
                self.health.mark_down(model, "context length not reported yet")

    def base(self, model: str) -> str:
        """The model id whose deployment serves `model` (itself, or a LoRA adapter's base)."""
        return self.adapters.base(model) or model

    def serves(self, model: str) -> bool:
        """Whether `model` is a served model id or a LoRA adapter (not an alias)."""
        return model in self.handles or self.adapters.base(model) is not None

    def _refresh_capabilities(self) -> None:
        caps = self.config.capabilities(self.learned)
        for name, base in self.adapters.runtime().items():
            caps[name] = caps[base]
        self.capabilities = caps

    def context_length(self, model: str) -> int | None:
        """`engine.max_model_len`, else what a replica reported; None until one does (a LoRA
        adapter's is its base model's)."""
        base = self.base(model)
        return self.configs[base].engine.max_model_len or self.learned.get(base)

    def states(self, starting_ok: bool) -> dict[str, ModelState]:
        """Model id (LoRA adapters included) -> health and load, for the policy.

        Args:
            starting_ok: count a model whose deployment is still starting as healthy (a call
                then waits for its replica); False leaves it out.
        """
        states = {m: self.load.state(m, self.healthy(m, starting_ok)) for m in self.handles}
        states.update({name: states[base] for name, base in self.adapters.bases().items()})
        return states

    def healthy(self, model: str, starting_ok: bool) -> bool:
        """Not marked down by a failed call, its deployment not reported failed and, unless
        `starting_ok`, not still starting."""
        unfit = {"failed"} if starting_ok else {"failed", "starting"}
        return self.health.healthy(model) and self.deployments.get(model).phase not in unfit

    def unavailable(self) -> dict[str, str]:
        """Model id -> why it cannot serve now (marked down, or its deployment failed)."""
        down = dict(self.health.down)
        for model in self.handles:
            state = self.deployments.get(model)
            if state.phase == "failed":
                down.setdefault(model, f"deployment failed: {state.message}"[:300])
        return down

    def starting(self) -> list[str]:
        """Models whose deployment has no running replica yet."""
        return [m for m in self.handles if self.deployments.get(m).phase == "starting"]

    async def probe(self, model: str) -> None:
        """Ask `model` for its `info` within `health_probe_timeout_s`; learn its context length.

        A probe refused by the handle's `max_queued_requests` (`BackPressureError`) finds the
        model busy, not down: it passes once the context length is known.

        Raises:
            Exception: The call failed or timed out.
        """
        response = self.handles[model].info.remote()
        try:
            info = await asyncio.wait_for(response, self.config.health_probe_timeout_s)
        except asyncio.TimeoutError:
            response.cancel()
            raise
        except BackPressureError:
            if self.context_length(model) is None:
                raise
            return
        if model not in self.learned:
            self.learned[model] = int(info["max_model_len"])
            self._refresh_capabilities()

    async def unary(
        self, model: str, method: str, request: BaseModel, plan: PreprocessPlan | None = None
    ) -> BaseModel:
        """One non-streamed call: the response, or an `ErrorResponse` the model returned
        (`model`: a served model id or a LoRA adapter; `plan`: the replica's part of
        preprocessing, for chat).

        Raises:
            CallFailed: Saturated, or down (the model, or an adapter's base, is now marked
                down).
        """
        base = self.base(model)
        self._admit(base)
        response = getattr(self.handles[base], method).remote(request, **self._extra(model, plan))
        try:
            result: BaseModel = await self._answer(base, response, response.cancel)
            return result
        finally:
            self.load.release(base)

    async def stream(
        self,
        model: str,
        method: str,
        request: BaseModel,
        sse: bool = False,
        plan: PreprocessPlan | None = None,
    ) -> ModelStream:
        """Start one streamed call and wait for its first item (`sse`: later items are SSE
        bytes, see `deployments.sse_relay`; `plan` as for `unary`).

        Raises:
            CallFailed: Saturated, or down (the model is now marked down).
        """
        base = self.base(model)
        self._admit(base)
        handle = self.handles[base].options(stream=True)
        response = getattr(handle, method).remote(request, sse=sse, **self._extra(model, plan))
        try:
            first: BaseModel = await self._answer(base, anext(response), response.cancel)
        except BaseException:
            self.load.release(base)
            raise
        return ModelStream(
            model,
            first,
            response,
            lambda: self.load.release(base),
            self.config.inter_token_timeout_s,
        )

    def _extra(self, model: str, plan: PreprocessPlan | None) -> dict[str, Any]:
        """The keyword arguments of a call beyond the request: the preprocessing plan, and the
        adapter's `LoraSpec` when `model` is a LoRA adapter."""
        extra: dict[str, Any] = {} if plan is None else {"preprocess": plan}
        spec = self.adapters.spec(model)
        if spec is not None:
            extra["lora"] = spec
        return extra

    def _admit(self, model: str) -> None:
        if self.load.saturated(model):
            count = self.load.counts[model]
            raise CallFailed(model, "saturated", f"{count} requests in flight from this router")
        self.load.acquire(model)

    async def _answer(self, model: str, pending: Awaitable[Any], cancel: Callable[[], None]) -> Any:
        """Wait for a call's answer, checking every `first_token_timeout_s` that `model` lives.

        A deployment with no live replica never answers (Ray Serve's handle waits for one), so
        a wait past `first_token_timeout_s` is followed by a probe; a failed probe ends the call
        as *down*, a good one waits again, up to `response_timeout_s` in all.
        """
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(pending)
        deadline = loop.time() + self.config.response_timeout_s
        try:
            while True:
                left = deadline - loop.time()
                done, _ = await asyncio.wait({task}, timeout=min(self.first_token_s, left))
                if done:
                    return task.result()
                if left <= self.first_token_s:
                    raise TimeoutError(f"no answer in {self.config.response_timeout_s} s")
                if self.deployments.get(model).phase in ("starting", "idle"):
                    continue  # a replica is loading, or will be: the handle queues the call
                if self.load.full(model) and self.deployments.get(model).phase == "serving":
                    continue  # every slot busy (a probe would queue) on replicas that the
                    # controller's own health checks report live
                try:
                    await self.probe(model)
                except Exception as exc:
                    logger.warning("probe of %s failed: %r", model, exc)
                    raise TimeoutError(
                        f"no answer in {self.first_token_s} s and the health probe failed"
                    ) from exc
        except BackPressureError as exc:
            raise CallFailed(model, "saturated", exc.message) from exc
        except Exception as exc:
            cancel()
            rid = current_request_id()
            if not _replica_fault(exc):
                logger.error("request %s: %s raised for this request: %s", rid, model, exc)
                raise CallFailed(model, "failed", f"the call raised (request {rid})") from exc
            detail = (
                str(exc) if isinstance(exc, TimeoutError) else "its replica died or is unreachable"
            )
            logger.warning("request %s: %s is down: %r", rid, model, exc)
            self.health.mark_down(model, detail[:300])
            raise CallFailed(model, "down", detail[:300]) from exc
        except asyncio.CancelledError:  # our caller went away: so does the model's request
            cancel()
            raise
        finally:
            task.cancel()  # no-op once done
