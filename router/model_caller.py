"""Calls to the model deployments: admission, the call and its timeouts, health and load.

Every call is counted in flight while it runs and bounded in time: when no answer (the first
stream item, or the whole non-streamed response) has come after `first_token_timeout_s`, the
model is probed and the call ends unless the probe succeeds, and no call waits longer than
`response_timeout_s`; while the Serve controller reports the model's deployment as still
starting, or scaled to zero (`router.deployment_status`), or reports it serving while this
router's calls in flight there take every slot of its replicas (a probe would queue), the call
waits without probing. The policy skips a deployment reported failed, and one still starting
while another candidate serves.

Before the call, `router.admission` gives it a slot of the model at once, or queues it fairly
in this router (by priority, then round-robin across tenants) while every slot is taken.

A failed call is classified (`router.call_failures`), and only replica faults mark the model
down. A started stream is a `router.model_stream.ModelStream`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel
from ray.serve.exceptions import BackPressureError
from ray.serve.handle import DeploymentHandle

from configs.model_config import RouterAppConfig
from deployments.protocol.preprocess_plan import PreprocessPlan
from deployments.protocol.request_id import current_request_id
from router.admission import Admission
from router.call_context import DEFAULT_CONTEXT, CallContext
from router.call_failures import CallFailed, replica_fault
from router.deployment_status import DeploymentStatusView
from router.health import HealthView
from router.load import LoadTracker, ModelLimits
from router.metrics import RouterMetrics
from router.model_catalog import ModelCatalog
from router.model_stream import ModelStream
from router.policy import ModelState
from router.priorities import level_names
from router.replica_router import SESSION_KWARG

logger = logging.getLogger(__name__)


class ModelCaller:
    """Calls the served models and keeps this router's view of their health and load.

    A LoRA adapter's calls go to its base model's deployment with the adapter's `LoraSpec`, and
    count against the base's limits; the adapter shares its base's health and load.

    Args:
        config: The application config.
        handles: Model id -> handle of its `ModelServer` deployment.
        catalog: The models' facts (bases of adapters, context lengths, learned here).
        metrics: Where admission counts queue time and shed requests (None: not counted).
    """

    def __init__(
        self,
        config: RouterAppConfig,
        handles: dict[str, DeploymentHandle],
        catalog: ModelCatalog,
        metrics: RouterMetrics | None = None,
    ) -> None:
        assert set(handles) == set(catalog.configs), f"handles {sorted(handles)} != config models"
        self.config = config
        self.handles = handles
        self.catalog = catalog
        self.health = HealthView(self.probe, config.health_cooldown_s)
        self.deployments = DeploymentStatusView(handles, config.deployment_status_poll_s)
        self.load = LoadTracker(
            {m.model_id: ModelLimits.from_options(m.deployment) for m in config.models},
            lambda model: self.deployments.get(model).replicas,
        )
        priorities = config.priorities
        self.admission = Admission(
            self.load,
            priorities.weight if priorities is not None else lambda _: 1,
            level_names(priorities),
            config.response_timeout_s,
            metrics,
            priorities.reserved_slots if priorities is not None else 0,
        )
        self.first_token_s = config.first_token_timeout_s

    async def start(self) -> None:
        """Read the deployments' state (then keep polling it); mark down, until a probe
        succeeds, the models whose context length only their replica knows."""
        await self.deployments.start()
        for model in self.handles:
            if self.catalog.context_length(model) is None:
                self.health.mark_down(model, "context length not reported yet")

    def states(self, starting_ok: bool) -> dict[str, ModelState]:
        """Model id (LoRA adapters included) -> health and load, for the policy.

        Args:
            starting_ok: count a model whose deployment is still starting as healthy (a call
                then waits for its replica); False leaves it out.
        """
        states = {m: self.admission.state(m, self.healthy(m, starting_ok)) for m in self.handles}
        states.update({name: states[base] for name, base in self.catalog.adapters.bases().items()})
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
            if self.catalog.context_length(model) is None:
                raise
            return
        self.catalog.learn_context_length(model, int(info["max_model_len"]))

    async def unary(
        self,
        model: str,
        method: str,
        request: BaseModel,
        plan: PreprocessPlan | None = None,
        context: CallContext = DEFAULT_CONTEXT,
    ) -> BaseModel:
        """One non-streamed call: the response, or an `ErrorResponse` the model returned
        (`model`: a served model id or a LoRA adapter; `plan`: the replica's part of
        preprocessing, for chat; `context`: who the call is for).

        Raises:
            CallFailed: Saturated (shed from this router's queue, no slot in time, or refused
                by Ray's handle), or down (the model, or an adapter's base, is now marked
                down).
        """
        base = self.catalog.base(model)
        await self.admission.admit(base, context)
        try:
            extra = self._extra(model, plan, context)
            response = getattr(self.handles[base], method).remote(request, **extra)
            result: BaseModel = await self._answer(base, response, response.cancel)
            return result
        finally:
            self.admission.release(base)

    async def stream(
        self,
        model: str,
        method: str,
        request: BaseModel,
        sse: bool = False,
        plan: PreprocessPlan | None = None,
        context: CallContext = DEFAULT_CONTEXT,
    ) -> ModelStream:
        """Start one streamed call and wait for its first item (`sse`: later items are SSE
        bytes, see `deployments.streaming.sse_relay`; `plan` and `context` as for `unary`).

        Raises:
            CallFailed: Saturated or down, as for `unary`.
        """
        base = self.catalog.base(model)
        await self.admission.admit(base, context)
        try:
            # by value: each item goes over Serve's gRPC channel between the two replicas
            # instead of becoming a Ray object the router then fetches (Ray's throughput-
            # optimized data plane; c16 +20 % tok/s, router CPU per token -30 %, docs/benchmarks.md)
            handle = self.handles[base].options(stream=True, _by_reference=False)
            extra = self._extra(model, plan, context)
            if sse and context.timing:
                extra["timing"] = True
            response = getattr(handle, method).remote(request, sse=sse, **extra)
            first: BaseModel = await self._answer(base, anext(response), response.cancel)
        except BaseException:
            self.admission.release(base)
            raise
        return ModelStream(
            model,
            first,
            response,
            lambda: self.admission.release(base),
            self.config.inter_token_timeout_s,
            sse and context.timing,
        )

    def _extra(
        self, model: str, plan: PreprocessPlan | None, context: CallContext
    ) -> dict[str, Any]:
        """The keyword arguments of a call beyond the request: the preprocessing plan, the
        adapter's `LoraSpec` when `model` is a LoRA adapter, and the session key (read by the
        deployment's request router, `router.replica_router`, not by the replica)."""
        extra: dict[str, Any] = {} if plan is None else {"preprocess": plan}
        base = self.catalog.configs[self.catalog.base(model)]
        if context.session is not None and base.routing.session_affinity:
            extra[SESSION_KWARG] = context.session
        spec = self.catalog.adapters.spec(model)
        if spec is not None:
            extra["lora"] = spec
        return extra

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
            if not replica_fault(exc):
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
