"""The body of `POST /v1/responses`, as far as the chat path can serve it.

Field names, item shapes and value sets follow the OpenAI API reference ("Responses: create") and
the `openai` SDK's `types/responses/response_create_params.py`, `response_input_item_param.py`
and `easy_input_message_param.py`. Unknown fields are ignored and explicit `null` means the
default, as for chat (`deployments.protocol.requests`). An input item without `type` but with a
`role` is a message (the SDK's `EasyInputMessage`). Tool types other than `function` are
recognised so that `tools.Toolset` can drop or refuse them by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationInfo, field_validator

from deployments.protocol.tools import by_type, check_json_schema, check_json_text
from router.apis.responses.tools import FunctionChoice, Tool


class _Base(BaseModel):
    model_config = ConfigDict(extra="ignore")


# ---- content parts ---------------------------------------------------------------------------


class TextPart(_Base):
    """`input_text` (any message) or `output_text` (assistant history)."""

    type: Literal["input_text", "output_text"]
    text: str


class RefusalPart(_Base):
    """`refusal` in assistant history: its text is kept as the message's text."""

    type: Literal["refusal"]
    refusal: str


class ImagePart(_Base):
    """`input_image`: becomes a chat `image_url` part (text-only models refuse it)."""

    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: str | None = None


class FilePart(_Base):
    """`input_file`: becomes a chat `file` part, which the chat path refuses."""

    type: Literal["input_file"]


if TYPE_CHECKING:
    ContentPart = TextPart | RefusalPart | ImagePart | FilePart
else:
    ContentPart = by_type(TextPart, RefusalPart, ImagePart, FilePart)


# ---- input items -----------------------------------------------------------------------------


class MessageItem(_Base):
    """A `message` item (or an `EasyInputMessage` without `type`)."""

    type: Literal["message"]
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[ContentPart]


class FunctionCallItem(_Base):
    """A `function_call` the model made earlier: `arguments` is a JSON string."""

    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str

    @field_validator("arguments")
    @classmethod
    def _json(cls, v: str) -> str:
        check_json_text(v, "arguments")
        return v


class _CallOutput(_Base):
    """The result of the call `call_id`: text or content parts."""

    call_id: str = Field(min_length=1)
    output: str | list[ContentPart]


class FunctionCallOutputItem(_CallOutput):
    """A `function_call_output`: the result of the function call `call_id`."""

    type: Literal["function_call_output"]


class CustomToolCallItem(_Base):
    """A `custom_tool_call` made earlier (a freeform tool's raw-text `input`)."""

    type: Literal["custom_tool_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: str


class CustomToolCallOutputItem(_CallOutput):
    """A `custom_tool_call_output`: the result of the custom call `call_id`."""

    type: Literal["custom_tool_call_output"]


class AdditionalToolsItem(_Base):
    """An `additional_tools` item: tools declared in the input (Codex's default model)."""

    type: Literal["additional_tools"]
    tools: list[Tool]


class SummaryText(_Base):
    """One `summary_text` of a reasoning item."""

    type: Literal["summary_text"] = "summary_text"
    text: str


class ReasoningText(_Base):
    """One `reasoning_text` of a reasoning item's `content`."""

    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class ReasoningItem(_Base):
    """A `reasoning` item of the history; `encrypted_content` cannot be read here."""

    type: Literal["reasoning"]
    summary: list[SummaryText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None

    def text(self) -> str:
        """The reasoning as text: its `content`, else its summaries; '' when only encrypted."""
        parts = self.content or self.summary
        return "\n\n".join(p.text for p in parts if p.text)


if TYPE_CHECKING:
    InputItem = (
        MessageItem
        | FunctionCallItem
        | FunctionCallOutputItem
        | CustomToolCallItem
        | CustomToolCallOutputItem
        | ReasoningItem
        | AdditionalToolsItem
    )
else:
    InputItem = by_type(
        MessageItem,
        FunctionCallItem,
        FunctionCallOutputItem,
        CustomToolCallItem,
        CustomToolCallOutputItem,
        ReasoningItem,
        AdditionalToolsItem,
    )


# ---- text format and reasoning ---------------------------------------------------------------


class FormatText(_Base):
    """`text.format: {"type": "text"}`."""

    type: Literal["text"]


class FormatJsonObject(_Base):
    """`text.format: {"type": "json_object"}`."""

    type: Literal["json_object"]


class FormatJsonSchema(_Base):
    """`text.format: {"type": "json_schema", "name", "schema", "strict", "description"}`."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    type: Literal["json_schema"]
    name: str = Field(min_length=1)
    schema_: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        return check_json_schema(v, info)


if TYPE_CHECKING:
    TextFormat = FormatText | FormatJsonObject | FormatJsonSchema
else:
    TextFormat = by_type(FormatText, FormatJsonObject, FormatJsonSchema)


class TextConfig(_Base):
    """`text`: the output's format (`verbosity` is echoed, not acted on)."""

    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
"""The SDK's `ReasoningEffort` values."""


class ReasoningConfig(_Base):
    """`reasoning`: `effort` drives the model's thinking; `summary` is echoed (reasoning comes
    back as `reasoning_text` content, never summarised)."""

    effort: Effort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None


# ---- the request -----------------------------------------------------------------------------


class ResponsesRequest(_Base):
    """Body of `POST /v1/responses`."""

    model: str | None = None
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | FunctionChoice | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    metadata: dict[str, str] | None = Field(None, max_length=16)
    user: str | None = None
    prompt_cache_key: str | None = Field(None, max_length=1024)  # a session key (routing.md)
    store: bool | None = None
    previous_response_id: str | None = None
    stream: StrictBool | None = None  # strict: the ingress reads raw bodies the same way

    @field_validator("input", mode="before")
    @classmethod
    def _easy_messages(cls, v: Any) -> Any:
        """An item with a `role` and no `type` is a message (the SDK's `EasyInputMessage`)."""
        if not isinstance(v, list):
            return v
        return [
            {**item, "type": "message"}
            if isinstance(item, dict) and item.get("type") is None and "role" in item
            else item
            for item in v
        ]

    @field_validator("input")
    @classmethod
    def _some_input(cls, v: str | list[InputItem] | None) -> str | list[InputItem] | None:
        if isinstance(v, list) and not v:
            raise ValueError("input must have at least one item")
        return v
