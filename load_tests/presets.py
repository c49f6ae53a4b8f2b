"""Named workloads for `load_tests.compare --presets`: the traffic shapes a comparison must cover.

- `prefill-heavy`: completions, 128 prompt tokens, 64 output tokens (prefill dominates; the
  earlier comparisons' workload).
- `decode-heavy`: chat, a 24-token user turn (~40 tokens with the chat template), 128 output
  tokens (decode dominates: chat and agent replies).
- `dataset-like`: chat, prompt lengths log-normal around 96 tokens (σ 0.8, clipped to 4..384)
  and outputs log-normal around 128 (σ 0.6, clipped to 2..512): a mix of both.
- `copy-heavy`: chat, "Document <n>.\\n\\n<a ~240-token text>\\n\\nRepeat the text above
  exactly." (~285 tokens templated), 128 output tokens: the answer is in the prompt, n-gram
  speculation's best case.
- `free-gen`: chat, "Story <n>. Write a long story about <topic>, in five paragraphs." (~55
  tokens templated), 128 output tokens: few n-gram matches, speculation must cost nothing.

`copy-heavy` and `free-gen` use `load_tests.text_prompts` (the prompts of
`load_tests.spec_decode_bench`); their `input_len` is nominal (the text sets the length).

`dataset-like` stands in for a ShareGPT-style trace (none can be downloaded here): prompt and
reply lengths are drawn from log-normal distributions, whose long right tail is the shape of
chat traces (most turns short, a few long ones), with the same seed for every target. Every
request streams and sets `ignore_eos`, so each side generates exactly the requested tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from load_tests.client import Endpoint
from load_tests.text_prompts import TextWorkload


@dataclass(frozen=True)
class Preset:
    """One named workload.

    Attributes:
        endpoint: `completions` or `chat`.
        input_len: prompt tokens (mean for `dataset_like`).
        output_len: `max_tokens` (mean for `dataset_like`).
        dataset_like: draw lengths from the log-normal mix (see the module docstring).
        text: natural-text prompts of `load_tests.text_prompts` instead of random tokens.
    """

    endpoint: Endpoint
    input_len: int
    output_len: int
    dataset_like: bool = False
    text: TextWorkload | None = None


PRESETS: dict[str, Preset] = {
    "prefill-heavy": Preset("completions", 128, 64),
    "decode-heavy": Preset("chat", 24, 128),
    "dataset-like": Preset("chat", 96, 128, dataset_like=True),
    "copy-heavy": Preset("chat", 285, 128, text="copy"),
    "free-gen": Preset("chat", 55, 128, text="free"),
}
