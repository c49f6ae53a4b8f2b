"""The declarative routing policy, as written in the router application's Serve config `args`.

Example (YAML)::

    aliases:
      auto: [qwen3-8b, qwen3-32b, qwen2-audio-7b]
      fast: [qwen3-8b]
    rules:
      - name: audio
        when: {has_audio: true}
        targets: [qwen2-audio-7b]
      - name: tool-calls
        when: {has_tools: true}
        targets: [qwen3-32b, qwen3-8b]
      - name: long-prompts
        when: {prompt_tokens_gt: 24000}
        targets: [qwen3-32b]
        pick: least_loaded
    default_targets: [qwen3-8b, qwen3-32b]
    model_names:               # names clients hard-code, mapped onto what we serve
      - {pattern: "claude-*haiku*", model: fast}
      - {pattern: "claude-*", model: auto}

Parsing checks shapes and types only; `configs.policy_validation.check_policy` checks the policy
against the served models and must be called once at start-up (it is what makes
`router.policy.decide` safe); `RouterAppConfig` calls it when the config is parsed.
"""

from __future__ import annotations

from collections.abc import Collection, Container
from fnmatch import fnmatchcase
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

AUTO_ALIAS = "auto"
"""The alias of a request that omits `model`."""

ToolChoiceKind = Literal["none", "auto", "required", "named"]
"""`tool_choice` as a kind: a forced function is `named` (the policy YAML's spelling too)."""

ResponseFormatKind = Literal["text", "json_object", "json_schema"]
"""`response_format.type`."""

InputModality = Literal["text", "image", "audio"]
"""What a model takes in: text, images (`image_url` content parts), audio (`input_audio` parts)."""

MediaModality = Literal["image", "audio"]
"""The input modalities other than text, which a request holds in its content parts."""

CHECKPOINT_MODALITIES: dict[str, MediaModality] = {"qwen2_5_vl": "image", "qwen2_audio": "audio"}
"""`model_type` (a checkpoint's `config.json`) -> the media it takes besides text; a type not
listed is a text model. The replica, the engine and `check-config` hold `input_modalities` to it."""


def checkpoint_modalities(model_type: str | None) -> list[InputModality]:
    """What a checkpoint of `model_type` takes: `["text"]`, or text and its media modality."""
    media = CHECKPOINT_MODALITIES.get(model_type or "")
    return ["text"] if media is None else sorted(["text", media])


def modalities_mismatch(
    model_id: str, declared: Collection[str], model_type: str | None
) -> str | None:
    """Why a model's `input_modalities` (`declared`) does not match its checkpoint's
    `model_type` (None: a GGUF file, a text model), or None when it does: the router would
    send it requests it cannot read, or none of those it can."""
    takes = checkpoint_modalities(model_type)
    if sorted(declared) == takes:
        return None
    return (
        f"model {model_id!r}: input_modalities {sorted(declared)} does not match its "
        f"checkpoint, which takes {takes}; set input_modalities: {takes}"
    )


def _takes_text(modalities: list[InputModality]) -> list[InputModality]:
    """Every chat model takes text (a VLM's or Qwen2-Audio's prompt is text around the media),
    and a modality listed twice is a typo."""
    if "text" not in modalities:
        raise ValueError(
            f"input_modalities {modalities} lacks 'text': every served model takes a text "
            "prompt (media parts come with one); add 'text'"
        )
    twice = sorted({m for m in modalities if modalities.count(m) > 1})
    if twice:
        raise ValueError(f"input_modalities lists {twice[0]!r} more than once")
    return modalities


TEXT_ONLY: tuple[InputModality, ...] = ("text",)
"""The default `input_modalities`: a text model."""

InputModalities = Annotated[list[InputModality], AfterValidator(_takes_text)]
"""A model's `input_modalities` config key: a list of `text`, `image`, `audio` that holds
`text`, each at most once (`ValueError` otherwise)."""

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class ModelCapabilities(BaseModel):
    """What one served model can do; checked before any rule."""

    model_config = _FROZEN

    context_length: int = Field(
        gt=0, description="Context window in tokens (prompt plus completion)."
    )
    supports_tools: bool = Field(description="Whether the model can be sent `tools`.")
    supports_structured_output: bool = Field(
        description="Whether the model honours `response_format` `json_object`/`json_schema`."
    )
    supports_streaming: bool = Field(
        default=True, description="Whether the deployment can answer with SSE streaming."
    )
    input_modalities: InputModalities = Field(
        default_factory=lambda: list(TEXT_ONLY),
        description="What the model takes in: `text` (always), `image` (`image_url` content "
        "parts), `audio` (`input_audio` content parts). A request holding a modality the model "
        "does not take is never sent to it.",
    )


class Condition(BaseModel):
    """When a rule applies: every field that is set must hold; unset fields don't care.

    A threshold on `temperature`, `top_p` or `max_tokens` holds only when the request sent that
    field (the effective default belongs to the model's generation config, not to the router).
    """

    model_config = _FROZEN

    model: list[str] | None = Field(
        default=None,
        description="Aliases the request's `model` must be one of; an omitted `model` is "
        "`auto`. Exact model ids pin their model and skip rules, so they are not allowed here.",
    )
    temperature_lte: float | None = Field(
        default=None, description="Holds when `temperature` is sent and ≤ this; in [0, 2]."
    )
    temperature_gte: float | None = Field(
        default=None, description="Holds when `temperature` is sent and ≥ this; in [0, 2]."
    )
    top_p_lte: float | None = Field(
        default=None, description="Holds when `top_p` is sent and ≤ this; in [0, 1]."
    )
    max_tokens_lte: int | None = Field(
        default=None,
        description="Tokens; holds when the completion limit (`max_completion_tokens`, else "
        "`max_tokens`) is sent and ≤ this.",
    )
    max_tokens_gte: int | None = Field(
        default=None, description="Tokens; holds when the completion limit is sent and ≥ this."
    )
    stream: bool | None = Field(default=None, description="Required value of `stream`.")
    has_tools: bool | None = Field(
        default=None,
        description="Whether the request must (true) or must not (false) declare tools.",
    )
    has_image: bool | None = Field(
        default=None,
        description="Whether the request must (true) or must not (false) hold an image "
        "(an `image_url` content part in any message).",
    )
    has_audio: bool | None = Field(
        default=None,
        description="Whether the request must (true) or must not (false) hold audio (an "
        "`input_audio` content part in any message).",
    )
    tool_choice: list[ToolChoiceKind] | None = Field(
        default=None,
        description="Allowed `tool_choice` kinds; a named function is `named`; omitted means "
        "`auto` with tools and `none` without.",
    )
    response_format: list[ResponseFormatKind] | None = Field(
        default=None, description="Allowed `response_format.type` values; omitted is `text`."
    )
    prompt_tokens_gt: int | None = Field(
        default=None, description="Holds when the estimated prompt tokens are > this."
    )
    prompt_tokens_lte: int | None = Field(
        default=None, description="Holds when the estimated prompt tokens are ≤ this."
    )
    tenant: list[str] | None = Field(
        default=None, description="Allowed values of the `x-ascend-router-tenant` header."
    )
    priority: list[str] | None = Field(
        default=None, description="Allowed values of the `x-ascend-router-priority` header."
    )

    def constraints(self) -> dict[str, object]:
        """The fields that are set, by name; empty for an unconditional rule."""
        return {name: value for name, value in self if value is not None}

    def describe(self) -> str:
        """A short human-readable form, e.g. `has_tools=True, prompt_tokens_gt=8000`."""
        parts = [f"{name}={value}" for name, value in self.constraints().items()]
        return ", ".join(parts) if parts else "unconditional"


class Rule(BaseModel):
    """One routing rule: if `when` holds, route to `targets`."""

    model_config = _FROZEN

    name: str = Field(min_length=1, description="Unique name; shown in decisions and metrics.")
    when: Condition = Field(
        default_factory=Condition, description="Condition; omitted means always."
    )
    targets: list[str] = Field(
        description="Model ids in preference order. For a request naming an alias, only the "
        "alias's models are used; a rule none of whose targets is in the alias is skipped."
    )
    pick: Literal["ordered", "least_loaded"] = Field(
        default="ordered",
        description="`ordered` keeps `targets` order; `least_loaded` sorts the eligible targets "
        "by in-flight plus queued requests (stable on ties).",
    )
    priority: str | None = Field(
        None,
        description="The priority level (a `priorities.levels` name) of the requests this rule "
        "decides, unless their tenant's or API key's entry places them.",
    )


class ModelNamePattern(BaseModel):
    """A glob over requested model names that maps them onto a served model or an alias."""

    model_config = _FROZEN

    pattern: str = Field(
        min_length=1,
        description="A shell-style glob (`*`, `?`, `[seq]`; Python's `fnmatch`, case-sensitive) "
        "over the request's `model`, e.g. `claude-*haiku*` or `gpt-*`.",
    )
    model: str = Field(
        min_length=1, description="The served model id or alias the matching names route as."
    )


class PolicyConfig(BaseModel):
    """The whole routing policy: aliases, ordered rules (first match wins) and a default."""

    model_config = _FROZEN

    aliases: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Alias → model ids. `auto` (what an omitted `model` means) must be given "
        "here or is implied by `default_targets`.",
    )
    rules: list[Rule] = Field(default_factory=list, description="Rules, tried in order.")
    default_targets: list[str] | None = Field(
        default=None,
        description="Model ids used for `auto` when no rule matches; defaults to `aliases.auto`; "
        "must be models of `aliases.auto` when both are given.",
    )
    model_names: list[ModelNamePattern] = Field(
        default_factory=list,
        description="Globs over requested model names that are neither served ids nor aliases "
        "(the names coding agents send, e.g. Claude Code's `claude-opus-4-8[1m]`), tried in "
        "order; the first match routes the request as its `model`.",
    )

    @model_validator(mode="after")
    def _require_auto(self) -> PolicyConfig:
        if AUTO_ALIAS not in self.aliases and not self.default_targets:
            raise ValueError(
                "the policy needs `aliases.auto` or `default_targets`: requests that omit "
                "`model` are routed as alias 'auto'"
            )
        return self

    def resolve_name(
        self, name: str, served: Container[str]
    ) -> tuple[str, ModelNamePattern | None]:
        """The name a request routes as, and the `model_names` pattern that mapped it.

        A served id or an alias is itself; any other name is the model of the first pattern
        that matches it (unchanged when none does: the policy then answers 404).
        """
        if name in served or self.alias_models(name) is not None:
            return name, None
        pattern = next((p for p in self.model_names if fnmatchcase(name, p.pattern)), None)
        return (pattern.model, pattern) if pattern is not None else (name, None)

    def alias_models(self, name: str) -> list[str] | None:
        """Model ids of alias `name` (with `auto` implied by `default_targets`), or `None`."""
        if name in self.aliases:
            return self.aliases[name]
        if name == AUTO_ALIAS:
            return self.default_targets
        return None

    def alias_names(self) -> list[str]:
        """Every alias name, `auto` included."""
        return list(self.aliases) + ([] if AUTO_ALIAS in self.aliases else [AUTO_ALIAS])

    def rule_aliases(self, rule: Rule) -> set[str]:
        """The aliases `rule` can fire for.

        Those its `when.model` names (all aliases when unset), narrowed to the aliases that
        contain at least one of its targets: a rule cannot route an alias's request outside the
        alias.
        """
        names = rule.when.model if rule.when.model is not None else self.alias_names()
        return {
            name
            for name in names
            if any(target in (self.alias_models(name) or ()) for target in rule.targets)
        }

    def fallback_targets(self) -> list[str]:
        """What `auto` routes to when no rule matches."""
        if self.default_targets is not None:
            return self.default_targets
        return self.aliases[AUTO_ALIAS]
