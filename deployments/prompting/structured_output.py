"""Grammars for guaranteed `tool_choice` and `response_format`, compiled with xgrammar.

* a named function: the output is that function's arguments object (its JSON schema);
* `"required"`: a non-empty JSON array of `{"name": ..., "parameters": {...}}` calls, one
  alternative per tool (vLLM's required-tool-choice contract, read by
  `toolcalls.forced.RequiredListParser`); at most one item when `parallel_tool_calls` is false;
* `response_format` `json_object` (any JSON object) and `json_schema` (that schema).

Families whose tool calls are not JSON (DeepSeek-V3.2/V4's DSML) are constrained to their own
markup instead (`NATIVE_TOOL_FORMATS`): xgrammar's built-in structural tag for the model
(`xgrammar.get_model_structural_tag`) admits exactly one DSML block of invokes of the allowed
tools, each parameter typed by the tool's schema, so the family's own parser reads the output.

Grammars are compact JSON (`any_whitespace=False`) so a small model cannot stall in whitespace.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import xgrammar as xgr

from deployments.protocol.errors import OpenAIError
from deployments.protocol.tools import ToolChoice, ToolDefinition
from deployments.toolcalls.registry import NATIVE_TOOL_FORMATS
from engine.constraints import GrammarConstraint
from engine.wire import SharedText

_NATIVE_MAX_WHITESPACE = 1
"""Whitespace characters allowed between DSML tags: the format writes one newline, and a
small model must not stall in whitespace."""


def native_tool_choice_tag(
    parser_name: str,
    choice: ToolChoice,
    tools: list[dict[str, Any]],
    parallel: bool | None,
    thinking: bool,
) -> str | None:
    """The structural tag (JSON) that constrains `choice` to the family's own call markup.

    Args:
        parser_name: the model's tool parser; only those in `NATIVE_TOOL_FORMATS` have one.
        choice: the resolved tool choice; only `required` and named choices are constrained.
        tools: the request's OpenAI tool objects.
        parallel: `parallel_tool_calls`; False admits one invoke.
        thinking: the prompt opened reasoning (`<think>`): reasoning text, then `</think>`,
            comes before the call block.

    Returns:
        None when the parser has no native format or the choice is not constrained.
    """
    fmt = NATIVE_TOOL_FORMATS.get(parser_name)
    if fmt is None or choice.kind not in ("required", "named"):
        return None
    tool_choice: Any = "required"
    if choice.kind == "named":
        tool_choice = {"type": "function", "function": {"name": choice.function}}
    tag = xgr.get_model_structural_tag(
        fmt,
        tools=tools,
        tool_choice=tool_choice,
        reasoning=thinking,
        force_reasoning=thinking,
        max_whitespace_cnt=_NATIVE_MAX_WHITESPACE,
        parallel_tool_calls=parallel is not False,
    )
    return json.dumps(tag.model_dump(), ensure_ascii=False)


def tool_choice_schema(
    choice: ToolChoice, tools: list[ToolDefinition], parallel: bool | None
) -> dict[str, Any] | None:
    """The JSON schema constrained decoding enforces for `choice`, or None (unconstrained)."""
    by_name = {t.function.name: t.function for t in tools}
    if choice.kind == "named":
        assert choice.function is not None, "a named choice without a name"
        return by_name[choice.function].parameters_schema()
    if choice.kind != "required":
        return None
    items = [
        {
            "type": "object",
            "properties": {"name": {"const": name}, "parameters": fn.parameters_schema()},
            "required": ["name", "parameters"],
            "additionalProperties": False,
        }
        for name, fn in by_name.items()
    ]
    schema: dict[str, Any] = {"type": "array", "items": {"anyOf": items}, "minItems": 1}
    if parallel is False:
        schema["maxItems"] = 1
    return schema


# xgrammar's messages start with its log prefix, `[hh:mm:ss] /path/file.cc:123: `, and checks
# add `Check failed: (expr) is false: `; neither is for a client.
_XGRAMMAR_NOISE = re.compile(r"\[\d\d:\d\d:\d\d\] \S+:\d+: |Check failed: \(.*?\) is false: ")


def grammar_error(exc: Exception) -> str:
    """What was wrong with a schema, from an xgrammar exception, for the client."""
    text = _XGRAMMAR_NOISE.sub("", str(exc)).split("The JSON string is:")[0].strip()
    return text[:300] or "the grammar compiler rejected it"


class GrammarFactory:
    """Compiles JSON-schema grammars for one tokenizer (compiled grammars are cached).

    Args:
        tokenizer: the model's Hugging Face tokenizer.
        vocab_size: the model's logits width.
    """

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self._compiler = xgr.GrammarCompiler(info)
        # for constraints that travel to an engine core process (`GrammarConstraint`)
        self._tokenizer_info = functools.cache(lambda: SharedText(info.serialize_json()))
        self._compile = functools.lru_cache(maxsize=256)(self._compile_uncached)
        self._compile_tag = functools.lru_cache(maxsize=64)(self._compiler.compile_structural_tag)

    def _compile_uncached(self, schema_json: str) -> xgr.CompiledGrammar:
        return self._compiler.compile_json_schema(schema_json, any_whitespace=False)

    def tag_constraint(self, tag_json: str, param: str) -> GrammarConstraint:
        """A fresh per-sequence constraint for a structural tag (`native_tool_choice_tag`).

        Raises:
            OpenAIError: 400 naming `param` when a tool's schema cannot be compiled.
        """
        try:
            compiled = self._compile_tag(tag_json)
        except Exception as exc:  # xgrammar raises RuntimeError/ValueError on bad schemas
            raise OpenAIError(
                f"unsupported JSON schema: {grammar_error(exc)}", param=param
            ) from None
        return GrammarConstraint(compiled, self.vocab_size, self._tokenizer_info)

    def constraint(self, schema: dict[str, Any], param: str) -> GrammarConstraint:
        """A fresh per-sequence constraint for `schema`.

        Raises:
            OpenAIError: 400 naming `param` when the schema cannot be compiled.
        """
        try:
            # key order matters: the grammar emits properties in the schema's order
            compiled = self._compile(json.dumps(schema))
        except Exception as exc:  # xgrammar raises RuntimeError/ValueError on bad schemas
            raise OpenAIError(
                f"unsupported JSON schema: {grammar_error(exc)}", param=param
            ) from None
        return GrammarConstraint(compiled, self.vocab_size, self._tokenizer_info)
