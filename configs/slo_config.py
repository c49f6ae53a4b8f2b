"""Latency targets for batch sizing (the `slo` section of a model's `engine` settings).

While set, the engine lowers and raises its admission limits (`max_num_seqs`, the running
sequences; `max_num_batched_tokens`, the tokens of one step) step by step to keep the measured
time per output token and time to first token under these targets (`engine.slo_controller`,
`docs/engine-step.md`). The same idea as MindIE's TPOT-aware dynamic batch size
(`dynamicBatchSizeEnable`, `decodeExpectedTime`: hiascend.com MindIE LLM "SLO Scheduling
Optimization") and vLLM-Ascend's dynamic batch (`SLO_limits_for_dynamic_batch`, which sizes the
prefill chunk from an offline cost table: docs.vllm.ai/projects/ascend, feature guide "Dynamic
Batch"); ours measures instead of predicting.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class SloConfig(BaseModel):
    """Latency targets and the step sizes of the control loop that holds them."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="after")
    def _a_target(self) -> SloConfig:
        if self.tpot_ms is None and self.ttft_ms is None:
            raise ValueError("slo needs a target: set tpot_ms, ttft_ms or both (or drop `slo`)")
        return self

    tpot_ms: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Time per output token to hold, milliseconds: the p90 of the wall time of "
        "the last `window_steps` decode steps (the wait of a running sequence for its next "
        "token). Over it, `max_num_seqs` and `max_num_batched_tokens` shrink; well under it "
        "(below `increase_margin` x target) while requests wait, they grow. None: no TPOT "
        "target.",
    )
    ttft_ms: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Time to first token to hold, milliseconds: the p90 of queued -> first token "
        "over the last `window_steps` requests that got one. Over it while requests wait, "
        "`max_num_batched_tokens` (the prefill chunk) grows even when TPOT asks it to shrink. "
        "None: no TTFT target.",
    )
    window_steps: int = Field(
        20,
        ge=2,
        le=1000,
        description="Decode steps (and first tokens, for TTFT) in the sliding window whose p90 "
        "is compared with the targets. A change of the limits empties the TPOT window: the "
        "next decision waits for this many steps at the new limits.",
    )
    min_num_seqs: int = Field(
        1,
        gt=0,
        description="Where the running-sequence limit starts (slow start) and its floor (at most "
        "`max_num_seqs`).",
    )
    decrease_factor: float = Field(
        0.75,
        gt=0.0,
        lt=1.0,
        description="Multiplicative decrease: a limit over target becomes this fraction of what "
        "the window used (running sequences, tokens of the largest step), rounded down, at "
        "least one less, never under its floor.",
    )
    increase_margin: float = Field(
        0.9,
        gt=0.0,
        le=1.0,
        description="Increase only while the TPOT p90 is under this fraction of `tpot_ms` (a "
        "dead band against oscillation) and requests wait: `max_num_seqs` x 2 until the first "
        "cut (slow start), then + 1; `max_num_batched_tokens` + 1/16 of its configured value; "
        "once per decision.",
    )
