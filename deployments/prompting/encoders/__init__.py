"""Prompt encoders for model families that ship Python code instead of a Jinja chat template.

DeepSeek-V3.2 and DeepSeek-V4 build their prompts with `encoding/encoding_dsv32.py` and
`encoding/encoding_dsv4.py` next to the weights; this package renders the same text as our own
code (`shared/research/deepseek-v4.md` §3-§4). `ENCODERS` maps a model family to its encoder;
`resolve_options` turns a request's knobs into `EncodeOptions`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from deployments.prompting.encoders.deepseek_v4 import encode_deepseek_v4
from deployments.prompting.encoders.deepseek_v32 import encode_deepseek_v32
from deployments.prompting.encoders.options import EncodeOptions, OptionError, resolve_options

Encoder = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None, EncodeOptions], str]
"""`(messages, tools, options) -> prompt text`."""

ENCODERS: dict[str, Encoder] = {
    "deepseek_v4": encode_deepseek_v4,
    "deepseek_v32": encode_deepseek_v32,
}
"""Model family -> its prompt encoder."""

__all__ = [
    "ENCODERS",
    "EncodeOptions",
    "Encoder",
    "OptionError",
    "encode_deepseek_v32",
    "encode_deepseek_v4",
    "resolve_options",
]
