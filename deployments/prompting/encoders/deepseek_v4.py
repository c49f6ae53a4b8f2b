"""DeepSeek-V4's prompt: the layout of the `encoding/encoding_dsv4.py` that ships with the
weights (no Jinja template exists), rendered as our own code.

Source: that encoder through its public copies (vLLM `vllm/tokenizers/deepseek_v4_encoding.py`,
SGLang `python/sglang/srt/entrypoints/openai/encoding_dsv4.py`) and its golden tests
(`encoding/tests/test_output_{1,2}.txt`); facts in `shared/research/deepseek-v4.md` §3-§4.

    BOS [effort prefix] {system}[\\n\\n## Tools …][\\n\\n## Response Format: …]
    <｜User｜>{user}<｜Assistant｜>{<think>|</think>}[{reasoning}</think>]{content}[\\n\\n<DSML>]EOS
    <｜User｜><tool_result>…</tool_result>\\n\\n<tool_result>…</tool_result><｜Assistant｜><think>

- There is no tool role: consecutive user and tool messages fold into one user turn, parts
  joined by a blank line, tool results as `<tool_result>` blocks sorted into the order of the
  latest assistant's calls (not arrival order).
- A user or developer turn followed by an assistant turn, or ending the conversation, is closed
  by `<｜Assistant｜>` and `<think>` (thinking mode, when its reasoning is kept) or `</think>`.
- `drop_thinking` (thinking mode only): assistant turns before the last user turn lose their
  reasoning and developer messages before it are dropped. Declared tools turn it off.
"""

from __future__ import annotations

from typing import Any

from deployments.prompting.encoders import dsml, effort
from deployments.prompting.encoders.messages import (
    Message,
    last_user_index,
    read_messages,
    with_system_carrier,
)
from deployments.prompting.encoders.options import EncodeOptions

Turn = list[Message]
"""One rendered turn: a single message, or the user and tool messages folded into a user turn."""


def tools_section(tools: list[dict[str, Any]]) -> str:
    """The `## Tools` section: DSML instructions and one compact JSON per function."""
    schemas = "\n".join(dsml.to_json(tool["function"]) for tool in tools)
    m, start, end = dsml.DSML, dsml.THINK_START, dsml.THINK_END
    return "\n".join(
        (
            "## Tools",
            "",
            "You have access to a set of tools to help answer the user's question. You can "
            f'invoke tools by writing a "<{m}tool_calls>" block like the following:',
            "",
            f"<{m}tool_calls>",
            f'<{m}invoke name="$TOOL_NAME">',
            f'<{m}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE'
            f"</{m}parameter>",
            "...",
            f"</{m}invoke>",
            f'<{m}invoke name="$TOOL_NAME2">',
            "...",
            f"</{m}invoke>",
            f"</{m}tool_calls>",
            "",
            'String parameters should be specified as is and set `string="true"`. For all other '
            "types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
            '`string="false"`.',
            "",
            f"If thinking_mode is enabled (triggered by {start}), you MUST output your complete "
            f"reasoning inside {start}...{end} BEFORE any tool calls or final response.",
            "",
            f"Otherwise, output directly after {end} with tool calls or final response.",
            "",
            "### Available Tool Schemas",
            "",
            schemas,
            "",
            "You MUST strictly follow the above defined tool name and parameter schemas to invoke "
            "tool calls.",
            "",
        )
    )


def _role(turn: Turn) -> str:
    return "user" if turn[0].role == "tool" else turn[0].role


def _fold(messages: list[Message]) -> list[Turn]:
    turns: list[Turn] = []
    for m in messages:
        if m.role in ("user", "tool") and turns and _role(turns[-1]) == "user":
            turns[-1].append(m)
        else:
            turns.append([m])
    return turns


def _sort_results(turns: list[Turn]) -> None:
    """Put each user turn's tool results into the call order of the latest assistant's calls;
    other parts keep their places."""
    order: dict[str, int] = {}
    for turn in turns:
        if turn[0].role == "assistant" and turn[0].calls:
            order = {c.id: k for k, c in enumerate(turn[0].calls) if c.id}
        elif _role(turn) == "user":
            slots = [k for k, m in enumerate(turn) if m.role == "tool"]
            results = sorted((turn[k] for k in slots), key=lambda m: order.get(m.call_id, 0))
            for k, m in zip(slots, results):
                turn[k] = m


def _user_text(turn: Turn) -> str:
    return "\n\n".join(
        f"<tool_result>{m.content}</tool_result>" if m.role == "tool" else m.content for m in turn
    )


def encode_deepseek_v4(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, options: EncodeOptions
) -> str:
    """DeepSeek-V4's prompt for a chat request, ending with the generation prompt.

    Renders what `encode_messages(...)` of the reference encoder renders (see the module
    docstring for the sources) with the tools and `options.response_format` attached to the
    first message when it is a system message, else to an empty system message put in front.

    A trailing assistant message is continued (prefill): it is rendered as the reference renders
    a `wo_eos` assistant message, without `<｜end▁of▁sentence｜>` and without a generation prompt
    after it; in thinking mode its reasoning is closed (`{reasoning}</think>{content}`), so the
    model continues the answer, not the reasoning.

    Args:
        messages: OpenAI-shaped dicts (`deployments.prompting.encoders.messages`).
        tools: OpenAI tool objects (`{"type": "function", "function": {...}}`) to declare, or
            None to declare none (as for `tool_choice="none"`).
        options: thinking mode, effort, thinking retention, response format.

    Returns:
        The prompt text, from `<｜begin▁of▁sentence｜>` to `<｜Assistant｜><think>` or
        `<｜Assistant｜></think>` (or the open prefill).

    Raises:
        ValueError: naming the message: bad input (see `read_messages`), an empty developer
            message, or a conversation that ends with a system message (the reference writes
            no generation prompt after one).
    """
    items = read_messages(messages)
    if items[-1].role == "system":
        raise ValueError(
            f"messages[{items[-1].index}] is a system message: the conversation must end with a "
            "user, developer, tool or assistant message"
        )
    items = with_system_carrier(items, bool(tools) or bool(options.response_format))
    turns = _fold(items)
    _sort_results(turns)
    thinking = options.thinking
    drop = options.drop_thinking and not tools
    last_user = last_user_index([_role(t) for t in turns])
    if thinking and drop:
        turns = [t for k, t in enumerate(turns) if k >= last_user or _role(t) != "developer"]
        last_user = last_user_index([_role(t) for t in turns])

    parts = [dsml.BOS]
    if thinking:
        parts.append(effort.prefix(options.reasoning_effort, options.effort_profile))
    for k, turn in enumerate(turns):
        role, m = _role(turn), turn[0]
        keeps_reasoning = thinking and (not drop or k > last_user)
        if role == "system":
            parts.append(m.content)
            if k == 0 and tools:
                parts.append("\n\n" + tools_section(tools))
            if k == 0 and options.response_format:
                parts.append("\n\n" + dsml.response_format_section(options.response_format))
        elif role == "assistant":
            if keeps_reasoning:
                parts.append(m.reasoning + dsml.THINK_END)
            parts.append(m.content)
            if m.calls:
                parts.append(
                    dsml.calls_block("tool_calls", ((c.name, c.arguments) for c in m.calls))
                )
            if k + 1 < len(turns):
                parts.append(dsml.EOS)
        else:
            parts.append(dsml.USER + (m.content if role == "developer" else _user_text(turn)))
            if k + 1 == len(turns) or _role(turns[k + 1]) == "assistant":
                opens = thinking and (not drop or k >= last_user)
                parts.append(dsml.ASSISTANT + (dsml.THINK_START if opens else dsml.THINK_END))
    return "".join(parts)
