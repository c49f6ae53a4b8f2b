"""Entry point of the `ascend-router` console script.

Each sub-command lives in its own module under `cli/` and exposes
`register(subparsers) -> None`, which adds its parser and sets `func` (a callable taking the
parsed namespace and returning the exit status). Every module is imported to build the parser,
so each keeps its top-level imports light: torch, Ray, transformers and xgrammar are imported
inside the commands that use them, and `--help` or `parse-tools` starts without them
(`tests/cli/test_cli_startup.py`).
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules providing sub-commands; each has `register(subparsers)`.
_COMMAND_MODULES: tuple[str, ...] = (
    "cli.check_config_cmd",
    "cli.parse_tools_cmd",
    "cli.ops_check_cmd",
    "cli.doctor_cmd",
    "cli.plan_cmd",
    "cli.tiny_models_cmd",
    "cli.tiny_lora_cmd",
    "cli.quantize_cmd",
    "cli.kuberay_cmd",
    "cli.systemd_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every registered sub-command."""
    parser = argparse.ArgumentParser(
        prog="ascend-router", description="OpenAI-compatible LLM serving for Ascend NPUs."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the console script; returns the process exit status (2 on bad usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
