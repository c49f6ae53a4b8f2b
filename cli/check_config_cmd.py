"""`ascend-router check-config FILE`: validate a Serve YAML against the typed config models."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from configs.model_config import ModelDeploymentConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `check-config` sub-command."""
    p = subparsers.add_parser(
        "check-config", help="validate a Serve config (e.g. configs/local.yaml)"
    )
    p.add_argument("config", type=Path, help="Ray Serve YAML with an ascend-router application")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print one line per model; exit 1 when the file is invalid, 2 when unreadable."""
    from configs.serve_file import ConfigFileError, load_app_config  # pydantic models: ~0.3 s

    try:
        config = load_app_config(args.config)
    except ConfigFileError as exc:
        print(exc, file=sys.stderr)
        return 2
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 1
    mismatched = [problem for m in config.models if (problem := _modalities_problem(m))]
    if mismatched:
        print("\n".join(mismatched), file=sys.stderr)
        return 1
    for m in config.models:
        default = " (default)" if m.model_id == config.default else ""
        print(
            f"{m.model_id}{default}: tp={m.tensor_parallel_size} "
            f"pp={m.engine.pipeline_parallel_size} ep={m.expert_parallel} "
            f"dtype={m.engine.dtype} resources={m.deployment.ray_actor_options}"
        )
    return 0


def _modalities_problem(model: ModelDeploymentConfig) -> str | None:
    """Why a model's `input_modalities` does not match its checkpoint (a local checkpoint
    directory's `config.json` `model_type`), as the replica would refuse it at start-up; None
    when it matches or the checkpoint is not a local directory (a GGUF file is a text model)."""
    from configs.policy_config import modalities_mismatch

    source = model.source.path
    model_type = None
    if source is not None and (Path(source) / "config.json").is_file():
        try:
            model_type = json.loads((Path(source) / "config.json").read_text()).get("model_type")
        except (OSError, ValueError, AttributeError):
            return None  # the replica's own loader reports an unreadable config
    elif source is not None and not source.endswith(".gguf"):
        return None  # not on this machine: checked when the replica starts
    return modalities_mismatch(model.model_id, model.input_modalities, model_type)
