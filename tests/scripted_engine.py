"""A scripted engine for tests: the real `LLMEngine`, made to write the text a request names.

Selected by a model deployment's `engine_class: tests.scripted_engine:ScriptedEngine`. A request
whose prompt holds `script_marker(text)` (e.g. as its user message) gets exactly `text` as its
output: a constraint lets only the script's next token through, while the real model still runs
every step and the real detokenizer, tool parser and HTTP layers see the tokens. The script's end
finishes the request with `stop`, unless `max_tokens` ends it first (`length`): a test cuts an
output short by asking for `script_tokens(tokenizer, text)` tokens or fewer. Other requests run as
usual.

This is for outputs the tiny real model would never write (a bare JSON tool call, a call cut off
by `max_tokens`), through the whole serving path.
"""

from __future__ import annotations

import base64
import re
from dataclasses import replace
from typing import Any

import torch

from deployments.prompting.tokenizer import load_tokenizer
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

_MARKER = re.compile(r"SCRIPT\[([A-Za-z0-9+/=]+)\]")


def script_marker(text: str) -> str:
    """The prompt text that makes a `ScriptedEngine` write `text`."""
    return f"SCRIPT[{base64.b64encode(text.encode('utf-8')).decode('ascii')}]"


def script_tokens(tokenizer: Any, text: str) -> int:
    """How many tokens a `ScriptedEngine` with this tokenizer writes for `text`."""
    return len(tokenizer.encode(text, add_special_tokens=False))


class ScriptConstraint:
    """A `TokenConstraint` that allows only the script's next token.

    Args:
        token_ids: The script's tokens.
        terminates: Whether the script's end finishes the request (`stop`); False when
            `max_tokens` ends it at the script's end or before (`length`).
    """

    def __init__(self, token_ids: list[int], terminates: bool) -> None:
        self._ids = token_ids
        self._next = 0
        self._terminates = terminates

    def mask_logits(self, logits: torch.Tensor) -> None:
        """See `TokenConstraint.mask_logits`."""
        assert self._next < len(self._ids), "asked for a token past the script's end"
        logits.fill_(float("-inf"))
        logits[:, self._ids[self._next]] = 0.0

    def accept(self, token_id: int) -> None:
        """See `TokenConstraint.accept`."""
        assert token_id == self._ids[self._next], f"token {token_id} is not the script's"
        self._next += 1

    def is_terminated(self) -> bool:
        """See `TokenConstraint.is_terminated`."""
        return self._terminates and self._next == len(self._ids)


class ScriptedEngine(LLMEngine):
    """`LLMEngine` that follows the script a request's prompt names (same constructor)."""

    def __init__(self, checkpoint: str, *args: Any, **kwargs: Any) -> None:
        """See `LLMEngine.__init__`; also loads the checkpoint's tokenizer (for the scripts)."""
        super().__init__(checkpoint, *args, **kwargs)
        self._tokenizer = load_tokenizer(checkpoint)

    def add_request(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams, *rest: Any
    ) -> None:
        """See `LLMEngine.add_request` (`rest`: its further arguments, passed on); a scripted
        request's own constraint is replaced by its script."""
        found = _MARKER.search(self._tokenizer.decode(prompt_token_ids))
        if found is not None:
            text = base64.b64decode(found.group(1)).decode("utf-8")
            ids = self._tokenizer.encode(text, add_special_tokens=False)
            params = replace(params, constraint=ScriptConstraint(ids, len(ids) < params.max_tokens))
        super().add_request(request_id, prompt_token_ids, params, *rest)
