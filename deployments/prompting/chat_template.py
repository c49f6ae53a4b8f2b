"""Chat messages (with tools) -> prompt text: the checkpoint's chat template, or the family's
own prompt encoder where the model ships code instead of a template.

Tools and tool results are rendered by the checkpoint's template (`apply_chat_template(...,
tools=...)`, transformers "Chat templates" docs). A template without tool support (SmolLM2's
has none) is replaced, for requests that involve tools, by a per-family template: the shipped
`templates/chatml_tools.jinja` for ChatML models (Hermes format, read by the `hermes` parser),
or the file named by the deployment's `tool_chat_template`.

DeepSeek-V3.2 and V4 ship no Jinja template: their prompt is built by the Python encoder that
comes with the weights (`encoding/encoding_dsv4.py`), which `deployments.prompting.encoders`
renders as our own code, selected by the model's `family`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deployments.prompting.encoders import ENCODERS, OptionError, resolve_options
from deployments.protocol.errors import OpenAIError

SHIPPED_TEMPLATES = Path(__file__).resolve().parent / "templates"

_RESERVED_KWARGS = frozenset(
    {"messages", "tools", "documents", "chat_template", "tokenize", "add_generation_prompt"}
    | {"continue_final_message", "return_dict", "tokenizer", "kwargs"}
)
"""`apply_chat_template`'s own arguments: not template variables a request may set."""


@dataclass(frozen=True)
class PromptOptions:
    """A request's knobs for the prompt.

    Attributes:
        chat_template_kwargs: extra template variables (`thinking`, `enable_thinking`,
            `reasoning_effort`, `drop_thinking`, ...), as vLLM's `chat_template_kwargs`.
        reasoning_effort: OpenAI's `reasoning_effort` (`none`, `low`, `medium`, `high`, ...).
        response_schema: the `response_format` JSON schema, for encoders that write it into the
            prompt (DeepSeek-V4's `## Response Format` section); None without one.
    """

    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    reasoning_effort: str | None = None
    response_schema: dict[str, Any] | None = None


class ChatTemplate:
    """Renders chat prompts for one tokenizer.

    Args:
        tokenizer: the checkpoint's tokenizer (its `chat_template` is the default).
        tool_template: path of a Jinja template for tool requests, or None for the default.
        family: the model's family; one with a prompt encoder in
            `deployments.prompting.encoders.ENCODERS` (`deepseek_v4`, `deepseek_v32`) is rendered by
            it instead of a Jinja template.

    Raises:
        ValueError: `tool_template` names a file that does not exist.
    """

    def __init__(
        self, tokenizer: Any, tool_template: str | None = None, family: str | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self.encoder = ENCODERS.get(family or "")
        own = tokenizer.chat_template or ""
        self.native_tools = "tools" in own or self.encoder is not None
        path: Path | None = Path(tool_template) if tool_template else None
        if path is None and "<|im_start|>" in own:
            path = SHIPPED_TEMPLATES / "chatml_tools.jinja"
        if path is not None and not path.is_file():
            raise ValueError(f"tool_chat_template {str(path)!r} does not exist")
        self.tool_template = path.read_text() if path is not None else None

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        options: PromptOptions | None = None,
    ) -> str:
        """The prompt text.

        A trailing assistant message is continued (assistant prefill); otherwise the generation
        prompt is appended.

        Raises:
            OpenAIError: 400 when tools are involved and no tool-capable template exists, when
                `chat_template_kwargs` sets one of `apply_chat_template`'s own arguments, or when
                the template or encoder rejects the messages or options.
        """
        options = options or PromptOptions()
        if self.encoder is not None:
            return self._encode(messages, tools, options)
        involves_tools = bool(tools) or any(
            m["role"] == "tool" or m.get("tool_calls") for m in messages
        )
        template = None
        if involves_tools and not self.native_tools:
            if self.tool_template is None:
                raise OpenAIError(
                    "this model's chat template has no tool support; set tool_chat_template in "
                    "its deployment config",
                    param="tools",
                )
            template = self.tool_template
        extra = dict(options.chat_template_kwargs)
        clash = sorted(_RESERVED_KWARGS & set(extra))
        if clash:
            raise OpenAIError(
                f"chat_template_kwargs may not set {', '.join(clash)}: use the request's own "
                "fields",
                param="chat_template_kwargs",
            )
        if options.reasoning_effort is not None:
            extra.setdefault("reasoning_effort", options.reasoning_effort)
        prefill = messages[-1]["role"] == "assistant"
        try:
            return self.tokenizer.apply_chat_template(
                messages,
                tools=tools or None,
                chat_template=template,
                tokenize=False,
                add_generation_prompt=not prefill,
                continue_final_message=prefill,
                **extra,
            )
        except Exception as exc:  # jinja errors raised by the model's own template
            raise OpenAIError(
                f"the chat template rejected the messages: {exc}", param="messages"
            ) from None

    def _encode(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        options: PromptOptions,
    ) -> str:
        assert self.encoder is not None, "no prompt encoder for this family"
        try:
            resolved = resolve_options(
                options.chat_template_kwargs, options.reasoning_effort, options.response_schema
            )
        except OptionError as exc:
            raise OpenAIError(str(exc), param=exc.param) from None
        try:
            return self.encoder(messages, tools, resolved)
        except ValueError as exc:
            raise OpenAIError(
                f"the prompt encoder rejected the messages: {exc}", param="messages"
            ) from None
