"""Fallback across a decision's candidates, and the explainable outcome (`Routed`).

Candidates are tried in order. The next one is tried when a model is saturated, down (a replica
fault or a timeout before its first token), answered that its engine failed before the first
token (`engine_error`, `engine_unavailable`: the latter also marks it down), or rejected the
prompt as too long for its context (the router's prompt-length estimate only routes) while a
later candidate remains. A request error (4xx) or an unexpected failure while serving this one
request (`internal_error`, or a replica method that raised) is answered as it is: it would fail
anywhere, and it says nothing of the model's health. Nothing is retried after the first token
has gone to the client. When every candidate fails, the answer is 429 with `Retry-After` if any
was saturated, else 503.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from deployments.protocol.errors import (
    ENGINE_UNAVAILABLE,
    INTERNAL_ERROR,
    REPLICA_BUSY,
    ErrorResponse,
    internal_error,
)
from deployments.protocol.preprocess_plan import PREPROCESS_HEADER, PreprocessPlan, PreprocessReport
from deployments.protocol.request_id import current_request_id
from deployments.protocol.responses import RouterNotes
from router.call_context import DEFAULT_CONTEXT, CallContext
from router.call_failures import CallFailed
from router.http_errors import saturated_error, unavailable_error
from router.metrics import RouterMetrics
from router.model_caller import ModelCaller
from router.model_catalog import ModelCatalog
from router.model_stream import ModelStream
from router.policy import Decision

Delivery = Literal["unary", "chunks", "sse"]
"""How a model's answer comes back: one response, typed stream chunks, or relayed SSE bytes."""

RequestFor = Callable[[str, bool], tuple[BaseModel, PreprocessPlan | None]]
"""(model, fit_context) -> the request to send that model and the replica's preprocessing plan;
`fit_context`: no later candidate has a longer context, so truncation may fit this one's."""

MODEL_HEADER = "x-ascend-router-model"
RULE_HEADER = "x-ascend-router-rule"
FALLBACK_HEADER = "x-ascend-router-fallback"
REASON_HEADER = "x-ascend-router-reason"
REPLICA_HEADER = "x-ascend-router-replica"


@dataclass(frozen=True)
class Routed:
    """How one request was answered after a routing decision.

    Attributes:
        model: The model that answered; when none did, the last one tried.
        rule: What decided (`Decision.rule`).
        reason: Why (`Decision.reason`).
        fallback: Models tried before `model`, in order.
        result: The response or `ErrorResponse` (non-streamed; a 429 carries its
            `retry_after_s`), or the started stream.
        preprocess: What gateway preprocessing did to the request `model` answered.
        replica: The id of `model`'s replica that answered (`ReplicaID.unique_id`, the
            `replica` label of its engine metrics), if one did.
    """

    model: str
    rule: str
    reason: str
    fallback: tuple[str, ...]
    result: BaseModel | ModelStream
    preprocess: PreprocessReport | None = None
    replica: str | None = None

    @property
    def status(self) -> int:
        """The HTTP status of the answer."""
        first = self.result.first if isinstance(self.result, ModelStream) else self.result
        return first.status_code if isinstance(first, ErrorResponse) else 200

    def headers(self) -> dict[str, str]:
        """The decision headers, the replica and the preprocessing header (`Retry-After` comes
        with the error: `router.http_errors.error_json`)."""
        headers = {
            MODEL_HEADER: self.model,
            RULE_HEADER: self.rule,
            REASON_HEADER: self.reason.encode("ascii", "replace").decode(),
        }
        if self.fallback:
            headers[FALLBACK_HEADER] = ",".join(self.fallback)
        if self.replica is not None:
            headers[REPLICA_HEADER] = self.replica
        summary = self.preprocess.header() if self.preprocess is not None else None
        if summary is not None:
            headers[PREPROCESS_HEADER] = summary
        return headers


def _pass_reason(answer: BaseModel, last: bool) -> str | None:
    """Why a model's answer sends the request on to the next candidate, or None to keep it."""
    if not isinstance(answer, ErrorResponse) or answer.error.code == INTERNAL_ERROR:
        return None
    if answer.error.code == ENGINE_UNAVAILABLE:
        return "down"
    if answer.error.code == REPLICA_BUSY and not last:
        return "saturated"
    if answer.status_code >= 500:
        return "error"
    if answer.error.code == "context_length_exceeded" and not last:
        return "context"
    return None


def _longest_left(catalog: ModelCatalog, candidates: tuple[str, ...]) -> bool:
    """Whether no later candidate has a longer context than the first (an unknown context
    counts as the longest)."""
    first = catalog.context_length(candidates[0])
    if first is None:
        return True
    return all((catalog.context_length(m) or first + 1) <= first for m in candidates[1:])


async def dispatch(
    caller: ModelCaller,
    decision: Decision,
    method: str,
    request_for: RequestFor,
    delivery: Delivery,
    retry_after_s: int,
    metrics: RouterMetrics,
    context: CallContext = DEFAULT_CONTEXT,
) -> Routed:
    """Send a request to the first candidate that answers.

    Args:
        caller: Calls the models.
        decision: The policy's decision (candidates in order).
        method: `chat` or `completions`.
        request_for: The request (and preprocessing plan) to send each candidate.
        delivery: `unary` (one response), `chunks` (a stream of typed chunks) or `sse` (a
            stream whose items after the first are SSE bytes, for HTTP callers).
        retry_after_s: `Retry-After` seconds when every candidate is saturated.
        metrics: Where fallbacks are counted.
        context: Who the request is for (admission, replica choice).

    Returns:
        The outcome; its `result` is an `ErrorResponse` (429/503) when no candidate answered.
    """
    tried: list[str] = []
    failures: list[str] = []
    saturated = False
    for index, model in enumerate(decision.candidates):
        last = index == len(decision.candidates) - 1
        fit_context = _longest_left(caller.catalog, decision.candidates[index:])
        request, plan = request_for(model, fit_context)
        try:
            result: BaseModel | ModelStream = await (
                caller.unary(model, method, request, plan, context)
                if delivery == "unary"
                else caller.stream(model, method, request, delivery == "sse", plan, context)
            )
        except CallFailed as exc:
            if exc.kind == "failed":
                error = internal_error(current_request_id(), f"model {model}").response()
                return Routed(model, decision.rule, decision.reason, tuple(tried), error)
            saturated |= exc.kind == "saturated"
            reason: str = exc.kind
            detail = str(exc)
        else:
            answer = result.first if isinstance(result, ModelStream) else result
            passed = _pass_reason(answer, last)
            if passed is None:
                notes = answer if isinstance(answer, RouterNotes) else RouterNotes()
                return Routed(
                    model,
                    decision.rule,
                    decision.reason,
                    tuple(tried),
                    result,
                    notes.preprocess_report,
                    notes.replica,
                )
            if isinstance(result, ModelStream):
                result.close()
            assert isinstance(answer, ErrorResponse)
            reason, detail = passed, f"{model}: {answer.error.message}"
            saturated |= passed == "saturated"
            if passed == "down":
                caller.health.mark_down(caller.catalog.base(model), answer.error.message[:300])
        metrics.fallbacks.labels(model, reason).inc()
        tried.append(model)
        failures.append(detail)
    detail = "; ".join(failures)
    error = saturated_error(detail, retry_after_s) if saturated else unavailable_error(detail)
    return Routed(tried[-1], decision.rule, decision.reason, tuple(tried[:-1]), error.response())
