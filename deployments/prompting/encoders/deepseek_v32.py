"""DeepSeek-V3.2's prompt: the layout of the `encoding/encoding_dsv32.py` that ships with the
weights (no Jinja template exists), rendered as our own code.

Source: that encoder (huggingface.co/deepseek-ai/DeepSeek-V3.2, `encoding/encoding_dsv32.py`),
read through its public copies (vLLM `vllm/tokenizers/deepseek_v32_encoding.py`, SGLang
`python/sglang/srt/entrypoints/openai/encoding_dsv32.py`); `shared/research/deepseek-v4.md` §4.

    BOS {system}[\\n\\n## Tools …][\\n\\n## Response Format: …]
    <｜User｜>{user}<｜Assistant｜>{<think>|</think>}[{reasoning}</think>]{content}
    [\\n\\n<｜DSML｜function_calls>…</｜DSML｜function_calls>]EOS
    \\n\\n<function_results>\\n<result>…</result>…\\n</function_results>\\n\\n<think>

- The generation prompt is part of each user turn (`<｜Assistant｜>` then `<think>` for the last
  user turn in thinking mode, else `</think>`) and of the end of each tool-result block.
- Tool results keep their arrival order; a block holds one result per call of its assistant.
- Reasoning is written only for assistant turns after the last user turn (thinking mode);
  `drop_thinking` additionally drops developer messages before that turn. (The reference drops
  them too but then renders past the end of its shortened list and fails; we render the list.)
- The format has no reasoning-effort levels and no assistant prefill.
- The tools section follows the file on the Hub, which separates its paragraphs with blank lines;
  the vLLM and SGLang copies as we read them have none.
"""

from __future__ import annotations

from typing import Any

from deployments.prompting.encoders import dsml
from deployments.prompting.encoders.messages import (
    Message,
    last_user_index,
    read_messages,
    with_system_carrier,
)
from deployments.prompting.encoders.options import EncodeOptions


def tools_section(tools: list[dict[str, Any]]) -> str:
    """The `## Tools` section: DSML instructions and the functions' JSON schemas."""
    schemas = "\n".join(dsml.to_json(tool["function"]) for tool in tools)
    m = dsml.DSML
    block = f"{m}function_calls"
    return "\n".join(
        (
            "## Tools",
            "",
            "You have access to a set of tools you can use to answer the user's question.",
            f'You can invoke functions by writing a "<{block}>" block like the following as '
            "part of your reply to the user:",
            f"<{block}>",
            f'<{m}invoke name="$FUNCTION_NAME">',
            f'<{m}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE'
            f"</{m}parameter>",
            "...",
            f"</{m}invoke>",
            f'<{m}invoke name="$FUNCTION_NAME2">',
            "...",
            f"</{m}invoke>",
            f"</{block}>",
            "",
            "String and scalar parameters should be specified as is without any escaping or "
            'quotes, while lists and objects should use JSON format. The "string" attribute '
            'should be set to "true" for string type parameters and "false" for other types '
            "(numbers, booleans, arrays, objects).",
            "",
            "If the thinking_mode is enabled, then after function results you should strongly "
            "consider outputting a thinking block. Here is an example:",
            "",
            f"<{block}>",
            "...",
            f"</{block}>",
            "",
            "<function_results>",
            "...",
            "</function_results>",
            "",
            f"{dsml.THINK_START}...thinking about results{dsml.THINK_END}",
            "",
            "Here are the functions available in JSONSchema format:",
            "<functions>",
            schemas,
            "</functions>",
            "",
        )
    )


def _check_structure(items: list[Message]) -> list[int]:
    """Each message's 1-based place in its tool-result block (0 for other roles).

    Raises:
        ValueError: a tool message that does not directly follow an assistant message with
            calls (or another tool message), more results than calls, a block that answers
            fewer calls than were made, or a conversation ending with an assistant or system
            message.
    """
    places = [0] * len(items)
    calls = 0
    for k, m in enumerate(items):
        if m.role != "tool":
            continue
        prev = items[k - 1] if k else None
        places[k] = places[k - 1] + 1 if prev is not None and prev.role == "tool" else 1
        if places[k] == 1:
            calls = len(prev.calls) if prev is not None and prev.role == "assistant" else 0
        if places[k] > calls:
            raise ValueError(
                f"messages[{m.index}] is a tool result with no matching call: DeepSeek-V3.2 "
                "takes tool messages right after the assistant message that made the calls"
            )
        if (k + 1 == len(items) or items[k + 1].role != "tool") and places[k] != calls:
            raise ValueError(
                f"messages[{m.index}] ends a tool-result block with {places[k]} of {calls} "
                "results: DeepSeek-V3.2 needs one tool message per call"
            )
    last = items[-1]
    if last.role in ("assistant", "system"):
        raise ValueError(
            f"messages[{last.index}] is a{'n' if last.role == 'assistant' else ''} {last.role} "
            "message: DeepSeek-V3.2's encoder has no assistant prefill, so the conversation must "
            "end with a user, developer or tool message"
        )
    return places


def encode_deepseek_v32(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, options: EncodeOptions
) -> str:
    """DeepSeek-V3.2's prompt for a chat request, ending with the generation prompt.

    Renders what `encode_messages(...)` of the reference encoder renders (see the module
    docstring for the sources), with the tools and `options.response_format` attached to the
    first message when it is a system message, else to an empty system message put in front.
    `options.reasoning_effort` is ignored (V3.2 has no effort levels).

    Args:
        messages: OpenAI-shaped dicts (`deployments.prompting.encoders.messages`).
        tools: OpenAI tool objects to declare, or None to declare none.
        options: thinking mode, thinking retention, response format.

    Returns:
        The prompt text, from `<｜begin▁of▁sentence｜>` to the `<think>` or `</think>` that
        opens the assistant's turn.

    Raises:
        ValueError: naming the message: bad input (see `read_messages`), an empty developer
            message, tool results that do not answer the calls before them one for one, an
            assistant message after the last user turn in thinking mode with neither reasoning
            nor calls, or a conversation ending with an assistant (no prefill in this format) or
            system message.
    """
    items = read_messages(messages)
    items = with_system_carrier(items, bool(tools) or bool(options.response_format))
    thinking = options.thinking
    last_user = last_user_index([m.role for m in items])
    if thinking and options.drop_thinking:
        items = [m for k, m in enumerate(items) if k >= last_user or m.role != "developer"]
        last_user = last_user_index([m.role for m in items])
    places = _check_structure(items)

    parts = [dsml.BOS]
    for k, m in enumerate(items):
        if m.role == "system":
            parts.append(m.content)
            if k == 0 and tools:
                parts.append("\n\n" + tools_section(tools))
            if k == 0 and options.response_format:
                parts.append("\n\n" + dsml.response_format_section(options.response_format))
        elif m.role in ("user", "developer"):
            text = m.content if m.role == "user" else "\n\n# The user's message is: " + m.content
            opens = thinking and k == last_user
            parts.append(
                dsml.USER + text + dsml.ASSISTANT + (dsml.THINK_START if opens else dsml.THINK_END)
            )
        elif m.role == "tool":
            if places[k] == 1:
                parts.append("\n\n<function_results>")
            parts.append(f"\n<result>{m.content}</result>")
            if k + 1 == len(items) or items[k + 1].role != "tool":
                opens = thinking and k >= last_user
                parts.append(
                    "\n</function_results>\n\n" + (dsml.THINK_START if opens else dsml.THINK_END)
                )
        else:
            if thinking and k > last_user:
                if not (m.reasoning or m.calls):
                    raise ValueError(
                        f"messages[{m.index}] is an assistant message after the last user "
                        "message with neither reasoning nor tool calls; thinking mode needs one"
                    )
                parts.append(m.reasoning + dsml.THINK_END)
            parts.append(m.content)
            if m.calls:
                calls = ((c.name, c.arguments) for c in m.calls)
                parts.append(dsml.calls_block("function_calls", calls))
            parts.append(dsml.EOS)
    return "".join(parts)
