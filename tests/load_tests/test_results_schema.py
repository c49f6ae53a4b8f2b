"""The result JSON schema: documents built from real result objects validate; broken ones don't."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from load_test_helpers import make_compare_doc

from load_tests.offline_result import OfflineResult
from load_tests.report import levels_table, ratios_table
from load_tests.results import new_document, validate_result, write_result
from load_tests.workload import WorkloadSpec


def test_compare_document_validates_and_round_trips(tmp_path: Path) -> None:
    doc = make_compare_doc()
    path = write_result(doc, tmp_path)
    assert path.name.startswith("compare-") and path.suffix == ".json"
    loaded = json.loads(path.read_text())
    validate_result(loaded)
    assert loaded["ratios"][0]["output_throughput"] == pytest.approx(2.0)  # A twice as fast
    assert loaded["ratios"][0]["ttft_p50"] == pytest.approx(0.5)


def test_online_document_needs_exactly_one_run() -> None:
    doc = make_compare_doc()
    doc["kind"] = "online"
    with pytest.raises(ValueError, match="needs 1 run"):
        validate_result(doc)
    doc["runs"] = doc["runs"][:1]
    validate_result(doc)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("workload"), "missing keys"),
        (lambda d: d.update(schema_version=99), "schema_version"),
        (lambda d: d.update(scenario="ramp"), "unknown scenario"),
        (lambda d: d["runs"][0]["levels"][0].pop("ttft_ms"), "missing keys"),
        (lambda d: d["runs"][0]["levels"][0]["tpot_ms"].pop("p99"), "tpot_ms"),
        (lambda d: d["runs"][1]["levels"][0].update(errors=5), "completed \\+ errors"),
        (lambda d: d["ratios"][0].pop("tpot_p50"), "ratios"),
    ],
)
def test_broken_documents_are_rejected(mutate: Any, message: str) -> None:
    doc = make_compare_doc()
    mutate(doc)
    with pytest.raises(ValueError, match=message):
        validate_result(doc)


def test_offline_document() -> None:
    res = OfflineResult("ascend-router", 4, 64, 2.0, 12.5, 20, 0, 0, outputs=[[1]] * 4)
    eng = res.to_dict()
    assert eng["output_throughput"] == pytest.approx(32.0)
    assert "outputs" not in eng
    doc = new_document(
        "offline", WorkloadSpec().to_dict(), engines=[eng], ratio_output_throughput=None
    )
    validate_result(json.loads(json.dumps(doc)))
    del doc["engines"][0]["mean_step_ms"]
    with pytest.raises(ValueError, match="mean_step_ms"):
        validate_result(doc)


def test_tables_render() -> None:
    doc = make_compare_doc()
    text = levels_table("a", doc["runs"][0]["levels"])
    assert text.startswith("== a") and len(text.splitlines()) == 4
    assert "2.00" in ratios_table("a", "b", doc["ratios"])
