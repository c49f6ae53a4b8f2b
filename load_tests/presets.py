"""Named workloads for `load_tests.compare --presets`: the traffic shapes a comparison must cover.

- `prefill-heavy`: completions, 128 prompt tokens, 64 output tokens (prefill dominates; the
  earlier comparisons' workload).
- `decode-heavy`: chat, a 24-token user turn (~40 tokens with the chat template), 128 output
  tokens (decode dominates: chat and agent replies).
- `dataset-like`: chat, prompt lengths log-normal around 96 tokens (σ 0.8, clipped to 4..384)
  and outputs log-normal around 128 (σ 0.6, clipped to 2..512): a mix of both.

`dataset-like` stands in for a ShareGPT-style trace (none can be downloaded here): prompt and
reply lengths are drawn from log-normal distributions, whose long right tail is the shape of
chat traces (most turns short, a few long ones), with the same seed for every target. Every
request streams and sets `ignore_eos`, so each side generates exactly the requested tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from load_tests.client import Endpoint


@dataclass(frozen=True)
class Preset:
    """One named workload.

    Attributes:
        endpoint: `completions` or `chat`.
        input_len: prompt tokens (mean for `dataset_like`).
        output_len: `max_tokens` (mean for `dataset_like`).
        dataset_like: draw lengths from the log-normal mix (see the module docstring).
    """

    endpoint: Endpoint
    input_len: int
    output_len: int
    dataset_like: bool = False


PRESETS: dict[str, Preset] = {
    "prefill-heavy": Preset("completions", 128, 64),
    "decode-heavy": Preset("chat", 24, 128),
    "dataset-like": Preset("chat", 96, 128, dataset_like=True),
}
