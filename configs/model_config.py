"""Typed config of one model deployment and of the router application (Serve `args`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from configs.deployment_options import DeploymentOptions
from configs.engine_config import EngineConfig
from configs.media_limits import MediaLimits
from configs.model_shape import ModelShape
from configs.model_source import ModelSource
from configs.monitoring import MonitoringConfig
from configs.named_keys import check_known_keys
from configs.policy_config import TEXT_ONLY, InputModalities, ModelCapabilities, PolicyConfig
from configs.policy_validation import check_policy
from configs.preprocessing import Preprocessing
from configs.priorities import Priorities
from configs.rate_limits import RateLimits
from configs.replica_routing import ReplicaRouting, SessionSource
from configs.request_limits import RequestLimits
from configs.responses_store import ResponsesStoreConfig

ROUTER_MAX_ONGOING = 10_000
"""The most requests the router deployment takes at once by default (`router_deployment`)."""

UNKNOWN_CONTEXT = 1 << 30
"""Context length assumed for a model whose replica has not reported it yet (no config value)."""


class ModelDeploymentConfig(BaseModel):
    """One model deployment."""

    model_config = ConfigDict(extra="forbid")

    model_id: str = Field(description="The `model` name clients use.")
    source: ModelSource
    family: str | None = Field(None, description="Model family, e.g. llama, qwen2, deepseek_v3.")
    tool_parser: str | None = Field(None, description="Tool-call parser name (default by family).")
    tool_chat_template: str | None = Field(
        None,
        description="Jinja chat template file used for requests with tools when the "
        "checkpoint's own template has no tool support (default: the shipped ChatML one for "
        "ChatML models).",
    )
    strict_tool_history: bool = Field(
        True,
        description="Reject histories whose tool calls and tool messages do not pair up by id "
        "(false: accept loose histories from lenient clients).",
    )
    tensor_parallel_size: int = Field(1, ge=1, description="Ranks per replica (tensor parallel).")
    expert_parallel: bool = Field(False, description="Split MoE experts across the ranks.")
    engine: EngineConfig = Field(default_factory=EngineConfig)
    shape: ModelShape | None = Field(
        None, description="Shape figures for `ascend-router plan` when the checkpoint is remote."
    )
    device_memory_bytes: int | None = Field(
        None, gt=0, description="Memory of one device (default per platform, e.g. 64 GiB 910B)."
    )
    deployment: DeploymentOptions = Field(default_factory=DeploymentOptions)
    routing: ReplicaRouting = Field(
        default_factory=ReplicaRouting,
        description="How calls are spread over the replicas: power of two, prefix-aware, "
        "session affinity (`configs.replica_routing`).",
    )
    stream_batching_interval_ms: float = Field(
        0.0,
        ge=0,
        le=1000,
        description="HTTP streams: the replica sends ready SSE bytes that the router relays "
        "untouched, every chunk already produced in one message; with a value > 0, at most one "
        "message per this many ms after the first chunk (which is never held back). Fewer "
        "messages cost less CPU per token; clients see tokens arrive in groups.",
    )
    prepare_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Seconds one request's preparation (chat template, tokenisation, grammar "
        "compilation) may take, off the replica's event loop; beyond it the request gets a 400 "
        "and other requests are not held up.",
    )
    engine_stall_timeout_s: float = Field(
        600.0,
        gt=0,
        description="Seconds one engine step may run before the replica counts as stuck: its "
        "health check then fails and Ray Serve replaces it.",
    )
    input_modalities: InputModalities = Field(
        default_factory=lambda: list(TEXT_ONLY),
        description="What the model takes in: `text` (always), `image` (`image_url` content "
        "parts), `audio` (`input_audio` content parts); the router sends a request only to "
        "models that take every modality it holds.",
    )
    media: MediaLimits = Field(
        default_factory=MediaLimits,
        description="Limits on the images and audio of one request, and whether http(s) URLs "
        "are fetched (`configs.media_limits`); used by multimodal checkpoints only.",
    )
    engine_process: bool = Field(
        False,
        description="Run the engine and its step loop in a child process of the replica "
        "(`engine.core_process`) instead of a thread: a step then never waits for the GIL of "
        "the replica's serving threads (on SmolLM2 at batch 1 on one thread: 21 ms per decode "
        "step against 26-28 ms). One-rank replicas only (tensor and pipeline parallel size 1).",
    )
    engine_class: str | None = Field(
        None,
        description="Import path `module:Class` of the engine the replica drives instead of "
        "`engine.llm_engine.LLMEngine` (same constructor and methods), e.g. a fault-injecting "
        "engine in tests.",
    )

    @property
    def num_ranks(self) -> int:
        """Ranks (devices) of one replica: `tensor_parallel_size` × `pipeline_parallel_size`."""
        return self.tensor_parallel_size * self.engine.pipeline_parallel_size

    @model_validator(mode="after")
    def _engine_fits_what_the_config_says_of_the_model(self) -> ModelDeploymentConfig:
        """What is decidable from the config alone, so that `check-config` catches it (the
        engine checks the same against the checkpoint at start-up)."""
        partition = self.engine.pipeline_layer_partition
        if partition is not None and self.shape is not None:
            if sum(partition) != self.shape.num_layers:
                raise ValueError(
                    f"engine.pipeline_layer_partition {partition} sums to {sum(partition)}, "
                    f"but shape.num_layers is {self.shape.num_layers}"
                )
        if self.family == "deepseek_v4" and self.engine.kv_cache_dtype != "auto":
            raise ValueError(
                f"engine.kv_cache_dtype={self.engine.kv_cache_dtype} is not supported for "
                "DeepSeek-V4 (its hybrid caches stay in the model dtype); set kv_cache_dtype: auto"
            )
        return self

    @model_validator(mode="after")
    def _engine_process_on_one_rank(self) -> ModelDeploymentConfig:
        if self.engine_process and self.num_ranks != 1:
            raise ValueError(
                f"engine_process runs one-rank replicas only, but this one has {self.num_ranks} "
                "ranks (its rank workers are Ray actors of the replica); set engine_process: false"
            )
        return self

    @model_validator(mode="after")
    def _drafting_model_on_one_rank(self) -> ModelDeploymentConfig:
        spec = self.engine.speculative
        if spec is not None and spec.method != "ngram" and self.tensor_parallel_size != 1:
            raise ValueError(
                f"speculative method {spec.method!r} runs with tensor_parallel_size 1 only (its "
                "drafting model runs in the engine's process); use method: ngram"
            )
        return self

    @property
    def adapters(self) -> dict[str, str]:
        """The LoRA adapters served from start-up (`engine.lora.lora_modules`): name -> path."""
        lora = self.engine.lora
        return {} if lora is None else {m.name: m.path for m in lora.lora_modules}

    @property
    def supports_tools(self) -> bool:
        """The one rule for tools: a model does tools iff its config names a `tool_parser`."""
        return self.tool_parser is not None


class RouterAppConfig(BaseModel):
    """The `args` of the `ascend-router` Serve application."""

    model_config = ConfigDict(extra="forbid")

    models: list[ModelDeploymentConfig] = Field(min_length=1)
    default_model: str | None = Field(
        None,
        description="Model used when a request omits `model` and no `policy` is given (then the "
        "policy is `default_targets: [default_model]`; default: the first model).",
    )
    policy: PolicyConfig | None = Field(
        None,
        description="Routing policy: aliases, ordered rules, default targets (see "
        "`configs.policy_config`); checked against the models' capabilities at start-up.",
    )
    api_keys: list[str] = Field(
        default_factory=list, description="Accepted API keys (also ASCEND_ROUTER_API_KEYS)."
    )
    first_token_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Seconds a call may go without its first stream item (or, non-streamed, its "
        "response) before the router probes the model; a failed probe marks it down and the next "
        "candidate is tried, a good one waits another such period.",
    )
    response_timeout_s: float = Field(
        600.0,
        gt=0,
        description="Seconds a call may wait for its first stream item (or, non-streamed, its "
        "whole response) in any case before the router tries the next candidate.",
    )
    health_probe_timeout_s: float = Field(
        5.0, gt=0, description="Seconds one health probe (`info` call) of a down model may take."
    )
    health_cooldown_s: float = Field(
        2.0,
        gt=0,
        description="Seconds a model stays down after a failed call before it is probed, and "
        "between probes while they fail.",
    )
    deployment_status_poll_s: float = Field(
        1.0,
        gt=0,
        description="Seconds between two reads of the model deployments' state from the Serve "
        "controller (starting, serving, failed): a call to a starting model waits for it "
        "instead of being probed, a failed one is skipped at once (`router.deployment_status`).",
    )
    inter_token_timeout_s: float = Field(
        120.0,
        gt=0,
        description="Seconds a started stream may go without an item; then it ends with an "
        "error event and the model's request is aborted (its KV blocks freed).",
    )
    request_limits: RequestLimits = Field(
        default_factory=RequestLimits,
        description="Bounds on one request's size, nesting and counts, checked at the router's "
        "edge (`configs.request_limits.RequestLimits`).",
    )
    retry_after_s: int = Field(
        1, ge=1, description="`Retry-After` seconds of the 429 answered when all are saturated."
    )
    preprocessing: Preprocessing = Field(
        default_factory=Preprocessing,
        description="Prompt preprocessing per alias, model or tenant: system-prompt injection, "
        "whitespace compaction, truncation (`configs.preprocessing`).",
    )
    monitoring: MonitoringConfig = Field(
        default_factory=MonitoringConfig,
        description="How often model replicas report their engine metrics to the metrics board "
        "behind `/metrics`, and when a silent replica is dropped (`configs.monitoring`).",
    )
    rate_limits: RateLimits = Field(
        default_factory=RateLimits,
        description="Requests and tokens per minute per API key and per tenant; over a limit "
        "the answer is 429 with `Retry-After` (`configs.rate_limits`).",
    )
    priorities: Priorities | None = Field(
        None,
        description="Priority levels by tenant, API key or the request's own (lower-only) ask, "
        "and tenants' weights in a saturated model's fair queue; unset, every request runs at "
        "priority 0 (`configs.priorities`).",
    )
    responses_store: ResponsesStoreConfig = Field(
        default_factory=ResponsesStoreConfig,
        description="How many Responses API responses are kept for `previous_response_id`, and "
        "for how long (`configs.responses_store`).",
    )
    session_key: list[SessionSource] = Field(
        default_factory=lambda: ["header:x-session-id", "prompt_cache_key", "user"],
        description="Where a request's session key comes from, first found wins: "
        "`header:<name>` (a request header) or a body field (`prompt_cache_key`, `user`). "
        "Models with `routing.session_affinity` keep a session on one replica; [] turns it off.",
    )
    router_deployment: DeploymentOptions = Field(
        default_factory=lambda: DeploymentOptions(ray_actor_options={"num_cpus": 0.1}),
        description="Options of the router (ingress) deployment. Unless set, its "
        "`max_ongoing_requests` is what the models run and queue together plus 64 (at most "
        f"{ROUTER_MAX_ONGOING}), so that every request reaches the router's own fair queue "
        "instead of waiting, first come first served, in Ray's queue in front of the router.",
    )

    @model_validator(mode="after")
    def _router_takes_what_the_models_take(self) -> RouterAppConfig:
        options = self.router_deployment
        if "max_ongoing_requests" not in options.model_fields_set:
            total = 64  # health, metrics and requests refused before admission
            for m in self.models:
                _, replicas = m.deployment.replica_range()
                queued = m.deployment.max_queued_requests
                total += m.deployment.max_ongoing_requests * replicas
                total += queued if queued >= 0 else ROUTER_MAX_ONGOING
            options.max_ongoing_requests = min(total, ROUTER_MAX_ONGOING)
        return self

    @model_validator(mode="after")
    def _check(self) -> RouterAppConfig:
        ids = [m.model_id for m in self.models]
        dupes = {i for i in ids if ids.count(i) > 1}
        if dupes:
            raise ValueError(f"duplicate model_id(s): {sorted(dupes)}")
        if self.default_model is not None and self.default_model not in ids:
            raise ValueError(f"default_model {self.default_model!r} is not one of {ids}")
        if self.default_model is not None and self.policy is not None:
            raise ValueError(
                "give default_model or policy, not both: with a policy, requests that omit "
                "`model` go to policy.aliases.auto / policy.default_targets"
            )
        policy = self.routing_policy()
        taken = {*ids, *policy.alias_names()}
        for name in [n for m in self.models for n in m.adapters]:
            if name in taken:
                raise ValueError(
                    f"LoRA adapter name {name!r} is already a model id, an alias or another "
                    "adapter: adapters are model ids of their own, so names must be unique"
                )
            taken.add(name)
        check_policy(policy, self.capabilities())
        self.preprocessing.check_names(ids, policy.alias_names())
        if self.priorities is not None:
            check_known_keys(self.priorities.keys, "priorities.keys", self.api_keys)
            reserved = self.priorities.reserved_slots
            for m in self.models:
                if reserved and reserved >= m.deployment.max_ongoing_requests:
                    raise ValueError(
                        f"priorities.reserved_slots ({reserved}) leaves model {m.model_id!r} no "
                        f"slot for the other levels: its max_ongoing_requests is "
                        f"{m.deployment.max_ongoing_requests}"
                    )
        levels = self.priorities.levels if self.priorities is not None else []
        for rule in policy.rules:
            if rule.priority is not None and rule.priority not in levels:
                raise ValueError(
                    f"policy rule {rule.name!r}: priority {rule.priority!r} is not one of "
                    f"priorities.levels {levels}"
                )
        return self

    def routing_policy(self) -> PolicyConfig:
        """The policy in force: `policy`, else every omitted `model` to the default model."""
        if self.policy is not None:
            return self.policy
        return PolicyConfig(default_targets=[self.default_model or self.models[0].model_id])

    def capabilities(self, learned: dict[str, int] | None = None) -> dict[str, ModelCapabilities]:
        """Model id -> what the router may send it, derived from each model's config.

        A LoRA adapter served from start-up is a model of its own with its base's capabilities,
        so policy rules may target it. Context length is `engine.max_model_len`, else the
        replica's reported `max_model_len` (`learned`, from `ModelServer.info`), else
        `UNKNOWN_CONTEXT` until a replica reports it.
        Tools: `ModelDeploymentConfig.supports_tools`. Structured output (`response_format`
        JSON) is enforced by every model deployment (xgrammar constrained decoding), and
        streaming too.
        """
        learned = learned or {}
        caps = {}
        for m in self.models:
            caps[m.model_id] = ModelCapabilities(
                context_length=m.engine.max_model_len or learned.get(m.model_id, UNKNOWN_CONTEXT),
                supports_tools=m.supports_tools,
                supports_structured_output=True,
                supports_streaming=True,
                input_modalities=m.input_modalities,
            )
            caps.update(dict.fromkeys(m.adapters, caps[m.model_id]))
        return caps

    @property
    def default(self) -> str:
        """The model id used first when a request omits `model` and no rule matches."""
        return self.routing_policy().fallback_targets()[0]
