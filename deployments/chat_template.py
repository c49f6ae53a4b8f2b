"""Chat messages (with tools) -> prompt text, through the tokenizer's own chat template.

Tools and tool results are rendered by the checkpoint's template (`apply_chat_template(...,
tools=...)`, transformers "Chat templates" docs). A template without tool support (SmolLM2's
has none) is replaced, for requests that involve tools, by a per-family template: the shipped
`templates/chatml_tools.jinja` for ChatML models (Hermes format, read by the `hermes` parser),
or the file named by the deployment's `tool_chat_template`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deployments.protocol.errors import OpenAIError

SHIPPED_TEMPLATES = Path(__file__).resolve().parent / "templates"


class ChatTemplate:
    """Renders chat prompts for one tokenizer.

    Args:
        tokenizer: the checkpoint's tokenizer (its `chat_template` is the default).
        tool_template: path of a Jinja template for tool requests, or None for the default.

    Raises:
        ValueError: `tool_template` names a file that does not exist.
    """

    def __init__(self, tokenizer: Any, tool_template: str | None = None) -> None:
        self.tokenizer = tokenizer
        own = tokenizer.chat_template or ""
        self.native_tools = "tools" in own
        path: Path | None = Path(tool_template) if tool_template else None
        if path is None and "<|im_start|>" in own:
            path = SHIPPED_TEMPLATES / "chatml_tools.jinja"
        if path is not None and not path.is_file():
            raise ValueError(f"tool_chat_template {str(path)!r} does not exist")
        self.tool_template = path.read_text() if path is not None else None

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        """The prompt text.

        A trailing assistant message is continued (assistant prefill); otherwise the generation
        prompt is appended.

        Raises:
            OpenAIError: 400 when tools are involved and no tool-capable template exists, or
                when the template rejects the messages.
        """
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
        prefill = messages[-1]["role"] == "assistant"
        try:
            return self.tokenizer.apply_chat_template(
                messages,
                tools=tools or None,
                chat_template=template,
                tokenize=False,
                add_generation_prompt=not prefill,
                continue_final_message=prefill,
            )
        except Exception as exc:  # jinja errors raised by the model's own template
            raise OpenAIError(
                f"the chat template rejected the messages: {exc}", param="messages"
            ) from None
