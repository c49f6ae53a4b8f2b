"""Load a checkpoint's own tokenizer (and chat template)."""

from __future__ import annotations

from typing import Any

from transformers import AutoTokenizer

from engine.checkpoint_ref import CheckpointRef
from engine.gguf_cache import loadable


def load_tokenizer(checkpoint: str) -> Any:
    """The tokenizer of a `.gguf` file or checkpoint directory.

    For GGUF files transformers rebuilds the tokenizer and chat template from the file's
    `tokenizer.ggml.*` metadata (GGUF spec, "Tokenizer" section).

    Raises:
        ValueError: the path is not a checkpoint (see `CheckpointRef.from_path`).
    """
    ref = loadable(CheckpointRef.from_path(checkpoint))
    return AutoTokenizer.from_pretrained(ref.directory, **ref.kwargs())
