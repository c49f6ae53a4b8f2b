"""Scenarios shared by `online` and `compare`, and their command-line flags.

A scenario is a list of levels; each level gets fresh prompts (seed + 1000 * level index) so a
server's prefix cache never carries over between levels, and every target sees the same prompts
at the same level.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from load_tests.client import Target
from load_tests.level_result import LevelResult
from load_tests.results import new_document
from load_tests.runner import RunOptions, run_level, run_prefix_level, warmup
from load_tests.text_prompts import TEXT_WORKLOADS
from load_tests.workload import (
    Prompt,
    WorkloadSpec,
    add_workload_length_args,
    build_prompts,
    workload_spec_from_args,
)

logger = logging.getLogger(__name__)

ScenarioKind = Literal["levels", "shared_prefix", "burst"]


@dataclass(frozen=True)
class Scenario:
    """What to run against each target.

    Attributes:
        kind: `levels` (one level per concurrency), `shared_prefix` (cold first request, then
            the rest, per concurrency) or `burst` (all requests at once).
        concurrencies: concurrency of each level (for `burst`: the burst size alone).
        spec: the workload of one level.
        opts: transport options.
        requests_per_slot: a level sends at least this many requests per unit of concurrency
            (0: `spec.num_requests` at every level), so that high-concurrency levels measure
            the steady state rather than one wave's ramp-up.
    """

    kind: ScenarioKind
    concurrencies: tuple[int, ...]
    spec: WorkloadSpec
    opts: RunOptions
    requests_per_slot: int = 0

    def prompts(self, tokenizer: Any, level_index: int) -> list[Prompt]:
        """The prompts of level `level_index` (identical for every target)."""
        concurrency = self.concurrencies[max(level_index, 0)]
        spec = replace(
            self.spec,
            seed=self.spec.seed + 1000 * level_index,
            num_requests=max(self.spec.num_requests, self.requests_per_slot * concurrency),
        )
        return build_prompts(spec, tokenizer)

    def options_dict(self) -> dict[str, Any]:
        """JSON-ready transport options and levels."""
        return {"concurrencies": list(self.concurrencies), **self.opts.__dict__}


async def run_scenario(
    targets: Sequence[Target], scenario: Scenario, tokenizer: Any
) -> list[list[LevelResult]]:
    """Run the scenario on every target, interleaved per level (A, then B, ...).

    Returns:
        One list of level results per target, in `targets` order.
    """
    results: list[list[LevelResult]] = [[] for _ in targets]
    warm_prompt = scenario.prompts(tokenizer, -1)[0]
    for target in targets:
        rec = await warmup(target, warm_prompt, scenario.opts)
        if not rec.ok:
            logger.warning("warm-up request to %s failed: %s", target.label, rec.error)
    for index, concurrency in enumerate(scenario.concurrencies):
        prompts = scenario.prompts(tokenizer, index)
        for t_index, target in enumerate(targets):
            runner = run_prefix_level if scenario.kind == "shared_prefix" else run_level
            level = await runner(target, prompts, concurrency, scenario.opts)
            logger.info(
                "%s c=%d: %d/%d ok, %.1f tok/s, TTFT p50 %s ms",
                target.label,
                concurrency,
                level.completed,
                level.num_requests,
                level.output_throughput,
                level.ttft_ms.p50,
            )
            results[t_index].append(level)
    return results


def scenario_document(
    kind: str,
    scenario: Scenario,
    targets: Sequence[Target],
    results: Sequence[Sequence[LevelResult]],
    **fields: Any,
) -> dict[str, Any]:
    """The result document of `run_scenario`: one `runs` entry per target, plus `fields`."""
    runs = [
        {
            "label": t.label,
            "base_url": t.base_url,
            "model": t.model,
            "levels": [lv.to_dict() for lv in levels],
        }
        for t, levels in zip(targets, results)
    ]
    return new_document(
        kind,
        scenario.spec.to_dict(),
        scenario=scenario.kind,
        options=scenario.options_dict(),
        runs=runs,
        **fields,
    )


def add_workload_args(parser: argparse.ArgumentParser) -> None:
    """Workload and scenario flags common to `online` and `compare`."""
    g = parser.add_argument_group("workload")
    g.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[1, 4, 16, 32],
        help="concurrency levels (default: 1 4 16 32)",
    )
    add_workload_length_args(g)
    g.add_argument(
        "--shared-prefix-tokens",
        type=int,
        default=0,
        help="prefix-cache scenario: every request shares a system prompt this long",
    )
    g.add_argument(
        "--burst",
        type=int,
        default=0,
        help="burst scenario: fire this many requests at once (preemption test)",
    )
    g.add_argument(
        "--requests-per-slot",
        type=int,
        default=0,
        help="a level sends at least this many requests per unit of concurrency (steady state)",
    )
    g.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    g.add_argument(
        "--text-workload",
        choices=TEXT_WORKLOADS,
        default=None,
        help="natural-text prompts (load_tests.text_prompts; use --endpoint chat) instead of "
        "random tokens; --input-len is then ignored",
    )
    g.add_argument(
        "--level-timeout",
        type=float,
        default=600.0,
        help="wall-clock budget per level and target (s)",
    )
    g.add_argument("--request-timeout", type=float, default=300.0, help="per request (s)")
    g.add_argument(
        "--tokenizer",
        default=None,
        help="tokenizer checkpoint for building prompts (default: SmolLM2 GGUF)",
    )


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    """Build the scenario the flags describe.

    Raises:
        ValueError: both `--burst` and `--shared-prefix-tokens`, or a concurrency below 1.
    """
    if args.burst and args.shared_prefix_tokens:
        raise ValueError("--burst and --shared-prefix-tokens are separate scenarios: pick one")
    if any(c < 1 for c in args.concurrency):
        raise ValueError(f"--concurrency {args.concurrency}: every level must be >= 1")
    kind: ScenarioKind = "levels"
    concurrencies = tuple(args.concurrency)
    num_requests = args.num_requests
    if args.burst:
        kind, concurrencies, num_requests = "burst", (args.burst,), args.burst
    elif args.shared_prefix_tokens:
        kind = "shared_prefix"
    spec = workload_spec_from_args(
        args, num_requests, args.shared_prefix_tokens, args.text_workload
    )
    opts = RunOptions(
        endpoint=args.endpoint,
        level_timeout_s=args.level_timeout,
        request_timeout_s=args.request_timeout,
    )
    return Scenario(kind, concurrencies, spec, opts, args.requests_per_slot)
