"""`python -m load_tests.pipeline_parallel`: one offline workload at TP 1, TP 2, PP 2 and
TP 2 x PP 2 on gloo, as vLLM-Ascend's deployment guide compares layouts (TTFT, throughput).

CPU figures: every rank is a Ray actor with one intra-op thread on this host's cores (4 ranks on
a 2-core host share them), TP 1 runs in the engine's process on `--threads` threads (default
1, as a rank: then PP 2's step against TP 1's shows the stages' overlap); gloo moves
the all-reduces and the stage-to-stage hidden states through local TCP. They show the costs of
the layouts here, not an NPU's.

Model: a random-weight Qwen2 of `QWEN_SHAPE` (~66M parameters, 12 layers: 6 per stage) unless
`--checkpoint` is given.

Workload: `--requests` greedy requests of `--prompt-len` random tokens and `--max-tokens` output
tokens each, all added at once, stepped to completion (chunked by `max_num_batched_tokens`).
Per layout, after one untimed warm-up request: the median and p90 time to first token (from
the requests' addition), output tokens per second over the whole run, the first step's time
(the prefill of the batch's first chunk: under pipeline parallel two micro-batches, one per
stage, so with overlap it takes less than the two stages' work one after the other, which is
TP 1's step on one thread), and whether the greedy tokens equal TP 1's (float32). Then the
overlap itself: the fastest step that prefills `--overlap-tokens` tokens as one sequence (one
micro-batch: the stages work one after the other) and as two sequences of half the length (two
micro-batches: stage 1 runs the first while stage 0 runs the second), and their ratio
`two_over_one`: about 1 without overlap (TP 1, TP 2), towards 0.75 with two stages overlapping
(`(2 + 1) / 2` half-stage units against 2 whole). Prints one JSON object.

Example:
    nice -n 10 python -m load_tests.pipeline_parallel --requests 8 --prompt-len 64
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import ray

from configs.engine_config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from fixtures.tiny_checkpoints import tiny_config

LAYOUTS: dict[str, tuple[int, int]] = {
    "tp1": (1, 1),
    "tp2": (2, 1),
    "pp2": (1, 2),
    "tp2xpp2": (2, 2),
}
"""Layout name -> (tensor_parallel_size, pipeline_parallel_size)."""

QWEN_SHAPE: dict[str, int] = {
    "hidden_size": 512,
    "intermediate_size": 1408,
    "num_hidden_layers": 12,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 32000,
}
"""The default benchmark model's shape (the rest: the tiny Qwen2's, `fixtures.tiny_checkpoints`)."""


def random_qwen(out_dir: Path) -> str:
    """Write the random Qwen2 of `QWEN_SHAPE` (float32, seed 0) to `out_dir`."""
    import torch
    from transformers import AutoModelForCausalLM

    config = tiny_config("qwen2")
    for field, value in QWEN_SHAPE.items():
        setattr(config, field, value)
    config.layer_types = ["full_attention"] * QWEN_SHAPE["num_hidden_layers"]
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(out_dir)
    return str(out_dir)


def build_parser() -> argparse.ArgumentParser:
    """The CLI flags."""
    p = argparse.ArgumentParser(
        prog="python -m load_tests.pipeline_parallel",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--checkpoint",
        help="checkpoint path (default: a random Qwen2 of `QWEN_SHAPE`, written to a temporary "
        "folder; SmolLM2-135M's 9 heads do not split over 2 ranks)",
    )
    p.add_argument("--dtype", default="float32", help="engine dtype (default float32)")
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=64, help="prompt tokens per request")
    p.add_argument("--max-tokens", type=int, default=16, help="output tokens per request")
    p.add_argument("--batched-tokens", type=int, default=512, help="max_num_batched_tokens")
    p.add_argument(
        "--overlap-tokens", type=int, default=512, help="tokens of the timed prefill steps"
    )
    p.add_argument("--overlap-rounds", type=int, default=3, help="timed prefill steps each")
    p.add_argument(
        "--threads", type=int, default=1, help="TP 1's intra-op threads (default 1, as a rank)"
    )
    p.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    return p


def run_layout(
    checkpoint: str,
    tp: int,
    pp: int,
    args: argparse.Namespace,
    prompts: list[list[int]],
    rng: random.Random,
) -> dict[str, Any]:
    """Run the workload once on a fresh engine of this layout; its figures and tokens."""
    config = EngineConfig(
        dtype=args.dtype,
        num_kv_blocks=256,
        block_size=16,
        max_num_batched_tokens=args.batched_tokens,
        max_num_seqs=len(prompts),
        max_model_len=max(args.prompt_len + args.max_tokens, args.overlap_tokens) + 16,
        num_threads=args.threads,
        rank_num_cpus=1,
        placement_timeout_s=120,
        pipeline_parallel_size=pp,
    )
    engine = LLMEngine(checkpoint, config, tensor_parallel_size=tp)
    try:
        params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0)
        # untimed: the first steps of a process pay one-time costs (allocator, kernels, gloo)
        engine.add_request("warm-up", [7] * args.prompt_len, SamplingParams(max_tokens=2))
        while engine.has_unfinished():
            engine.step()
        start = time.perf_counter()
        for i, prompt in enumerate(prompts):
            engine.add_request(str(i), prompt, params)
        first: dict[str, float] = {}
        tokens: dict[str, list[int]] = {}
        step_times: list[float] = []
        while engine.has_unfinished():
            t0 = time.perf_counter()
            outs = engine.step()
            step_times.append(time.perf_counter() - t0)
            now = time.perf_counter()
            for o in outs:
                if o.new_token_ids and o.request_id not in first:
                    first[o.request_id] = now - start
                tokens.setdefault(o.request_id, []).extend(o.new_token_ids)
        wall = time.perf_counter() - start
        overlap = {f"prefill_{n}_seq_s": prefill_step_time(engine, n, args, rng) for n in (1, 2)}
    finally:
        engine.shutdown()
    ttft = sorted(first.values())
    generated = sum(len(t) for t in tokens.values())
    return {
        "ttft_median_s": round(statistics.median(ttft), 3),
        "ttft_p90_s": round(ttft[int(0.9 * (len(ttft) - 1))], 3),
        "output_tokens_per_s": round(generated / wall, 1),
        "first_step_s": round(step_times[0], 3),
        "steps": len(step_times),
        "wall_s": round(wall, 2),
        **overlap,
        "two_over_one": round(overlap["prefill_2_seq_s"] / overlap["prefill_1_seq_s"], 2),
        "tokens": tokens,
    }


def prefill_step_time(
    engine: LLMEngine, seqs: int, args: argparse.Namespace, rng: random.Random
) -> float:
    """The fastest of `--overlap-rounds` steps that prefill `--overlap-tokens` tokens as `seqs`
    fresh sequences (so `seqs` micro-batches under pipeline parallel), in seconds."""
    best = float("inf")
    for r in range(args.overlap_rounds):
        length = args.overlap_tokens // seqs
        for i in range(seqs):
            prompt = [rng.randrange(100, 30000) for _ in range(length)]
            engine.add_request(f"overlap-{seqs}-{r}-{i}", prompt, SamplingParams(max_tokens=1))
        t0 = time.perf_counter()
        engine.step()
        best = min(best, time.perf_counter() - t0)
        while engine.has_unfinished():
            engine.step()
    return round(best, 3)


def main(argv: list[str] | None = None) -> None:
    """Run every layout and print the JSON report."""
    args = build_parser().parse_args(argv)
    scratch = tempfile.TemporaryDirectory()
    checkpoint = args.checkpoint or random_qwen(Path(scratch.name) / "qwen")
    rng = random.Random(0)
    prompts = [
        [rng.randrange(100, 30000) for _ in range(args.prompt_len)] for _ in range(args.requests)
    ]
    ray.init(address="local", num_cpus=8, include_dashboard=False, log_to_driver=False)
    try:
        results = {
            name: run_layout(checkpoint, *LAYOUTS[name], args, prompts, rng)
            for name in args.layouts
        }
    finally:
        ray.shutdown()
        scratch.cleanup()
    reference = results.get("tp1", {}).get("tokens")
    for result in results.values():
        tokens = result.pop("tokens")
        result["tokens_equal_tp1"] = None if reference is None else tokens == reference
    report = {
        "note": "CPU figures (gloo over local TCP, ranks of one thread sharing the host's cores)",
        "checkpoint": args.checkpoint or f"random Qwen2 {QWEN_SHAPE}",
        "dtype": args.dtype,
        "requests": args.requests,
        "prompt_len": args.prompt_len,
        "max_tokens": args.max_tokens,
        "max_num_batched_tokens": args.batched_tokens,
        "layouts": results,
    }
    print(json.dumps(report, indent=2))  # noqa: T201 - a CLI's output


if __name__ == "__main__":
    main()
