"""One routed request, shared by the HTTP routes and the Python API.

parse (OpenAI schema and request limits, 400 naming the field: the one validation of the
request) → extract features → `decide` (capabilities, then rules, then health) → `dispatch`
(fallback across candidates, the validated request passed on) → count the outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, TypeVar

from ray.serve.handle import DeploymentHandle

from configs.model_config import RouterAppConfig
from deployments.protocol.errors import ErrorResponse, OpenAIError
from deployments.protocol.request_id import current_request_id
from deployments.protocol.requests import ChatCompletionRequest, CompletionRequest
from deployments.protocol.responses import ModelCard, ModelList
from deployments.protocol.validation import parse_request, wants_stream
from router.dispatch import Routed, dispatch
from router.http_errors import policy_error
from router.metrics import RouterMetrics
from router.model_pool import ModelPool
from router.policy import (
    Decision,
    NoHealthyModel,
    PolicyError,
    RequestFeatures,
    decide,
    extract_features,
)

logger = logging.getLogger(__name__)

Req = TypeVar("Req", ChatCompletionRequest, CompletionRequest)


class Gateway:
    """The routing core of one router replica.

    Args:
        config: The application config.
        handles: Model id -> handle of its `ModelServer` deployment.
    """

    def __init__(self, config: RouterAppConfig, handles: dict[str, DeploymentHandle]) -> None:
        self.config = config
        self.policy = config.routing_policy()
        self.pool = ModelPool(config, handles)
        self.metrics = RouterMetrics()

    async def route(
        self,
        method: str,
        schema: type[Req],
        request: Req | dict[str, Any],
        headers: Mapping[str, str],
        sse: bool = False,
    ) -> Routed | ErrorResponse:
        """Route one request.

        Args:
            method: `chat` or `completions` (the `ModelServer` method).
            schema: The request model for `method`.
            request: The request body (dict) or model.
            headers: Request headers (tenant and priority headers feed the policy).
            sse: an HTTP caller: a stream's items after the first come as SSE bytes to relay.

        Returns:
            The outcome, or an `ErrorResponse` when no decision could be made (bad request,
            unknown model, no capable model, no healthy model).
        """
        try:
            req = parse_request(schema, request, self.config.request_limits)
            features = extract_features(req, headers)
            decision = self._decide(features)
        except OpenAIError as exc:
            return exc.response()
        except (PolicyError, NoHealthyModel) as exc:
            return policy_error(exc).response()
        routed = await dispatch(
            self.pool,
            decision,
            method,
            req,
            ("sse" if sse else "chunks") if wants_stream(req) else "unary",
            self.config.retry_after_s,
            self.metrics,
        )
        self.metrics.requests.labels(routed.model, routed.rule, str(routed.status)).inc()
        logger.debug(
            "request %s: %s -> %s (%s)", current_request_id(), method, routed.model, decision.reason
        )
        return routed

    def _decide(self, features: RequestFeatures) -> Decision:
        """The policy's decision among serving models; if none serves, among those still
        starting too (the call then waits for a replica)."""
        caps = self.pool.capabilities
        try:
            return decide(features, caps, self.pool.states(starting_ok=False), self.policy)
        except NoHealthyModel:
            if not self.pool.starting():
                raise
            return decide(features, caps, self.pool.states(starting_ok=True), self.policy)

    def model_list(self, created: int) -> ModelList:
        """The served model ids (with their context length once known), then the aliases."""
        cards = [
            ModelCard(id=m, created=created, max_model_len=self.pool.context_length(m))
            for m in self.pool.handles
        ]
        cards += [ModelCard(id=a, created=created) for a in self.policy.alias_names()]
        return ModelList(data=cards)
