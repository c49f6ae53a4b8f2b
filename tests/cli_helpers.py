"""Running one `ascend-router` sub-command in-process, for the CLI tests of every package."""

from __future__ import annotations

import argparse
from types import ModuleType


def run_command(module: ModuleType, argv: list[str]) -> int:
    """Run one `ascend-router` sub-command module with `argv`, as `cli.main.main` would.

    Only this module is registered, so the test does not depend on the other sub-commands.
    """
    parser = argparse.ArgumentParser(prog="ascend-router")
    module.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))
