"""Applies a request's `tool_choice` to a model's output, as the OpenAI API defines it.

* `"none"`: text only; markup the model writes anyway comes back as content.
* `"auto"`: the family's parser decides.
* `"required"` / a named function N (kind `named`): enforced by constrained
  decoding when the engine has it (`constrained=True`: the output is a JSON array of calls, or
  N's arguments object, see `forced.py`); otherwise the family's native parser reads the output
  (vllm-project/vllm#39056: a JSON-only `required` path lost native XML calls) and, for a named
  choice, only the first call to N is kept.

`finish_reason` is `"tool_calls"` iff a call was sent, else the engine's reason.
"""

from __future__ import annotations

import logging
from typing import Any

from deployments.protocol.tools import ToolChoice, parse_tool_choice
from deployments.toolcalls.assemble import assemble, finish_reason, parse_text
from deployments.toolcalls.base import ToolParser
from deployments.toolcalls.forced import NamedFunctionParser, RequiredListParser
from deployments.toolcalls.plain import PlainTextParser
from deployments.toolcalls.registry import get_parser

logger = logging.getLogger(__name__)


def parser_for_choice(
    choice: ToolChoice,
    parser_name: str,
    tools: list[dict[str, Any]] | None,
    prompt_suffix: str = "",
    constrained: bool = False,
) -> ToolParser:
    """The parser that reads an output produced under `choice`.

    Args:
        choice: The resolved tool choice.
        parser_name: The family's parser (a key of `registry.PARSERS`).
        tools: The request's tools.
        prompt_suffix: The end of the rendered prompt.
        constrained: Constrained decoding enforced `required` / the named function.

    Raises:
        ValueError: Unknown parser name.
    """
    if choice.kind == "none":
        return PlainTextParser(None, prompt_suffix)
    if constrained and choice.kind == "named":
        assert choice.function is not None, "a named choice without a name"
        return NamedFunctionParser(choice.function, tools, prompt_suffix)
    if constrained and choice.kind == "required":
        return RequiredListParser(tools, prompt_suffix)
    return get_parser(parser_name, tools, prompt_suffix)


def finalize(
    message: dict[str, Any], choice: ToolChoice, engine_finish_reason: str | None = "stop"
) -> dict[str, Any]:
    """Apply `choice` to assembled message fields and add `finish_reason`.

    Args:
        message: `assemble`/`accumulate` output.
        choice: The validated tool choice.
        engine_finish_reason: Why the engine stopped (`"stop"`, `"length"`).

    Returns:
        `message` with `tool_calls` restricted to the choice and a `finish_reason` key.
    """
    calls = list(message["tool_calls"])
    if choice.kind == "none":
        assert not calls, "tool_choice 'none' produced a call"
    if choice.kind == "named":
        kept = [c for c in calls if c["function"]["name"] == choice.function][:1]
        if len(kept) != len(calls):
            logger.warning(
                "tool_choice names %r: dropped %d other call(s)",
                choice.function,
                len(calls) - len(kept),
            )
        calls = kept
    return {
        **message,
        "tool_calls": calls,
        "finish_reason": finish_reason(bool(calls), engine_finish_reason),
    }


def apply_tool_choice(
    raw: str,
    *,
    parser_name: str,
    tools: list[dict[str, Any]] | None,
    tool_choice: Any,
    prompt_suffix: str = "",
    engine_finish_reason: str | None = "stop",
    constrained_output: str | None = None,
) -> dict[str, Any]:
    """Non-streaming: parse `raw` as the server would under `tool_choice`.

    Args:
        raw: The model's complete output text.
        parser_name: The family's parser.
        tools: The request's tools.
        tool_choice: The request's `tool_choice` value.
        prompt_suffix: The end of the rendered prompt.
        engine_finish_reason: Why the engine stopped.
        constrained_output: What constrained decoding let the model emit (e.g. "arguments
            object only"); None or "" when no constraint was in force.

    Returns:
        `{"content", "reasoning_content", "tool_calls", "finish_reason"}`.

    Raises:
        ValueError: Invalid `tool_choice` for `tools`, or an unknown parser.
    """
    choice = parse_tool_choice(tool_choice, tools)
    parser = parser_for_choice(choice, parser_name, tools, prompt_suffix, bool(constrained_output))
    return finalize(assemble(parse_text(parser, raw)), choice, engine_finish_reason)
