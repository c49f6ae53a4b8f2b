"""Typed `tools`, `tool_choice`, `response_format` and assistant `tool_calls` of a chat request.

Shapes follow the OpenAI API reference (Chat Completions: "tools", "tool_choice",
"response_format", "messages[].tool_calls"). Each is validated once, when the request is parsed
at the router's edge; downstream code reads these typed fields and never re-checks shapes.
Unknown extra keys are ignored, as OpenAI and vLLM do. JSON-Schema documents (`parameters`,
`json_schema.schema`) are checked against the JSON-Schema meta-schema (`jsonschema`'s
`validator_for(...).check_schema`, draft named by `$schema`, else 2020-12).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args

import jsonschema
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from configs.policy_config import ToolChoiceKind

JsonObject = dict[str, Any]


class _Base(BaseModel):
    model_config = ConfigDict(extra="ignore")


TYPE_TAG_ERROR = "invalid_type_tag"
"""pydantic error type of an unknown `type` in a `by_type` union."""


def by_type(*models: type[BaseModel]) -> Any:
    """A discriminated union of `models` on their literal `type` field.

    The union's error locations then name each member by its class (which
    `validation.error_param` leaves out of `param`), and an unknown `type` is one error at
    `<field>.type` listing the expected values.
    """
    names = {
        kind: m.__name__ for m in models for kind in get_args(m.model_fields["type"].annotation)
    }

    def tag(value: Any) -> str | None:
        kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
        return names.get(kind) if isinstance(kind, str) else None

    members = tuple(Annotated[m, Tag(m.__name__)] for m in models)
    return Annotated[
        Union[members],  # noqa: UP007 - a tuple of members needs the subscript form
        Discriminator(
            tag,
            custom_error_type=TYPE_TAG_ERROR,
            custom_error_message=f"'type' must be one of {', '.join(map(repr, names))}",
        ),
    ]


LIMIT_ERROR = "limit_exceeded"
"""pydantic error type (and OpenAI error code) of a request over one of its `RequestLimits`."""


def over_limit(what: str, count: int, name: str, info: ValidationInfo) -> None:
    """Raise when `count` exceeds the limit `name` of the `RequestLimits` that the router
    passes as validation context (`{"limits": ...}`); without context nothing is limited.

    Raises:
        PydanticCustomError: `limit_exceeded`, naming the limit.
    """
    limits = (info.context or {}).get("limits")
    limit = getattr(limits, name, None)
    if limit is not None and count > limit:
        raise PydanticCustomError(
            LIMIT_ERROR,
            "{what} has {count}, over the limit of {limit} (request_limits.{name})",
            {"what": what, "count": count, "limit": limit, "name": name},
        )


def check_json_schema(schema: JsonObject, info: ValidationInfo) -> JsonObject:
    """Validate a JSON-Schema document: its size first (`max_schema_bytes`, as compact JSON),
    then against its meta-schema.

    Raises:
        PydanticCustomError: over `max_schema_bytes`.
        ValueError: the document is not a valid JSON Schema (pydantic reports it at the field).
    """
    over_limit(
        "the schema (bytes)",
        len(json.dumps(schema, separators=(",", ":"))),
        "max_schema_bytes",
        info,
    )
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise ValueError(f"not a valid JSON Schema at '/{where}': {exc.message}") from None
    return schema


class FunctionDefinition(_Base):
    """`tools[].function`: any non-empty name works (no pattern is imposed on it)."""

    name: str = Field(min_length=1)
    description: str | None = None
    parameters: JsonObject | None = None
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _schema(cls, v: JsonObject | None, info: ValidationInfo) -> JsonObject | None:
        return None if v is None else check_json_schema(v, info)

    def parameters_schema(self) -> JsonObject:
        """The arguments' JSON Schema; a function without `parameters` takes an empty object."""
        return self.parameters if self.parameters is not None else {"type": "object"}


class ToolDefinition(_Base):
    """One entry of `tools`."""

    type: Literal["function"]
    function: FunctionDefinition

    def as_dict(self) -> JsonObject:
        """The OpenAI tool object, for chat templates and tool-call parsers."""
        return self.model_dump(exclude_none=True)


class NamedFunction(_Base):
    """`tool_choice.function`."""

    name: str = Field(min_length=1)


class NamedToolChoice(_Base):
    """`tool_choice: {"type": "function", "function": {"name": ...}}`."""

    type: Literal["function"]
    function: NamedFunction


ToolChoiceParam = Literal["none", "auto", "required"] | NamedToolChoice
"""What a request may send as `tool_choice`."""

_TOOL_CHOICE: TypeAdapter[ToolChoiceParam | None] = TypeAdapter(ToolChoiceParam | None)
_TOOLS: TypeAdapter[list[ToolDefinition]] = TypeAdapter(list[ToolDefinition])


@dataclass(frozen=True)
class ToolChoice:
    """A request's `tool_choice` with OpenAI's default applied, checked against its `tools`.

    Attributes:
        kind: `none`, `auto`, `required` or `named`.
        function: The forced function's name when `kind == "named"`, else None.
    """

    kind: ToolChoiceKind
    function: str | None = None

    @classmethod
    def resolve(
        cls, value: ToolChoiceParam | None, tools: list[ToolDefinition] | None
    ) -> ToolChoice:
        """Apply the default and check `value` against `tools`.

        Args:
            value: The validated `tool_choice`; None is OpenAI's default (`auto` with tools,
                `none` without).
            tools: The validated `tools`.

        Raises:
            ValueError: `required` or a named function without tools, or a named function that
                is not among the tools.
        """
        names = [t.function.name for t in tools or ()]
        if value is None:
            return cls("auto" if names else "none")
        if isinstance(value, str):
            if value == "required" and not names:
                raise ValueError("tool_choice 'required' needs a non-empty 'tools' list")
            return cls(value)
        name = value.function.name
        if name not in names:
            known = ", ".join(names) or "none declared"
            raise ValueError(
                f"tool_choice names function {name!r}, which is not in tools ({known})"
            )
        return cls("named", name)


def parse_tool_choice(value: Any, tools: list[JsonObject] | None) -> ToolChoice:
    """Validate raw `tool_choice` and `tools` values (outside a request: the `parse-tools` CLI,
    recorded cases) with the same models a request uses.

    Raises:
        ValueError: either value is malformed, or they do not fit together (`ToolChoice.resolve`).
    """
    typed = None if tools is None else _TOOLS.validate_python(tools)
    return ToolChoice.resolve(_TOOL_CHOICE.validate_python(value), typed)


def check_json_text(text: str, what: str) -> None:
    """Check that a non-blank string is JSON (a blank one stands for `{}`).

    Raises:
        ValueError: naming `what`, when it is not JSON or nests too deeply to read (the
            `RecursionError` pydantic would not catch, a 500 otherwise).
    """
    if not text.strip():
        return
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} are not JSON: {exc}") from None
    except RecursionError:
        raise ValueError(f"{what} nest too deeply to be read") from None


class FunctionCall(_Base):
    """`messages[].tool_calls[].function`: `arguments` is a JSON object, or a string of JSON.

    The string should hold an object; other JSON (`"[]"`, `"null"`, `"42"`, which clients replay
    from models that wrote it) is accepted, as vLLM accepts it (`arguments_object`). A string that
    is not JSON is refused.
    """

    name: str = Field(min_length=1)
    arguments: JsonObject | str = Field(default_factory=dict)

    @field_validator("arguments")
    @classmethod
    def _json(cls, v: JsonObject | str) -> JsonObject | str:
        if isinstance(v, str):
            check_json_text(v, "tool call arguments")
        return v

    def arguments_object(self) -> JsonObject | None:
        """The arguments as an object, as chat templates expect (an empty string is `{}`).

        Returns:
            The object, or None when the arguments are JSON but not an object.
        """
        if isinstance(self.arguments, dict):
            return self.arguments
        parsed = json.loads(self.arguments) if self.arguments.strip() else {}
        return parsed if isinstance(parsed, dict) else None


class ToolCall(_Base):
    """One assistant `tool_calls` entry of the history."""

    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: FunctionCall


class ResponseFormatText(_Base):
    """`response_format: {"type": "text"}`."""

    type: Literal["text"]


class ResponseFormatJsonObject(_Base):
    """`response_format: {"type": "json_object"}`: any JSON object."""

    type: Literal["json_object"]


class JsonSchemaSpec(_Base):
    """`response_format.json_schema`: `schema` is required here (the grammar needs one)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    name: str = "response"
    description: str | None = None
    schema_: JsonObject = Field(alias="schema")
    strict: bool | None = None

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: JsonObject, info: ValidationInfo) -> JsonObject:
        return check_json_schema(v, info)


class ResponseFormatJsonSchema(_Base):
    """`response_format: {"type": "json_schema", "json_schema": {...}}`."""

    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


if TYPE_CHECKING:  # the type checker reads the plain union; pydantic the discriminated one
    ResponseFormat = ResponseFormatText | ResponseFormatJsonObject | ResponseFormatJsonSchema
else:
    ResponseFormat = by_type(ResponseFormatText, ResponseFormatJsonObject, ResponseFormatJsonSchema)
"""`response_format`, discriminated by `type`."""


def response_format_schema(response_format: ResponseFormat | None) -> JsonObject | None:
    """The JSON Schema constrained decoding enforces for `response_format`; None for text."""
    if isinstance(response_format, ResponseFormatJsonObject):
        return {"type": "object"}
    if isinstance(response_format, ResponseFormatJsonSchema):
        return response_format.json_schema.schema_
    return None
