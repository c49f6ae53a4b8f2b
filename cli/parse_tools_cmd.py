"""`ascend-router parse-tools`: parse a raw model output with a tool-call parser.

For the operator whose tool calls "don't work": feed the exact text the model produced (or the
chunks it streamed) and see what the server makes of it::

    ascend-router parse-tools --parser hermes --tools tools.json < raw.txt
    ascend-router parse-tools --parser qwen3_coder --stream-chunks < chunks.json
    ascend-router parse-tools --family deepseek_v4 --prompt-suffix '<think>' < raw.txt
    ascend-router parse-tools --list

Prints one JSON object `{"content", "reasoning_content", "tool_calls": [{"name", "arguments"}],
"finish_reason"}`: the message the server answers for that output (with `--stream-chunks`, fed in
those chunks as the server feeds the engine's deltas; a call voided after its arguments began to
stream is left out, its text in `content`). Exit status 0 when the text was parsed (calls or
not), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from deployments.toolcalls.registry import (
    DEFAULT_PARSER_BY_FAMILY,
    NATIVE_TOOL_FORMATS,
    PARSERS,
    default_parser,
)


class UsageError(Exception):
    """Bad command-line input; the message is printed on one line and the exit status is 2."""


def register(subparsers: Any) -> None:
    """Add the `parse-tools` sub-command to the top-level parser's subparsers."""
    parser = subparsers.add_parser(
        "parse-tools",
        help="parse a raw model output (stdin) with a tool-call parser",
        description="Parse a raw model output read from stdin with a tool-call parser and print "
        "the resulting message as JSON.",
    )
    parser.add_argument("--parser", help=f"parser name, one of: {', '.join(PARSERS)}")
    parser.add_argument(
        "--family",
        help="model family (as in a model config's `family`); its default parser is used: "
        + ", ".join(f"{f} -> {p}" for f, p in DEFAULT_PARSER_BY_FAMILY.items()),
    )
    parser.add_argument("--tools", metavar="FILE", help="JSON file: array of OpenAI tool objects")
    parser.add_argument(
        "--tool-choice",
        metavar="JSON",
        help='the request\'s tool_choice: "none", "auto", "required" or '
        '{"type": "function", "function": {"name": ...}}',
    )
    parser.add_argument(
        "--prompt-suffix",
        default="",
        metavar="TEXT",
        help="end of the rendered prompt, e.g. a pre-opened '<think>\\n'",
    )
    parser.add_argument(
        "--stream-chunks",
        action="store_true",
        help="stdin is a JSON array of text chunks, fed through the streaming path",
    )
    parser.add_argument(
        "--constrained",
        action="store_true",
        help="the output was produced under constrained decoding for 'required' (a JSON "
        "array of calls) or a named function (its arguments); DSML parsers are constrained "
        "to their own markup, so this changes nothing for them",
    )
    parser.add_argument(
        "--engine-finish-reason",
        default="stop",
        choices=("stop", "length"),
        help="why the engine stopped (default: stop)",
    )
    parser.add_argument("--list", action="store_true", help="print the parser names and exit")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the sub-command; returns the exit status."""
    if args.list:
        print("\n".join(PARSERS))
        return 0
    try:
        result = _parse(args)
    except UsageError as exc:
        print(f"ascend-router parse-tools: error: {exc}", file=sys.stderr)
        return 2
    _write(json.dumps(result, ensure_ascii=False) + "\n")
    return 0


def _parser_name(args: argparse.Namespace) -> str:
    """The parser named by `--parser`, or the default of the `--family` given."""
    if args.parser and args.family:
        raise UsageError("give --parser or --family, not both")
    if args.family:
        try:
            return default_parser(args.family)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if not args.parser:
        raise UsageError("--parser or --family is required (see --list)")
    if args.parser not in PARSERS:
        raise UsageError(f"unknown parser {args.parser!r}; known parsers: {', '.join(PARSERS)}")
    return str(args.parser)


def _parse(args: argparse.Namespace) -> dict[str, Any]:
    # the request and streaming models are pydantic: imported when parsing, not for `--help`
    from deployments.protocol.tools import parse_tool_choice
    from deployments.streaming.tool_output import ToolOutput
    from deployments.toolcalls.assemble import accumulate, assemble, parse_text
    from deployments.toolcalls.choice import finalize, parser_for_choice

    name = _parser_name(args)
    tools = _load_tools(args.tools) if args.tools else None
    try:
        choice = parse_tool_choice(_tool_choice(args.tool_choice), tools)
        json_shaped = args.constrained and name not in NATIVE_TOOL_FORMATS  # as the server does
        parser = parser_for_choice(choice, name, tools, args.prompt_suffix, json_shaped)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    text = _read_stdin()
    if args.stream_chunks:  # the server's own path for engine deltas
        output = ToolOutput(parser)
        deltas = [delta for chunk in _chunks(text) for delta in output.push(chunk)]
        deltas += output.finish(args.engine_finish_reason)[0]
        message = accumulate(deltas, output.voided)
    else:
        message = assemble(parse_text(parser, text))
    message = finalize(message, choice, args.engine_finish_reason)
    calls = [
        {"name": c["function"]["name"], "arguments": _arguments(c["function"]["arguments"])}
        for c in message["tool_calls"]
    ]
    return {
        "content": message["content"],
        "reasoning_content": message["reasoning_content"],
        "tool_calls": calls,
        "finish_reason": message["finish_reason"],
    }


def _load_tools(path: str) -> list[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as f:
            tools = json.load(f)
    except OSError as exc:
        raise UsageError(f"cannot read tools file {path!r}: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"tools file {path!r} is not JSON: {exc}") from None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise UsageError(f"tools file {path!r} must hold a JSON array of tool objects")
    return tools


def _tool_choice(value: str | None) -> Any:
    if value is None:
        return "auto"
    if value in ("none", "auto", "required"):  # accepted without JSON quotes
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--tool-choice is not JSON: {exc}") from None


def _read_stdin() -> str:
    raw = getattr(sys.stdin, "buffer", None)  # bytes, so the locale cannot garble tokens
    if raw is None:
        return sys.stdin.read()
    data: bytes = raw.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"stdin is not UTF-8: {exc}") from None


def _chunks(text: str) -> list[str]:
    try:
        chunks = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--stream-chunks needs a JSON array of strings on stdin: {exc}") from None
    if not isinstance(chunks, list) or not all(isinstance(c, str) for c in chunks):
        raise UsageError("--stream-chunks needs a JSON array of strings on stdin")
    return chunks


def _arguments(text: str) -> Any:
    """Decoded arguments (text that is not JSON, which a sent call never has, stays a string)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _write(text: str) -> None:
    raw = getattr(sys.stdout, "buffer", None)
    if raw is None:
        sys.stdout.write(text)
        return
    sys.stdout.flush()
    raw.write(text.encode("utf-8"))
    raw.flush()
