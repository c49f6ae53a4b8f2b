r"""`python -m load_tests.online`: streaming load test of one OpenAI endpoint.

Example:
    python -m load_tests.online --base-url http://127.0.0.1:8000/v1 \
        --model smollm2-long --concurrency 1 4 16 --num-requests 32 \
        --input-len 128 --output-len 64 --label ours

Writes `load_tests/results/online-<UTC timestamp>.json` and a `.png` chart next to it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from load_tests.charts import plot_runs
from load_tests.client import Target, check_loopback
from load_tests.report import levels_table
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
        prog="python -m load_tests.online",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000/v1 (loopback)")
    p.add_argument("--model", required=True, help="the `model` field to send")
    p.add_argument("--label", default=None, help="name in outputs (default: the model)")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    add_workload_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the scenario, print a table, write JSON + PNG; exit status 1 if any request failed."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    target = Target(check_loopback(args.base_url), args.model, args.label or args.model)
    scenario = scenario_from_args(args)
    tokenizer = default_tokenizer(args.tokenizer)
    results = asyncio.run(run_scenario([target], scenario, tokenizer))
    doc = scenario_document("online", scenario, [target], results)
    level_dicts = doc["runs"][0]["levels"]
    print(levels_table(target.label, level_dicts))
    path = write_result(doc, args.results_dir)
    png = plot_runs(doc, path.with_suffix(".png"))
    print(f"wrote {path}\nwrote {png}")
    return 1 if any(lv["errors"] for lv in level_dicts) else 0


if __name__ == "__main__":
    raise SystemExit(main())
