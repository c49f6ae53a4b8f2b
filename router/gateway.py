"""One routed request, shared by the HTTP routes and the Python API.

parse (OpenAI schema and request limits, 400 naming the field: the one validation of the
request) → extract features → rate limits (429 naming the limit) → `decide` (capabilities,
then rules, then health) → the call's context (tenant, priority, session key:
`router.call_context`) → `dispatch` (fallback across candidates; each gets the validated
request after the preprocessing rules in force for it) → count the outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, TypeVar

from ray.serve.handle import DeploymentHandle

from configs.model_config import RouterAppConfig
from configs.policy_config import AUTO_ALIAS
from deployments.protocol.errors import ErrorResponse, OpenAIError
from deployments.protocol.preprocess_plan import PreprocessPlan, PreprocessReport
from deployments.protocol.request_id import current_request_id
from deployments.protocol.requests import ChatCompletionRequest, CompletionRequest
from deployments.protocol.responses import ModelCard, ModelList
from deployments.protocol.validation import parse_request, wants_stream
from deployments.streaming.token_timing import wants_timing
from router.auth import presented_key
from router.call_context import CallContext, session_of
from router.dispatch import Routed, dispatch
from router.http_errors import policy_error
from router.lora_admin import LoraAdmin
from router.metrics import RouterMetrics
from router.model_caller import ModelCaller
from router.model_catalog import ModelCatalog
from router.policy import (
    Decision,
    NoHealthyModel,
    PolicyError,
    RequestFeatures,
    decide,
    extract_features,
)
from router.priorities import level_names, resolve_priority
from router.prompt_rules import apply_prompt_rules
from router.rate_limit import RateLimiter

logger = logging.getLogger(__name__)

Req = TypeVar("Req", ChatCompletionRequest, CompletionRequest)


class Gateway:
    """The routing core of one router replica.

    Args:
        config: The application config.
        handles: Model id -> handle of its `ModelServer` deployment.
        lora_registry: Handle of the application's `LoraRegistry` (None: no model allows
            runtime LoRA loading).
    """

    def __init__(
        self,
        config: RouterAppConfig,
        handles: dict[str, DeploymentHandle],
        lora_registry: DeploymentHandle | None = None,
    ) -> None:
        self.config = config
        self.policy = config.routing_policy()
        self.rule_levels = {r.name: r.priority for r in self.policy.rules if r.priority}
        self.catalog = ModelCatalog(config)
        self.metrics = RouterMetrics(config, level_names(config.priorities))
        self.caller = ModelCaller(config, handles, self.catalog, self.metrics)
        self.limiter = RateLimiter(config.rate_limits)
        self.lora_registry = lora_registry
        aliases = self.policy.alias_names()
        self.lora = LoraAdmin(config, self.catalog, handles, lora_registry, aliases)

    async def start(self) -> None:
        """Start following the deployments' state and, if there is one, the registry of runtime
        LoRA adapters; probe the models whose context length only their replica knows."""
        await self.caller.start()
        if self.lora_registry is not None:
            poll_s = self.config.deployment_status_poll_s
            self.catalog.adapters.follow(self.lora_registry, poll_s)

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
            method: the `ModelServer` method (`chat`, `completions`, `tokenize`, `detokenize`).
            schema: The request model for `method`.
            request: The request body (dict) or model.
            headers: Request headers (tenant and priority headers feed the policy; the bearer
                key and the tenant select the rate limits).
            sse: an HTTP caller: a stream's items after the first come as SSE bytes to relay.

        Returns:
            The outcome, or an `ErrorResponse` when no decision could be made (bad request,
            over a rate limit, unknown model, no capable model, no healthy model).
        """
        try:
            req = parse_request(schema, request, self.config.request_limits)
            features = extract_features(req, headers)
            self._rate_limit(features, headers)
            decision = self._decide(features)
            context = self._context(features, headers, req, decision.rule)
        except OpenAIError as exc:
            return exc.response()
        except (PolicyError, NoHealthyModel) as exc:
            return policy_error(exc).response()
        name, _ = self.policy.resolve_name(features.model or AUTO_ALIAS, self.catalog.capabilities)
        alias = None if self.catalog.serves(name) else name
        rules = self.config.preprocessing
        if req.priority != context.priority:  # the engine schedules by it
            req = req.model_copy(update={"priority": context.priority})

        def request_for(model: str, fit_context: bool) -> tuple[Req, PreprocessPlan | None]:
            resolved = rules.resolve(alias, self.catalog.base(model), features.tenant)
            return apply_prompt_rules(req, resolved, fit_context)

        routed = await dispatch(
            self.caller,
            decision,
            method,
            request_for,
            ("sse" if sse else "chunks") if wants_stream(req) else "unary",
            self.config.retry_after_s,
            self.metrics,
            context,
        )
        self.metrics.requests.labels(routed.model, routed.rule, str(routed.status)).inc()
        if routed.preprocess is not None:
            self._count_preprocess(routed.model, routed.preprocess)
        logger.debug(
            "request %s: %s -> %s (%s)", current_request_id(), method, routed.model, decision.reason
        )
        return routed

    def _rate_limit(self, features: RequestFeatures, headers: Mapping[str, str]) -> None:
        """Charge the request to its key's and tenant's budgets.

        Raises:
            OpenAIError: 429 with `Retry-After`, naming the limit.
        """
        cost = features.estimated_prompt_tokens + (features.max_tokens or 0)
        key = presented_key(headers)
        refused = self.limiter.admit(key, features.tenant, cost)
        if refused is not None:
            self.metrics.rate_limited.labels(refused.limit, refused.kind).inc()
            raise refused.error()

    def _context(
        self, features: RequestFeatures, headers: Mapping[str, str], req: Req, rule: str
    ) -> CallContext:
        """Who the request is for: its tenant, the engine priority it runs at
        (`configs.priorities`; `rule`: the policy rule that decided it), its session key
        (`session_key`) and whether it asked for per-token timestamps.

        Raises:
            OpenAIError: 400 for an unknown level in the priority header.
        """
        priority = resolve_priority(
            self.config.priorities,
            features.tenant,
            presented_key(headers),
            features.priority,
            req.priority,
            self.rule_levels.get(rule),
        )
        session = session_of(self.config.session_key, req, headers)
        return CallContext(features.tenant, priority, session, wants_timing(headers))

    def _count_preprocess(self, model: str, report: PreprocessReport) -> None:
        for rule in report.applied():
            self.metrics.preprocess_applied.labels(rule).inc()
        for rule, tokens in report.tokens_saved.items():
            self.metrics.preprocess_tokens_saved.labels(rule, model).inc(max(tokens, 0))

    def _decide(self, features: RequestFeatures) -> Decision:
        """The policy's decision among serving models; if none serves, among those still
        starting too (the call then waits for a replica)."""
        caps = self.catalog.capabilities
        try:
            return decide(features, caps, self.caller.states(starting_ok=False), self.policy)
        except NoHealthyModel:
            if not self.caller.starting():
                raise
            return decide(features, caps, self.caller.states(starting_ok=True), self.policy)

    def _names(self) -> list[str]:
        adapters = self.catalog.adapters.bases()
        return [*self.catalog.configs, *adapters, *self.policy.alias_names()]

    def model_list(self, created: int) -> ModelList:
        """The served model ids (with their context length once known), then the LoRA adapters
        (`parent`: their base model), then the aliases."""
        return ModelList(data=[self._card(name, created) for name in self._names()])

    def model_card(self, model: str, created: int) -> ModelCard:
        """The model object of one served model id, LoRA adapter or alias.

        Raises:
            OpenAIError: 404 `model_not_found` for any other id.
        """
        if not self.catalog.serves(model) and self.policy.alias_models(model) is None:
            names = self._names()
            raise OpenAIError(
                f"model {model!r} does not exist: the models are {names}",
                status_code=404,
                param="model",
                code="model_not_found",
            )
        return self._card(model, created)

    def _card(self, name: str, created: int) -> ModelCard:
        spec = self.catalog.adapters.spec(name)
        if spec is not None:
            base = self.catalog.base(name)
            length = self.catalog.context_length(base)
            return ModelCard(
                id=name, created=created, root=spec.path, parent=base, max_model_len=length
            )
        config = self.catalog.configs.get(name)
        if config is None:  # an alias
            return ModelCard(id=name, created=created)
        source = config.source
        return ModelCard(
            id=name,
            created=created,
            root=source.path or f"package:{source.package}",
            max_model_len=self.catalog.context_length(name),
        )
