"""Per-request sampling parameters, as the engine sees them (already validated)."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.constraints import TokenConstraint


@dataclass(frozen=True)
class SamplingParams:
    """How to pick the next token and when to stop.

    Attributes:
        max_tokens: generated tokens at most (a finish reason of `length` after that).
        temperature: softmax temperature; 0 means greedy (argmax).
        top_p: nucleus mass in (0, 1]; 0 is treated as greedy, as OpenAI documents.
        top_k: keep the k most likely tokens; 0 or -1 disables.
        seed: per-request seed; the same seed and prompt give the same tokens.
        stop_token_ids: extra token ids that end generation (finish reason `stop`).
        ignore_eos: keep generating past the model's end-of-sequence tokens.
        logprobs: number of top alternatives to report per generated token (None: no logprobs).
        prompt_logprobs: number of alternatives per prompt token (None: none); the first prompt
            token has no logprob.
        logit_bias: token id -> additive bias in [-100, 100] applied to the logits.
        presence_penalty: OpenAI presence penalty in [-2, 2].
        frequency_penalty: OpenAI frequency penalty in [-2, 2].
        constraint: a per-sequence token constraint (constrained decoding for `tool_choice`
            and `response_format`); None if unconstrained. Stateful: one per sequence.
        lora: the name of the LoRA adapter the request runs under (`engine.lora`); None: the
            base model. An unknown name makes `LLMEngine.add_request` raise `ValueError`.
        priority: scheduling priority, vLLM's convention (`--scheduling-policy priority`): a
            lower value is admitted, and kept running under KV pressure, before a higher one;
            equal priorities are first come, first served (`engine.scheduler`).
    """

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    logit_bias: dict[int, float] = field(default_factory=dict)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    constraint: TokenConstraint | None = None
    lora: str | None = None
    priority: int = 0

    @property
    def greedy(self) -> bool:
        """True when sampling reduces to argmax."""
        return self.temperature <= 1e-5 or self.top_p <= 0.0 or self.top_k == 1
