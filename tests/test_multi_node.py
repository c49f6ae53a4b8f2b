"""The multi-node tests (tests/multinode) in a pytest process of their own: they need a Ray
cluster of several simulated nodes (`ray.cluster_utils.Cluster`), apart from this session's
shared Ray instance. See tests/multinode/simulated_cluster.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

pytestmark = pytest.mark.serve


def test_multi_node_suite(tmp_path: Path) -> None:
    report = tmp_path / "report.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    env |= {
        "ASCEND_ROUTER_MULTINODE": "1",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # "this host" is 127.0.0.1 for every node
        "ASCEND_ROUTER_MULTINODE_REPORT": str(report),
    }
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
               "-W", "ignore::DeprecationWarning", str(TESTS / "multinode")]  # fmt: skip
    proc = subprocess.run(
        command, env=env, cwd=TESTS.parent, capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, f"{proc.stdout[-8000:]}\n{proc.stderr[-4000:]}"
    figures = {r["test"]: r for r in map(json.loads, report.read_text().splitlines())}
    assert set(figures) == {"node_loss", "tp_rank_loss"}, figures
    print(json.dumps(figures, indent=1))  # recovery times: shown with `pytest -s`
