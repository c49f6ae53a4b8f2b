"""Small random PEFT adapters for tests and demos, written by `peft` itself.

`peft` is imported on use only (a test/tool dependency, `pip install peft`). B is drawn at
random (peft initialises it to zero, which would make every adapter the base model), so each
adapter changes the model's outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from engine.model_loader import CheckpointRef

ALL_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class TinyLoraSpec:
    """One adapter to write.

    Attributes:
        name: its directory name under the output folder.
        rank: `r`.
        alpha: `lora_alpha`.
        target_modules: module names it targets.
        use_rslora: rsLoRA scaling (`alpha / sqrt(r)`).
        rank_pattern: module-name regex -> rank.
        alpha_pattern: module-name regex -> alpha.
        seed: seeds A and B.
        std: standard deviation of B's entries (A keeps peft's Kaiming-uniform scale).
    """

    name: str
    rank: int = 8
    alpha: float = 16.0
    target_modules: tuple[str, ...] = ALL_LINEARS
    use_rslora: bool = False
    rank_pattern: dict[str, int] = field(default_factory=dict)
    alpha_pattern: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    std: float = 0.05


def load_base(checkpoint: str) -> torch.nn.Module:
    """The base model as transformers loads it (float32), for peft."""
    ref = CheckpointRef.from_path(checkpoint)
    return AutoModelForCausalLM.from_pretrained(
        ref.directory, dtype=torch.float32, **ref.kwargs()
    ).eval()


def write_adapter(base: torch.nn.Module, spec: TinyLoraSpec, out_dir: Path) -> Path:
    """Write one adapter for `base` to `out_dir / spec.name`; `base` is left as it was.

    Raises:
        ModuleNotFoundError: `peft` is not installed.
    """
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=spec.rank,
        lora_alpha=spec.alpha,
        target_modules=list(spec.target_modules),
        use_rslora=spec.use_rslora,
        rank_pattern=dict(spec.rank_pattern),
        alpha_pattern=dict(spec.alpha_pattern),
        lora_dropout=0.0,
    )
    torch.manual_seed(spec.seed)
    model = get_peft_model(base, config)
    g = torch.Generator().manual_seed(spec.seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=g) * spec.std)
    path = out_dir / spec.name
    model.save_pretrained(str(path))
    model.unload()  # restores the base model's own linears
    return path


def make_tiny_loras(checkpoint: str, out_dir: Path, specs: list[TinyLoraSpec]) -> list[Path]:
    """Write every adapter of `specs` for the checkpoint at `checkpoint` (GGUF or directory).

    Returns:
        The adapter directories, `out_dir / spec.name` each.
    """
    base = load_base(checkpoint)
    return [write_adapter(base, spec, out_dir) for spec in specs]
