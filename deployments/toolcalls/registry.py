"""Parser registry: one parser per model family, looked up by name.

Model configs name a parser explicitly or let the model's family pick the default
(`DEFAULT_PARSER_BY_FAMILY`); the `parse-tools` CLI lists `PARSERS`.
"""

from __future__ import annotations

from typing import Any

from deployments.toolcalls.base import ToolParser
from deployments.toolcalls.deepseek_v3 import DeepSeekV3Parser
from deployments.toolcalls.deepseek_v31 import DeepSeekV31Parser
from deployments.toolcalls.dsml import DeepSeekV4Parser, DeepSeekV32Parser
from deployments.toolcalls.hermes import HermesParser
from deployments.toolcalls.llama3_json import Llama3JsonParser
from deployments.toolcalls.mistral import MistralParser
from deployments.toolcalls.phi4_mini import Phi4MiniParser
from deployments.toolcalls.qwen3_coder import Qwen3CoderParser
from deployments.toolcalls.xml_tool import XmlToolParser

PARSERS: dict[str, type[ToolParser]] = {
    "hermes": HermesParser,
    "qwen3_coder": Qwen3CoderParser,
    "deepseek_v3": DeepSeekV3Parser,
    "deepseek_v31": DeepSeekV31Parser,
    "deepseek_v32": DeepSeekV32Parser,
    "deepseek_v4": DeepSeekV4Parser,
    "phi4_mini": Phi4MiniParser,
    "llama3_json": Llama3JsonParser,
    "mistral": MistralParser,
    "xml": XmlToolParser,
}
"""Parser name -> class. Names match the `tool_parser` values of model configs."""

DEFAULT_PARSER_BY_FAMILY: dict[str, str] = {
    "qwen2": "hermes",
    "qwen2_5": "hermes",
    "qwen3": "hermes",
    "qwen3_coder": "qwen3_coder",
    "qwen3_5": "qwen3_coder",
    "deepseek_v2": "deepseek_v3",
    "deepseek_v3": "deepseek_v3",
    "deepseek_r1": "deepseek_v3",
    "deepseek_v31": "deepseek_v31",
    "deepseek_v32": "deepseek_v32",
    "deepseek_v4": "deepseek_v4",
    "phi3": "phi4_mini",
    "phi4": "phi4_mini",
    "llama": "llama3_json",
    "mistral": "mistral",
}
"""Model family -> the parser its chat template's tool-call format needs."""

NATIVE_TOOL_FORMATS: dict[str, str] = {
    "deepseek_v4": "deepseek_v4",
    "deepseek_v32": "deepseek_v3_2",
}
"""Tool parser -> xgrammar's structural-tag format of that markup, for parsers whose
`required` / named calls are constrained to the model's own call syntax
(`deployments.prompting.structured_output`)."""


def get_parser(
    name: str, tools: list[dict[str, Any]] | None = None, prompt_suffix: str = ""
) -> ToolParser:
    """A fresh parser for one response.

    Args:
        name: A key of `PARSERS`.
        tools: The request's OpenAI tool objects (None accepts any function name).
        prompt_suffix: The end of the rendered prompt (a pre-opened `<think>`).

    Raises:
        ValueError: `name` is not a known parser, or a tool has no function name.
    """
    cls = PARSERS.get(name)
    if cls is None:
        raise ValueError(f"unknown tool parser {name!r}; known parsers: {', '.join(PARSERS)}")
    return cls(tools, prompt_suffix)


def default_parser(family: str) -> str:
    """The parser name for a model family.

    Raises:
        ValueError: The family has no default; name a parser explicitly.
    """
    try:
        return DEFAULT_PARSER_BY_FAMILY[family]
    except KeyError:
        known = ", ".join(DEFAULT_PARSER_BY_FAMILY)
        raise ValueError(
            f"no default tool parser for model family {family!r}; known families: {known}; "
            f"or set a parser explicitly (one of {', '.join(PARSERS)})"
        ) from None
