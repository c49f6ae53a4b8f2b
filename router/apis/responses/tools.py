"""Responses `tools` and `tool_choice`, and their chat-completions counterparts.

A Responses function tool (`{"type": "function", "name", "description", "parameters",
"strict"}`) is the chat tool `{"type": "function", "function": {...}}` (OpenAI's migration
guide, "Migrate to the Responses API": function definitions moved up one level). A `namespace`
tool (`{"type": "namespace", "name", "tools": [...]}`, as Codex CLI groups its sub-agent tools)
contributes its functions under their own names; the model's calls to them come back with the
namespace in the `function_call`'s `namespace`, which is how Codex routes them. Tools given in
an `additional_tools` input item (Codex's default model) are treated the same.

Hosted and built-in tools have no chat counterpart: the types Codex CLI 0.171 sends without
being asked (`DROPPED_TOOL_TYPES`; `tests/data/agent_requests/codex/`) are dropped with a
warning, so Codex works unchanged; any other type is a 400 naming it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
)

from deployments.protocol.errors import OpenAIError
from deployments.protocol.tools import check_json_schema

logger = logging.getLogger(__name__)

DROPPED_TOOL_TYPES = frozenset(
    {"local_shell", "web_search", "web_search_preview", "tool_search", "custom"}
)
"""Tool types Codex CLI sends by its own defaults: its `local_shell` tool, the hosted web
search (sent on every request), client-side `tool_search`, and the freeform `custom` tools
(`apply_patch` with a Lark grammar, the code-mode `exec`), whose raw-text input a chat tool-call
parser cannot carry (Codex also recognises `apply_patch` run through its shell tool)."""


class _Base(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FunctionTool(_Base):
    """A `function` tool (the Responses shape: `name` at the top, not under `function`)."""

    type: Literal["function"]
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _schema(cls, v: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        return None if v is None else check_json_schema(v, info)


class OtherTool(_Base):
    """A tool of any other type (hosted or built-in): dropped or refused by its type."""

    type: str


def _tag(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return {"function": "FunctionTool", "namespace": "NamespaceTool"}.get(str(kind), "OtherTool")


if TYPE_CHECKING:
    MemberTool = FunctionTool | OtherTool
else:
    MemberTool = Annotated[
        Union[Annotated[FunctionTool, Tag("FunctionTool")], Annotated[OtherTool, Tag("OtherTool")]],  # noqa: UP007
        Discriminator(_tag),
    ]


class NamespaceTool(_Base):
    """A `namespace` of tools (not nested further)."""

    type: Literal["namespace"]
    name: str = Field(min_length=1)
    description: str | None = None
    tools: list[MemberTool]


if TYPE_CHECKING:
    Tool = FunctionTool | NamespaceTool | OtherTool
else:
    Tool = Annotated[
        Union[  # noqa: UP007
            Annotated[FunctionTool, Tag("FunctionTool")],
            Annotated[NamespaceTool, Tag("NamespaceTool")],
            Annotated[OtherTool, Tag("OtherTool")],
        ],
        Discriminator(_tag),
    ]


class FunctionChoice(_Base):
    """`tool_choice: {"type": "function", "name": ...}`."""

    type: Literal["function"]
    name: str = Field(min_length=1)


@dataclass
class Toolset:
    """The request's tools as the chat path and the Response see them.

    Attributes:
        chat: chat `tools` entries.
        echo: the Responses tools kept (functions, and namespaces with their kept functions).
        namespaces: function name -> its namespace, for the functions of a namespace.
    """

    chat: list[dict[str, Any]] = field(default_factory=list)
    echo: list[dict[str, Any]] = field(default_factory=list)
    namespaces: dict[str, str] = field(default_factory=dict)

    def add(self, tools: list[Tool], where: str) -> None:
        """Add `tools` (given at request path `where`, e.g. `tools` or `input[0].tools`).

        Raises:
            OpenAIError: 400 at `<where>[i].type` for a type neither served nor dropped; at
                `<where>[i].name` for a function name declared twice.
        """
        for i, tool in enumerate(tools):
            if isinstance(tool, NamespaceTool):
                kept = self._functions(tool.tools, f"{where}[{i}].tools", tool.name)
                if kept:
                    self.echo.append(tool.model_dump(exclude={"tools"}) | {"tools": kept})
            else:
                self.echo += self._functions([tool], where, None, i)

    def _functions(
        self, tools: list[MemberTool], where: str, namespace: str | None, first: int = 0
    ) -> list[dict[str, Any]]:
        kept = []
        for i, tool in enumerate(tools, first):
            if not isinstance(tool, FunctionTool):
                _drop_or_refuse(tool.type, f"{where}[{i}]")
                continue
            if any(t["function"]["name"] == tool.name for t in self.chat):
                raise OpenAIError(
                    f"function {tool.name!r} is declared twice; give each tool its own name",
                    param=f"{where}[{i}].name",
                )
            spec = tool.model_dump(exclude={"type"}, exclude_none=True)
            self.chat.append({"type": "function", "function": spec})
            kept.append(tool.model_dump())
            if namespace is not None:
                self.namespaces[tool.name] = namespace
        return kept


def _drop_or_refuse(kind: str, where: str) -> None:
    if kind not in DROPPED_TOOL_TYPES:
        raise OpenAIError(
            f"{where} has type {kind!r}, which this server does not provide: only 'function' "
            "tools (also inside a 'namespace') are served; remove it or declare it as a function",
            param=f"{where}.type",
        )
    logger.warning("responses: %s of type %r dropped (not served)", where, kind)


def translate_tool_choice(
    choice: str | FunctionChoice | None, tools: Toolset
) -> str | dict[str, Any] | None:
    """`tool_choice` as chat's (`{"type": "function", "function": {"name"}}` for a named one).

    Raises:
        OpenAIError: 400 at `tool_choice.name` naming a function that is not among the tools.
    """
    if not isinstance(choice, FunctionChoice):
        return choice
    names = [t["function"]["name"] for t in tools.chat]
    if choice.name not in names:
        known = ", ".join(names) or "none declared"
        raise OpenAIError(
            f"tool_choice names function {choice.name!r}, which is not in tools ({known})",
            param="tool_choice.name",
        )
    return {"type": "function", "function": {"name": choice.name}}
