"""Gateway prompt preprocessing rules (router `args.preprocessing`).

Example (YAML)::

    preprocessing:
      aliases:
        auto:
          system_prompt: {text: "You are a concise assistant.", mode: default}
      models:
        smollm2-long:
          compact_whitespace: true
          truncation: {min_output_tokens: 256}
      tenants:
        acme:
          system_prompt: {text: "You answer for ACME support.", mode: prepend}

Three rules, each set per alias (the request's `model` when it names an alias), per model (the
model a request is sent to) or per tenant (`x-ascend-router-tenant`); for each rule the most
specific scope that sets it wins: tenant over model over alias. `false` turns a rule off at a
scope. They apply to chat completions: the text rules in the router, truncation in the model
replica, which owns the exact token count.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

_FROZEN = ConfigDict(extra="forbid", frozen=True)

SystemPromptMode = Literal["default", "prepend", "replace"]


class SystemPrompt(BaseModel):
    """System-prompt injection."""

    model_config = _FROZEN

    text: str = Field(min_length=1, description="The system prompt.")
    mode: SystemPromptMode = Field(
        "default",
        description="`default`: added only when the request has no system or developer "
        "message; `prepend`: put before the request's first system message (or added); "
        "`replace`: the request's system and developer messages are dropped for this one.",
    )


class Truncation(BaseModel):
    """Dropping the oldest turns of a conversation that does not fit, instead of a 400.

    A turn is a user message with the assistant and tool messages that follow it, so an
    assistant `tool_calls` message is never split from its `tool` results. System and
    developer messages and the last user turn are never dropped; when they alone do not fit,
    the request is still answered 400 `context_length_exceeded`.
    """

    model_config = _FROZEN

    max_prompt_tokens: int | None = Field(
        None,
        gt=0,
        description="Tokens: also drop turns until the prompt is at most this long, even when "
        "it fits the context (a cost cap; best effort: the last user turn is kept).",
    )
    min_output_tokens: int = Field(
        256,
        gt=0,
        description="Tokens kept free for the completion when the request sets no "
        "`max_tokens`; with `max_tokens`, prompt plus `max_tokens` must fit the context.",
    )


def _on_or_off(value: object) -> str:
    return "off" if value is False else "rule"


class PreprocessRules(BaseModel):
    """The rules of one scope; an unset rule defers to a less specific scope."""

    model_config = _FROZEN

    system_prompt: (
        Annotated[
            Annotated[SystemPrompt, Tag("rule")] | Annotated[Literal[False], Tag("off")],
            Discriminator(_on_or_off),
        ]
        | None
    ) = Field(None, description="System-prompt injection; `false` turns it off here.")
    compact_whitespace: bool | None = Field(
        None,
        description="Collapse runs of spaces and of blank lines in user messages, outside "
        "fenced code blocks; tool calls and tool results are never touched.",
    )
    truncation: (
        Annotated[
            Annotated[Truncation, Tag("rule")] | Annotated[Literal[False], Tag("off")],
            Discriminator(_on_or_off),
        ]
        | None
    ) = Field(
        None,
        description="Drop the oldest turns when the conversation does not fit the context, "
        "only on a model for which no longer-context candidate remains; `false` turns it off.",
    )


class Preprocessing(BaseModel):
    """Preprocessing rules by scope."""

    model_config = _FROZEN

    aliases: dict[str, PreprocessRules] = Field(
        default_factory=dict, description="Alias name (`auto` included) -> rules."
    )
    models: dict[str, PreprocessRules] = Field(
        default_factory=dict, description="Served model id -> rules."
    )
    tenants: dict[str, PreprocessRules] = Field(
        default_factory=dict, description="`x-ascend-router-tenant` value -> rules."
    )

    def resolve(self, alias: str | None, model: str, tenant: str | None) -> PreprocessRules:
        """The rules in force for one request sent to `model`: per rule, tenant over model
        over alias; rules turned off (`false`) come back as None."""
        scopes = [
            self.tenants.get(tenant) if tenant else None,
            self.models.get(model),
            self.aliases.get(alias) if alias else None,
        ]
        picked: dict[str, object] = {}
        for name in PreprocessRules.model_fields:
            for rules in scopes:
                value = getattr(rules, name) if rules is not None else None
                if value is not None:
                    picked[name] = value
                    break
        resolved = {k: v for k, v in picked.items() if v is not False}
        return PreprocessRules(**resolved)

    def check_names(self, models: list[str], aliases: list[str]) -> None:
        """Check the scopes against the served models and the policy's aliases.

        Raises:
            ValueError: naming the scope, e.g. `preprocessing.models.foo`, and what exists.
        """
        for scope, names, known in (
            ("models", self.models, models),
            ("aliases", self.aliases, aliases),
        ):
            for name in names:
                if name not in known:
                    raise ValueError(
                        f"preprocessing.{scope}.{name}: no such {scope[:-1]}; "
                        f"{scope} are {sorted(known)}"
                    )
