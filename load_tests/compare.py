r"""`python -m load_tests.compare`: the same workload against two endpoints, A/B ratios.

Levels are interleaved (A then B at each concurrency) so drift in machine load hits both; a
level runs one target at a time, so each side's concurrency-1 level is its single-stream
figure measured alone (`single_stream_tok_s` in the result). With `--presets` every named
workload of `load_tests.presets` runs in one invocation, `--rounds` times over (presets and
rounds interleaved; every round with fresh prompts, so no prompt cache answers a later round,
and without `--seed` every run draws its own prompts, so no cache of an earlier run answers),
and each level reports its median round: a peer figure that moves between runs is re-measured,
never quoted.

Example (decode-heavy and prefill-heavy, three rounds, against llama-server):
    python -m load_tests.compare \
        --a http://127.0.0.1:8000/v1,smollm2-fast,ours \
        --b http://127.0.0.1:8090/v1,smollm2,llama.cpp \
        --presets decode-heavy prefill-heavy --rounds 3 --concurrency 1 4 16 \
        --num-requests 16 --peer-binary /path/to/llama-server \
        --peer-command "llama-server -m SmolLM2.gguf --parallel 16 -t 2 --jinja ..."

With speculative decoding on a side (ours), each level also reports `spec_decode`: the drafts,
draft tokens and accepted tokens of that level (the server's `vllm:spec_decode_*` counters before
and after it, pooled over rounds; a round's first level includes its 8-token warm-up request),
the acceptance rate and the mean acceptance length.

Issue #16's speculative-decoding benchmarks (2 cores; each about 3 to 4 minutes once the servers
are up; the llama.cpp peer started with `python -m load_tests.llama_server --parallel 16`, which
logs the exact command to pass as `--peer-command`):

(a) copy-heavy concurrency-1 TPOT, n-gram speculation vs llama.cpp (target: TPOT ratio <= 0.8),
    with our acceptance rate; A = `serve run configs/speculative.yaml`:
    LLAMA=/tmp/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server
    python -m load_tests.compare \
        --a http://127.0.0.1:8000/v1,smollm2-long,ours-spec \
        --b http://127.0.0.1:8090/v1,smollm2,llama.cpp \
        --presets copy-heavy --rounds 3 --concurrency 1 --num-requests 8 \
        --peer-binary $LLAMA --peer-command "<the 'starting ...' command llama_server logged>"

(b) free-generation concurrency-1 TPOT, speculation on vs off (target: TPOT ratio <= 1.05) and
(c) concurrency-16 decode-heavy throughput, on vs off (target: tok/s ratio >= 0.95), against one
    server that serves the model twice, with and without `speculative` (one Ray cluster, same
    router; `python -m load_tests.spec_on_off_config` writes it). Side A runs first in every
    round and came out slower on this host whichever side it was, so swap the sides to check:
    python -m load_tests.spec_on_off_config --out /tmp/spec-on-off.yaml
    serve run /tmp/spec-on-off.yaml
    python -m load_tests.compare \
        --a http://127.0.0.1:8000/v1,smollm2-long-nospec,spec-off \
        --b http://127.0.0.1:8000/v1,smollm2-long,spec-on \
        --presets free-gen --rounds 5 --concurrency 1 --num-requests 8
    python -m load_tests.compare \
        --a http://127.0.0.1:8000/v1,smollm2-long,spec-on \
        --b http://127.0.0.1:8000/v1,smollm2-long-nospec,spec-off \
        --presets decode-heavy --rounds 3 --concurrency 1 16 --num-requests 8 \
        --requests-per-slot 3

Writes `load_tests/results/compare[-<preset>]-<UTC timestamp>.json` and a `.png` chart next to
each.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import logging
import random
import statistics
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from load_tests.charts import plot_runs
from load_tests.client import Target
from load_tests.presets import PRESETS
from load_tests.report import compare_ratios, levels_table, ratios_table
from load_tests.results import RESULTS_DIR, write_result
from load_tests.scenario import (
    Scenario,
    add_workload_args,
    run_scenario,
    scenario_document,
    scenario_from_args,
)
from load_tests.server_metrics import snapshot, spec_decode_delta, spec_decode_figures
from load_tests.workload import default_tokenizer

MEDIAN_FIELDS = (("ttft_ms", "p50"), ("tpot_ms", "p50"), ("itl_ms", "p50"))
ROUND_SEED = 100_000
"""Seed offset between rounds (levels within a round are 1,000 apart)."""


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
    p.add_argument(
        "--presets",
        nargs="+",
        choices=sorted(PRESETS),
        help="named workloads (load_tests.presets); they set endpoint and lengths",
    )
    p.add_argument("--rounds", type=int, default=1, help="repeat everything; report medians")
    p.add_argument("--peer-command", default="", help="B's exact launch command, recorded")
    p.add_argument(
        "--peer-binary", type=Path, help="B's binary: its --version and build flags are recorded"
    )
    add_workload_args(p)
    # A peer that keeps prompts across runs (llama-server's host-memory prompt cache) would
    # answer a second run's prompts from its cache while ours restarted cold: without --seed,
    # every run draws its own (recorded in the result's workload).
    p.set_defaults(seed=None)
    return p


def peer_info(args: argparse.Namespace) -> dict[str, Any]:
    """B's launch command, and its version and CMake build flags when `--peer-binary` is set."""
    info: dict[str, Any] = {"label": args.b.label, "launch_command": args.peer_command}
    binary = args.peer_binary
    if binary is not None:
        version = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30
        )
        info["version"] = (version.stdout + version.stderr).strip()
        cache = binary.resolve().parents[1] / "CMakeCache.txt"  # build/bin/<binary>
        if cache.is_file():
            info["build_flags"] = sorted(
                line
                for line in cache.read_text().splitlines()
                if line.startswith(("GGML_", "LLAMA_", "CMAKE_BUILD_TYPE", "CMAKE_C_FLAGS:"))
                and not line.startswith(("GGML_ALL_WARNINGS", "LLAMA_ALL_WARNINGS"))
            )
    return info


def scenarios(args: argparse.Namespace) -> list[tuple[str | None, Scenario]]:
    """`(preset name, scenario)` per preset, or the flags' own scenario without presets; without
    `--seed`, a seed is drawn for this run (and set on `args`)."""
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(ROUND_SEED)
        logging.info("prompt seed %d (--seed %d repeats this run's prompts)", args.seed, args.seed)
    if not args.presets:
        return [(None, scenario_from_args(args))]
    out: list[tuple[str | None, Scenario]] = []
    for name in args.presets:
        preset = PRESETS[name]
        ns = copy.copy(args)
        ns.endpoint, ns.input_len, ns.output_len = (
            preset.endpoint,
            preset.input_len,
            preset.output_len,
        )
        ns.dataset_like, ns.text_workload = preset.dataset_like, preset.text
        out.append((name, scenario_from_args(ns)))
    return out


async def server_snapshots(targets: Sequence[Target]) -> list[dict[str, float] | None]:
    """Each target's `server_metrics.snapshot` now (None where it serves no `vllm:*` metrics)."""
    async with httpx.AsyncClient(timeout=10.0, trust_env=False) as client:
        return [await snapshot(client, t.base_url, t.model) for t in targets]


def add_spec_decode(levels: list[dict[str, Any]], before: dict[str, float] | None) -> None:
    """Set each level's `spec_decode`: the speculation between the previous level's
    `server_after` (the first level: `before`) and its own, None without speculation."""
    for lv in levels:
        after = lv.get("server_after")
        lv["spec_decode"] = spec_decode_delta(before, after)
        before = after or before


def pooled_spec_decode(per_round: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """A level's `spec_decode` counts summed over rounds, with rates recomputed."""
    found = [lv["spec_decode"] for lv in per_round if lv.get("spec_decode")]
    if not found:
        return None
    keys = ("drafts", "draft_tokens", "accepted_tokens")
    return spec_decode_figures({k: sum(sd[k] for sd in found) for k in keys})


def median_levels(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per level, the round of median output throughput, its TTFT/TPOT/ITL p50 replaced by the
    medians over rounds, every round's throughput under `rounds_output_throughput`, and
    `spec_decode` pooled over rounds."""
    out = []
    for per_round in zip(*rounds):
        ranked = sorted(per_round, key=lambda lv: lv["output_throughput"])
        level = copy.deepcopy(ranked[(len(ranked) - 1) // 2])
        for field, stat in MEDIAN_FIELDS:
            values = [lv[field][stat] for lv in per_round if lv[field][stat] is not None]
            level[field][stat] = statistics.median(values) if values else None
        level["rounds_output_throughput"] = [lv["output_throughput"] for lv in per_round]
        level["spec_decode"] = pooled_spec_decode(per_round)
        out.append(level)
    return out


def single_stream(levels: list[dict[str, Any]]) -> float | None:
    """Output tok/s of the concurrency-1 level (measured with the other side idle)."""
    return next((lv["output_throughput"] for lv in levels if lv["concurrency"] == 1), None)


def main(argv: list[str] | None = None) -> int:
    """Run both targets, print tables and ratios, write JSON + PNG; 1 if any request failed."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    a, b = args.a, args.b
    if a.label == b.label:
        raise SystemExit(f"A and B share the label {a.label!r}: give distinct labels")
    if args.rounds < 1:
        raise SystemExit(f"--rounds {args.rounds}: need at least 1")

    plan = scenarios(args)
    tokenizer = default_tokenizer(args.tokenizer)
    peer = peer_info(args)
    raw: dict[str | None, list[list[list[dict[str, Any]]]]] = {name: [] for name, _ in plan}
    for r in range(args.rounds):
        for name, scenario in plan:
            logging.info("round %d/%d, preset %s", r + 1, args.rounds, name or "(flags)")
            # fresh prompts every round: a server's prompt cache must not answer a later round
            fresh = replace(
                scenario, spec=replace(scenario.spec, seed=scenario.spec.seed + ROUND_SEED * r)
            )
            before = asyncio.run(server_snapshots([a, b]))
            results = asyncio.run(run_scenario([a, b], fresh, tokenizer))
            runs = [[lv.to_dict() for lv in levels] for levels in results]
            for levels, start in zip(runs, before):
                add_spec_decode(levels, start)
            raw[name].append(runs)
    failed = False
    for name, scenario in plan:
        doc = scenario_document("compare", scenario, [a, b], [[], []])
        for t_index, run in enumerate(doc["runs"]):
            run["levels"] = median_levels([rnd[t_index] for rnd in raw[name]])
            run["single_stream_tok_s"] = single_stream(run["levels"])
            print(levels_table(f"{run['label']} [{name or 'flags'}]", run["levels"]))
        runs = doc["runs"]
        doc["ratios"] = compare_ratios(runs[0]["levels"], runs[1]["levels"])
        doc.update(preset=name, rounds=args.rounds, peer=peer)
        print(ratios_table(a.label, b.label, doc["ratios"]))
        path = write_result(doc, args.results_dir, f"compare-{name}" if name else None)
        png = plot_runs(doc, path.with_suffix(".png"))
        print(f"wrote {path}\nwrote {png}")
        failed |= any(lv["errors"] for run in runs for lv in run["levels"])
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
