"""The application arguments the test session serves: configs/local.yaml's, adjusted for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


def local_app_args() -> dict[str, Any]:
    """The `args` of the application in configs/local.yaml."""
    cfg = yaml.safe_load((REPO / "configs" / "local.yaml").read_text())
    return cfg["applications"][0]["args"]


def served_app_args() -> dict[str, Any]:
    """configs/local.yaml's args (a fresh copy) with `batch_invariant: true` for every model, so
    that a request's tokens do not depend on the load (tests compare streamed answers given under
    concurrency with the same requests answered alone). Batch invariance excludes captured
    decode graphs (`enforce_eager: false`, tested on the engine in
    tests/engine/test_decode_graphs.py), so the models run eager."""
    args = local_app_args()
    for model in args["models"]:
        engine = model.setdefault("engine", {})
        engine["batch_invariant"] = True
        engine["enforce_eager"] = True
    return args
