r"""`python -m load_tests.compare`: the same workload against two endpoints, A/B ratios.

Levels are interleaved (A then B at each concurrency) so drift in machine load hits both.

Example:
    python -m load_tests.compare \
        --a http://127.0.0.1:8000/v1,smollm2-long,ours \
        --b http://127.0.0.1:8090/v1,smollm2,llama.cpp \
        --concurrency 1 4 --num-requests 8 --output-len 64

Writes `load_tests/results/compare-<UTC timestamp>.json` and a `.png` chart next to it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from load_tests.charts import plot_runs
from load_tests.client import Target
from load_tests.report import compare_ratios, levels_table, ratios_table
from load_tests.results import RESULTS_DIR, write_result
from load_tests.scenario import (
    add_workload_args,
    run_scenario,
    scenario_document,
    scenario_from_args,
)
from load_tests.workload import default_tokenizer


def build_parser() -> argparse.ArgumentParser:
    """The CLI flags."""
    p = argparse.ArgumentParser(
        prog="python -m load_tests.compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--a", required=True, type=Target.parse, help="URL,MODEL,LABEL of A")
    p.add_argument("--b", required=True, type=Target.parse, help="URL,MODEL,LABEL of B")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    add_workload_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run both targets, print tables and ratios, write JSON + PNG; 1 if any request failed."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    a, b = args.a, args.b
    if a.label == b.label:
        raise SystemExit(f"A and B share the label {a.label!r}: give distinct labels")
    scenario = scenario_from_args(args)
    tokenizer = default_tokenizer(args.tokenizer)
    results = asyncio.run(run_scenario([a, b], scenario, tokenizer))
    doc = scenario_document("compare", scenario, [a, b], results)
    runs = doc["runs"]
    ratios = doc["ratios"] = compare_ratios(runs[0]["levels"], runs[1]["levels"])
    for run in runs:
        print(levels_table(run["label"], run["levels"]))
    print(ratios_table(a.label, b.label, ratios))
    path = write_result(doc, args.results_dir)
    png = plot_runs(doc, path.with_suffix(".png"))
    print(f"wrote {path}\nwrote {png}")
    return 1 if any(lv["errors"] for run in runs for lv in run["levels"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
