"""Anthropic Messages API request bodies: `POST /v1/messages` and `POST /v1/messages/count_tokens`.

Field names, types and ranges follow the Anthropic API reference ("Messages", "Count tokens") as
the official `anthropic` SDK types them (`anthropic/types/message_create_params.py`,
`message_count_tokens_params.py` and the block, tool and config params they name). Unknown
fields are ignored, as Anthropic's own extensions are here (`cache_control`, `citations`,
`context_management`, `container`, `display`, ...). Blocks and tools this server cannot act on
are refused: a block `type` outside those below at `messages[i].content[j].type` (listing the
accepted ones), an Anthropic server tool (`web_search_20250305`, `bash_20250124`, ...) at
`tools[i].type`.

Rules that span fields (a `tool_choice` naming a declared tool, a thinking budget under
`max_tokens`, which blocks a role may hold) are checked where the body is translated
(`router.apis.anthropic.request`), with errors naming the same paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator
from pydantic_core import PydanticCustomError

from deployments.protocol.requests import INT32_MAX
from deployments.protocol.tools import by_type


class _Base(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TextBlock(_Base):
    """`{"type": "text", "text": ...}`."""

    type: Literal["text"]
    text: str


class Base64Source(_Base):
    """An image's bytes, base64-encoded."""

    type: Literal["base64"]
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


class UrlSource(_Base):
    """An image by URL."""

    type: Literal["url"]
    url: str = Field(min_length=1)


if TYPE_CHECKING:  # the type checker reads the plain union; pydantic the discriminated one
    ImageSource = Base64Source | UrlSource
else:
    ImageSource = by_type(Base64Source, UrlSource)


class ImageBlock(_Base):
    """`{"type": "image", "source": ...}` (a user turn's)."""

    type: Literal["image"]
    source: ImageSource

    def url(self) -> str:
        """The image as a URL: the source's own, or a `data:` URL of its bytes."""
        if isinstance(self.source, UrlSource):
            return self.source.url
        return f"data:{self.source.media_type};base64,{self.source.data}"


class ToolUseBlock(_Base):
    """A call the assistant made (history)."""

    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


if TYPE_CHECKING:
    ToolResultPart = TextBlock | ImageBlock
else:
    ToolResultPart = by_type(TextBlock, ImageBlock)


class ToolResultBlock(_Base):
    """The result of a call, in the user turn after it."""

    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[ToolResultPart] | None = None
    is_error: bool = False


class ThinkingBlock(_Base):
    """The assistant's reasoning (history); `signature` is accepted and not checked."""

    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(_Base):
    """Encrypted reasoning from Anthropic's models: nothing here can read it."""

    type: Literal["redacted_thinking"]
    data: str | None = None


if TYPE_CHECKING:
    ContentBlock = (
        TextBlock
        | ImageBlock
        | ToolUseBlock
        | ToolResultBlock
        | ThinkingBlock
        | RedactedThinkingBlock
    )
else:
    ContentBlock = by_type(
        TextBlock, ImageBlock, ToolUseBlock, ToolResultBlock, ThinkingBlock, RedactedThinkingBlock
    )


class InputMessage(_Base):
    """One entry of `messages` (`system` as the SDK's `SystemMessageParam` takes it too)."""

    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]


class Tool(_Base):
    """A client tool: `type` absent or `custom`.

    `type` is declared first so that a server tool's error names its type before the
    `input_schema` it lacks.
    """

    type: str | None = None
    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any]

    @field_validator("type")
    @classmethod
    def _custom(cls, v: str | None) -> str | None:
        if v not in (None, "custom"):
            raise PydanticCustomError(
                "server_tool",
                "tool type {kind} is an Anthropic server tool, which this server does not run;"
                " declare client tools only (name, description, input_schema)",
                {"kind": repr(v)},  # escaped: pydantic cannot render a lone surrogate
            )
        return v


class ToolChoiceAuto(_Base):
    """The model decides."""

    type: Literal["auto"]
    disable_parallel_tool_use: bool = False


class ToolChoiceAny(_Base):
    """The model calls one of the tools."""

    type: Literal["any"]
    disable_parallel_tool_use: bool = False


class ToolChoiceTool(_Base):
    """The model calls the named tool."""

    type: Literal["tool"]
    name: str = Field(min_length=1)
    disable_parallel_tool_use: bool = False


class ToolChoiceNone(_Base):
    """The model calls no tool."""

    type: Literal["none"]


if TYPE_CHECKING:
    ToolChoice = ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone
else:
    ToolChoice = by_type(ToolChoiceAuto, ToolChoiceAny, ToolChoiceTool, ToolChoiceNone)


class ThinkingEnabled(_Base):
    """Extended thinking with a budget (not enforced here: the chat path has no budget)."""

    type: Literal["enabled"]
    budget_tokens: int = Field(ge=1024)


class ThinkingAdaptive(_Base):
    """The model decides when to think."""

    type: Literal["adaptive"]


class ThinkingBetweenTools(_Base):
    """Thinking between tool calls."""

    type: Literal["between_tools"]


class ThinkingDisabled(_Base):
    """No thinking."""

    type: Literal["disabled"]


if TYPE_CHECKING:
    ThinkingConfig = ThinkingEnabled | ThinkingAdaptive | ThinkingBetweenTools | ThinkingDisabled
else:
    ThinkingConfig = by_type(
        ThinkingEnabled, ThinkingAdaptive, ThinkingBetweenTools, ThinkingDisabled
    )


class JsonOutputFormat(_Base):
    """`output_config.format`: the answer's text is JSON of this schema."""

    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Base):
    """`output_config`."""

    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: JsonOutputFormat | None = None


class Metadata(_Base):
    """`metadata`."""

    user_id: str | None = None


class CountTokensRequest(_Base):
    """Body of `POST /v1/messages/count_tokens`: what shapes the prompt."""

    model: str = Field(min_length=1)
    messages: list[InputMessage] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = None


class MessagesRequest(CountTokensRequest):
    """Body of `POST /v1/messages`."""

    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(None, ge=0.0, le=1.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0, le=INT32_MAX)
    metadata: Metadata | None = None
    stream: StrictBool | None = None

    @field_validator("stop_sequences")
    @classmethod
    def _stop_count(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and len(v) > 16:  # the chat path's limit on `stop`
            raise PydanticCustomError("too_many_stops", "at most 16 stop sequences; send fewer", {})
        return v
