"""Load a checkpoint into its `transformers` model class, wired to paged attention.

Sources: a GGUF file (dequantised by transformers' GGUF loader, see "GGUF and interaction with
Transformers" in the transformers docs) or a Hugging Face checkpoint directory
(`config.json` plus safetensors shards).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig, PretrainedConfig

from engine.attention import ATTENTION_NAME

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckpointRef:
    """Where a checkpoint's files are.

    Attributes:
        directory: the folder passed to `from_pretrained`.
        gguf_file: file name inside `directory` for GGUF checkpoints, else None.
    """

    directory: Path
    gguf_file: str | None

    @classmethod
    def from_path(cls, path: str | Path) -> CheckpointRef:
        """Resolve a `.gguf` file or a checkpoint directory.

        Raises:
            ValueError: the path does not exist, or a directory lacks `config.json`.
        """
        p = Path(path).expanduser()
        if not p.exists():
            raise ValueError(f"checkpoint path {str(p)!r} does not exist")
        if p.is_file():
            if p.suffix != ".gguf":
                raise ValueError(f"checkpoint file {str(p)!r} is not a .gguf file")
            return cls(p.parent, p.name)
        if not (p / "config.json").is_file():
            raise ValueError(f"checkpoint directory {str(p)!r} has no config.json")
        return cls(p, None)

    def kwargs(self) -> dict[str, str]:
        """Extra keyword arguments for transformers' `from_pretrained`."""
        return {"gguf_file": self.gguf_file} if self.gguf_file else {}


def load_config(ref: CheckpointRef) -> PretrainedConfig:
    """The checkpoint's model config."""
    return AutoConfig.from_pretrained(ref.directory, **ref.kwargs())


def load_model(ref: CheckpointRef, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    """Instantiate the HF causal-LM class for the checkpoint with paged attention.

    Returns:
        The model in eval mode on `device`, with `config._attn_implementation` set to the
        paged-attention function registered in `engine.attention`.
    """
    model = AutoModelForCausalLM.from_pretrained(
        ref.directory, dtype=dtype, attn_implementation=ATTENTION_NAME, **ref.kwargs()
    )
    model.to(device).eval()
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("loaded %s: %.1fM parameters, %s", type(model).__name__, n_params / 1e6, dtype)
    return model


def eos_token_ids(ref: CheckpointRef, config: PretrainedConfig) -> tuple[int, ...]:
    """End-of-sequence ids from the generation config, falling back to the model config."""
    try:
        eos = GenerationConfig.from_pretrained(ref.directory, **ref.kwargs()).eos_token_id
    except OSError:
        eos = None
    if eos is None:
        eos = getattr(config, "eos_token_id", None)
    if eos is None:
        return ()
    return tuple(eos) if isinstance(eos, (list, tuple)) else (int(eos),)
