"""OpenAI request bodies for `/v1/chat/completions` and `/v1/completions`.

Field names, types and ranges follow the OpenAI API reference (Chat Completions and legacy
Completions). Explicit JSON `null` means "use the default" for every optional field, and
unknown fields are ignored, as OpenAI does. A few vLLM extensions are accepted
(`top_k`, `ignore_eos`, `stop_token_ids`, `continue_final_message`, `chat_template_kwargs`:
extra variables for the model's chat template or prompt encoder, such as `thinking`;
`priority`, an integer as in vLLM, never null).
`reasoning_effort` is OpenAI's; models with a reasoning mode map it onto theirs. `tools`,
`tool_choice`, `response_format` and assistant `tool_calls` are typed in
`deployments.protocol.tools`. Content parts: `text`, `image_url` and `input_audio` (read by
multimodal models, `deployments.media`; a text model refuses them with a 400), and `file`
(recognised, refused).

A request is validated once, at the router's edge (`deployments.protocol.validation`), and the
validated model travels on to the model replica, whose code reads its typed fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationInfo, field_validator

from configs.policy_config import MediaModality, ResponseFormatKind
from deployments.protocol.tools import (
    ResponseFormat,
    ToolCall,
    ToolChoice,
    ToolChoiceParam,
    ToolDefinition,
    by_type,
    over_limit,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""Integer fields the sampler puts in tensors are bounded, so no value can fail a batch."""

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class _Base(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TextPart(_Base):
    """A `{"type": "text", "text": ...}` content part."""

    type: Literal["text"]
    text: str


class ImageURL(_Base):
    """`image_url` of an image part: a `data:image/...;base64,` URL, or an `http(s)` URL
    (fetched only where the model's `media.allow_urls` is set)."""

    url: str = Field(min_length=1)
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(_Base):
    """A `{"type": "image_url", "image_url": {"url": ..., "detail": ...}}` content part
    (OpenAI Chat Completions; `detail` is accepted and ignored: the model's image processor
    decides the resolution)."""

    modality: ClassVar[MediaModality] = "image"
    type: Literal["image_url"]
    image_url: ImageURL


class InputAudio(_Base):
    """`input_audio` of an audio part: the base64 file and its container format."""

    data: str = Field(min_length=1)
    format: Literal["wav", "mp3", "flac"]


class AudioPart(_Base):
    """A `{"type": "input_audio", "input_audio": {"data": <base64>, "format": ...}}` content
    part (OpenAI Chat Completions)."""

    modality: ClassVar[MediaModality] = "audio"
    type: Literal["input_audio"]
    input_audio: InputAudio


class FilePart(_Base):
    """A `file` content part: recognised so it can be refused with a clear error."""

    type: Literal["file"]


MediaPart = ImagePart | AudioPart
"""The content parts a multimodal model reads besides text."""

if TYPE_CHECKING:  # the type checker reads the plain union; pydantic the discriminated one
    ContentPart = TextPart | ImagePart | AudioPart | FilePart
else:
    ContentPart = by_type(TextPart, ImagePart, AudioPart, FilePart)


class ChatMessage(_Base):
    """One message of the conversation."""

    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    def media_parts(self) -> list[MediaPart]:
        """The image and audio parts of the content, in order (none for string content)."""
        if not isinstance(self.content, list):
            return []
        return [p for p in self.content if isinstance(p, (ImagePart, AudioPart))]

    def text(self) -> str:
        """The content as plain text (text parts joined); '' when there is none.

        Raises:
            ValueError: a non-text part (the message names its type; a multimodal model
                reads image and audio parts with `deployments.media` instead).
        """
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        texts = []
        for part in self.content:
            if not isinstance(part, TextPart):
                raise ValueError(f"content parts of type {part.type!r} are not supported")
            texts.append(part.text)
        return "".join(texts)


def media_parts(messages: list[ChatMessage]) -> list[tuple[str, ChatMessage, MediaPart]]:
    """Every image and audio part of `messages`, in order, with its OpenAI `param`
    (`messages[i].content[j]`) and its message."""
    return [
        (f"messages[{i}].content[{j}]", message, part)
        for i, message in enumerate(messages)
        if isinstance(message.content, list)
        for j, part in enumerate(message.content)
        if isinstance(part, (ImagePart, AudioPart))
    ]


class StreamOptions(_Base):
    """`stream_options`."""

    include_usage: bool | None = None


class _SamplingFields(_Base):
    """Fields shared by chat and legacy completions."""

    model: str | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1, le=INT32_MAX)
    n: int | None = Field(None, ge=1, le=16)
    max_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    stream: StrictBool | None = None  # strict: `wants_stream` reads raw bodies the same way
    stream_options: StreamOptions | None = None
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)  # what torch generators take
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    # OpenAI's cache-routing key; by default the router's session key after `x-session-id`
    prompt_cache_key: str | None = Field(None, max_length=1024)
    ignore_eos: bool | None = None
    stop_token_ids: list[Annotated[int, Field(ge=0, le=INT32_MAX)]] | None = None
    # vLLM's scheduling priority: a lower value is scheduled first, ties first come, first
    # served (`engine.scheduler`); bounded so an out-of-range value is a 400
    priority: int = Field(0, ge=INT32_MIN, le=INT32_MAX)

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list) and len(v) > 16:
            raise ValueError("at most 16 stop sequences")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        for key, bias in (v or {}).items():
            if not key.lstrip("-").isdigit():
                raise ValueError(f"logit_bias key {key!r} is not a token id")
            if not -100.0 <= bias <= 100.0:
                raise ValueError(f"logit_bias value {bias} for token {key} is outside [-100, 100]")
        return v

    def stop_list(self) -> list[str]:
        """Stop strings as a list (empty strings dropped)."""
        stops = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        return [s for s in stops if s]


class ChatCompletionRequest(_SamplingFields):
    """Body of `POST /v1/chat/completions`."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[ToolDefinition] | None = None
    tool_choice: ToolChoiceParam | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    continue_final_message: bool | None = None
    reasoning_effort: str | None = Field(None, max_length=32)
    chat_template_kwargs: dict[str, Any] | None = None

    @field_validator("messages", "tools", mode="before")
    @classmethod
    def _count(cls, v: Any, info: ValidationInfo) -> Any:
        """Counted before the items are validated, so an oversized list costs nothing more."""
        if isinstance(v, list):
            over_limit(str(info.field_name), len(v), f"max_{info.field_name}", info)
        return v

    @field_validator("tool_choice")
    @classmethod
    def _choice_in_tools(
        cls, v: ToolChoiceParam | None, info: ValidationInfo
    ) -> ToolChoiceParam | None:
        ToolChoice.resolve(v, info.data.get("tools"))  # `tools` is validated before this field
        return v

    def resolved_tool_choice(self) -> ToolChoice:
        """`tool_choice` with OpenAI's default applied (checked against `tools` at parse)."""
        return ToolChoice.resolve(self.tool_choice, self.tools)

    def response_format_kind(self) -> ResponseFormatKind:
        """`response_format.type`; `text` when omitted."""
        return self.response_format.type if self.response_format is not None else "text"

    def tool_dicts(self) -> list[dict[str, Any]] | None:
        """`tools` as OpenAI objects (for chat templates and tool-call parsers); None if none."""
        return [t.as_dict() for t in self.tools] if self.tools else None

    def output_limit(self) -> int | None:
        """`max_completion_tokens` wins over the deprecated `max_tokens` (vLLM behaviour)."""
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_SamplingFields):
    """Body of `POST /v1/completions` (legacy)."""

    prompt: str | list[str] | list[int] | list[list[int]]

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt_count(cls, v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, list) and v and isinstance(v[0], (str, list)):
            over_limit("prompt", len(v), "max_prompt_items", info)
        return v

    echo: bool | None = None
    logprobs: int | None = Field(None, ge=0, le=20)
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1)

    def output_limit(self) -> int | None:
        """`max_tokens`."""
        return self.max_tokens
