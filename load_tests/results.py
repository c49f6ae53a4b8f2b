"""The result JSON schema (version 1), its validator, and where result files land.

Online and compare results share one shape::

    {"schema_version": 1, "kind": "online" | "compare", "created": ISO-8601 UTC,
     "scenario": "levels" | "shared_prefix" | "burst", "workload": {...}, "options": {...},
     "runs": [{"label", "base_url", "model", "levels": [LEVEL, ...]}, ...],
     "ratios": [{"concurrency", "output_throughput", "ttft_p50", "ttft_p99", "tpot_p50"}, ...]}

`ratios` (A/B) is present for `compare` only. Offline results::

    {"schema_version": 1, "kind": "offline", "created", "workload", "engines": [ENGINE, ...],
     "ratio_output_throughput": float | None}
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
RESULTS_DIR = Path(__file__).resolve().parent / "results"

SUMMARY_KEYS = ("count", "mean", "p50", "p90", "p99")
LEVEL_KEYS = (
    "concurrency",
    "num_requests",
    "completed",
    "errors",
    "error_samples",
    "duration_s",
    "request_throughput",
    "output_throughput",
    "total_output_tokens",
    "usage_reported",
    "ttft_ms",
    "tpot_ms",
    "itl_ms",
    "e2e_ms",
    "first_ttft_ms",
    "rest_ttft_p50_ms",
)
RATIO_KEYS = ("concurrency", "output_throughput", "ttft_p50", "ttft_p99", "tpot_p50")
ENGINE_KEYS = (
    "name",
    "num_requests",
    "total_output_tokens",
    "duration_s",
    "output_throughput",
    "request_throughput",
    "mean_step_ms",
    "num_steps",
)
SCENARIOS = ("levels", "shared_prefix", "burst")


def _require(obj: Any, keys: tuple[str, ...], where: str) -> None:
    if not isinstance(obj, dict):
        raise TypeError(f"{where}: expected an object, got {type(obj).__name__}")
    missing = [k for k in keys if k not in obj]
    if missing:
        raise ValueError(f"{where}: missing keys {missing}")


def _validate_level(level: Any, where: str) -> None:
    _require(level, LEVEL_KEYS, where)
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        _require(level[key], SUMMARY_KEYS, f"{where}.{key}")
    if level["completed"] + level["errors"] != level["num_requests"]:
        raise ValueError(f"{where}: completed + errors != num_requests")


def validate_result(doc: Any) -> None:
    """Check a result document against schema version 1.

    Raises:
        ValueError: naming the first missing key or inconsistent value.
        TypeError: a part that must be an object is not one.
    """
    _require(doc, ("schema_version", "kind", "created", "workload"), "result")
    if doc["schema_version"] != SCHEMA_VERSION:
        raise ValueError(f"result: schema_version {doc['schema_version']} != {SCHEMA_VERSION}")
    kind = doc["kind"]
    if kind == "offline":
        _require(doc, ("engines", "ratio_output_throughput"), "result")
        for i, eng in enumerate(doc["engines"]):
            _require(eng, ENGINE_KEYS, f"engines[{i}]")
        return
    if kind not in ("online", "compare"):
        raise ValueError(f"result: unknown kind {kind!r}")
    _require(doc, ("scenario", "options", "runs"), "result")
    if doc["scenario"] not in SCENARIOS:
        raise ValueError(f"result: unknown scenario {doc['scenario']!r}")
    expected_runs = 2 if kind == "compare" else 1
    if len(doc["runs"]) != expected_runs:
        raise ValueError(f"result: {kind} needs {expected_runs} run(s), has {len(doc['runs'])}")
    for i, run in enumerate(doc["runs"]):
        _require(run, ("label", "base_url", "model", "levels"), f"runs[{i}]")
        for j, level in enumerate(run["levels"]):
            _validate_level(level, f"runs[{i}].levels[{j}]")
    if kind == "compare":
        _require(doc, ("ratios",), "result")
        for i, ratio in enumerate(doc["ratios"]):
            _require(ratio, RATIO_KEYS, f"ratios[{i}]")


def new_document(kind: str, workload: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A result document header plus `fields`."""
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "created": created,
        "workload": workload,
        **fields,
    }


def result_path(kind: str, suffix: str, results_dir: Path = RESULTS_DIR, stamp: str = "") -> Path:
    """`<results_dir>/<kind>-<UTC timestamp>.<suffix>` (directory created if missing)."""
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = stamp or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return results_dir / f"{kind}-{stamp}.{suffix}"


def write_result(
    doc: dict[str, Any], results_dir: Path = RESULTS_DIR, name: str | None = None
) -> Path:
    """Validate `doc` and write it as `<name or kind>-<timestamp>.json`; returns the path."""
    validate_result(doc)
    path = result_path(name or doc["kind"], "json", results_dir)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path
