"""`ascend-router check-config FILE`: validate a Serve YAML against the typed config models."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


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
    for m in config.models:
        default = " (default)" if m.model_id == config.default else ""
        print(
            f"{m.model_id}{default}: tp={m.tensor_parallel_size} "
            f"pp={m.engine.pipeline_parallel_size} ep={m.expert_parallel} "
            f"dtype={m.engine.dtype} resources={m.deployment.ray_actor_options}"
        )
    return 0
