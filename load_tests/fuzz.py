r"""`python -m load_tests.fuzz`: property-based fuzzing of the request path over real HTTP.

Example:
    python -m load_tests.fuzz --base-url http://127.0.0.1:8000 --examples 10000 --seed 0 \
        --models smollm2-fast,smollm2-long --load-streams 2

Sends hypothesis-drawn bodies (`load_tests.fuzz_requests`, mostly invalid) to
`/v1/chat/completions`, `/v1/completions`, `/v1/messages`, `/v1/messages/count_tokens` and
`/v1/responses` and checks each answer (`load_tests.fuzz_checks`): no 5xx, the API's own error
bodies on 4xx (Anthropic's on `/v1/messages*`, else OpenAI's), `/health` unchanged and a valid
request served every `--check-every` examples. `--load-streams N` keeps N valid 32-token
streams per model running meanwhile and counts their errors. Prints a summary and writes
`load_tests/results/fuzz-<UTC timestamp>.json`; exit status 1 on any violation or stream error.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from load_tests.client import check_loopback
from load_tests.fuzz_checks import LoadStreams, RequestPathChecker, run_examples
from load_tests.fuzz_requests import FuzzExample, fuzz_examples
from load_tests.results import RESULTS_DIR, new_document, result_path


def build_parser() -> argparse.ArgumentParser:
    """The CLI flags."""
    p = argparse.ArgumentParser(
        prog="python -m load_tests.fuzz",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000 (loopback)")
    p.add_argument("--models", required=True, help="served model ids, comma-separated")
    p.add_argument("--examples", type=int, default=1000, help="examples to send")
    p.add_argument("--seed", type=int, default=0, help="hypothesis seed")
    p.add_argument(
        "--check-every", type=int, default=10, help="/health + valid request every K examples"
    )
    p.add_argument("--load-streams", type=int, default=0, help="valid streams per model")
    p.add_argument("--timeout", type=float, default=120.0, help="per-request timeout (s)")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    return p


def server_root(base_url: str) -> str:
    """The loopback server root (a trailing `/v1` is dropped).

    Raises:
        ValueError: not http(s) or not a loopback host.
    """
    url = check_loopback(base_url)
    return url[: -len("/v1")] if url.endswith("/v1") else url


def format_summary(summary: dict[str, Any], load: dict[str, Any]) -> str:
    """A human-readable report."""
    lines = [
        f"examples sent      {summary['examples']}  ({summary['duration_s']} s)",
        f"invalid share      {summary['invalid_share']:.1%} (local classification)",
        f"status classes     {summary['status_classes']}",
        f"health checks      {summary['health_checks']}, changes {summary['health_changes']}",
        f"valid probes       {summary['valid_checks']}, failures {summary['valid_failures']}",
        f"violations         {summary['violations_by_kind'] or 'none'}",
        f"load streams       {load['requests']} requests, {load['errors']} errors",
        "per mutator:",
    ]
    for family, counts in summary["per_mutator"].items():
        lines.append(f"  {family:<27} {json.dumps(counts, sort_keys=True)}")
    return "\n".join(lines)


def _with_progress(checker: RequestPathChecker, every: int = 100) -> Callable[[FuzzExample], None]:
    def check(example: FuzzExample) -> None:
        checker.check(example)
        stats = checker.stats
        if stats.examples % every == 0:
            logging.info(
                "%d examples, %s, %d violations",
                stats.examples,
                dict(stats.statuses),
                len(stats.violations),
            )

    return check


def main(argv: list[str] | None = None) -> int:
    """Fuzz, print the summary, write the JSON report; 1 if anything broke."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    # the local verdict runs the API edges, which warn of each hosted tool they drop
    logging.getLogger("router.apis").setLevel(logging.ERROR)
    root = server_root(args.base_url)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    strategy = fuzz_examples(models)
    with httpx.Client(base_url=root, timeout=args.timeout, trust_env=False) as client:
        checker = RequestPathChecker(client, models, check_every=args.check_every)
        checker.start()
        with LoadStreams(root, models, per_model=args.load_streams) as load:
            run_examples(strategy, _with_progress(checker), args.examples, seed=args.seed)
    summary, load_summary = checker.stats.summary(), load.summary()
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    doc = new_document(
        "fuzz",
        {"models": models, "examples": args.examples, "seed": args.seed},
        options=options,
        summary=summary,
        load_streams=load_summary,
        violations=[v.as_dict() for v in checker.stats.violations],
    )
    path = result_path("fuzz", "json", args.results_dir)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(format_summary(summary, load_summary))
    print(f"wrote {path}")
    return 1 if checker.stats.violations or load_summary["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
