"""Grammars for guaranteed `tool_choice` and `response_format`, compiled with xgrammar.

* a named function: the output is that function's arguments object (its JSON schema);
* `"required"`: a non-empty JSON array of `{"name": ..., "parameters": {...}}` calls, one
  alternative per tool (vLLM's required-tool-choice contract, read by
  `toolcalls.forced.RequiredListParser`); at most one item when `parallel_tool_calls` is false;
* `response_format` `json_object` (any JSON object) and `json_schema` (that schema).

Grammars are compact JSON (`any_whitespace=False`) so a small model cannot stall in whitespace.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import xgrammar as xgr

from deployments.protocol.errors import OpenAIError
from deployments.toolcalls.choice import ToolChoice
from engine.constraints import GrammarConstraint


def _parameters(tool: dict[str, Any]) -> dict[str, Any]:
    params = tool.get("function", {}).get("parameters") or {"type": "object", "properties": {}}
    return params


def tool_choice_schema(
    choice: ToolChoice, tools: list[dict[str, Any]], parallel: bool | None
) -> dict[str, Any] | None:
    """The JSON schema constrained decoding enforces for `choice`, or None (unconstrained)."""
    by_name = {t["function"]["name"]: t for t in tools}
    if choice.mode == "function":
        assert choice.function is not None, "a function choice without a name"
        return _parameters(by_name[choice.function])
    if choice.mode != "required":
        return None
    items = [
        {
            "type": "object",
            "properties": {"name": {"const": name}, "parameters": _parameters(tool)},
            "required": ["name", "parameters"],
            "additionalProperties": False,
        }
        for name, tool in by_name.items()
    ]
    schema: dict[str, Any] = {"type": "array", "items": {"anyOf": items}, "minItems": 1}
    if parallel is False:
        schema["maxItems"] = 1
    return schema


def response_format_schema(response_format: dict[str, Any] | None) -> dict[str, Any] | None:
    """JSON schema for `response_format` (`{}` = any object); None for text.

    Raises:
        OpenAIError: 400 for an unknown type or a `json_schema` without a schema.
    """
    if not response_format or response_format.get("type") in (None, "text"):
        return None
    kind = response_format["type"]
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise OpenAIError(
                "response_format json_schema needs json_schema.schema (an object)",
                param="response_format.json_schema.schema",
            )
        return schema
    raise OpenAIError(
        f"unknown response_format type {kind!r}; use text, json_object or json_schema",
        param="response_format.type",
    )


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
        self._compile = functools.lru_cache(maxsize=256)(self._compile_uncached)

    def _compile_uncached(self, schema_json: str) -> xgr.CompiledGrammar:
        return self._compiler.compile_json_schema(schema_json, any_whitespace=False)

    def constraint(self, schema: dict[str, Any], param: str) -> GrammarConstraint:
        """A fresh per-sequence constraint for `schema`.

        Raises:
            OpenAIError: 400 naming `param` when the schema cannot be compiled.
        """
        try:
            # key order matters: the grammar emits properties in the schema's order
            compiled = self._compile(json.dumps(schema))
        except Exception as exc:  # xgrammar raises RuntimeError/ValueError on bad schemas
            raise OpenAIError(f"unsupported JSON schema: {exc}", param=param) from None
        return GrammarConstraint(compiled, self.vocab_size)
