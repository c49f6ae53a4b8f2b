"""The step's last phase: its sampling logits turned into tokens, appended to their sequences up
to a stop, and reported as `RequestOutput`s.

A sequence whose chunk reaches the end of its known tokens samples: one logits row (its last
token's), or `k + 1` when it verifies `k` speculative draft tokens (`sampling_rows`). Plain rows
are sampled together (`engine.sampler.sample`); a draft is verified by the speculator
(`Speculator.verify`), which keeps the part the target agrees with and adds the target's next
token. The KV the step computed counts as the sequence's once the step ran (a verified draft's:
only for the tokens it kept, the blocks of rejected ones go back to the pool).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import replace

import torch

from engine.block_manager import BlockManager
from engine.outputs import ErrorKind, RequestOutput, TokenLogprob
from engine.prompt_logprobs import take_prompt_logprobs
from engine.sampler import sample
from engine.scheduler import ScheduledSeq, SchedulerOutput
from engine.sequence import Sequence
from engine.spec_decode.speculator import Speculator

logger = logging.getLogger(__name__)


def sampling_rows(batch: SchedulerOutput) -> list[int]:
    """The flattened-batch rows whose logits are sampled, in the order of `batch.scheduled`: per
    sampling sequence its last known token's row, preceded by its draft tokens' rows' share
    (`1 + len(draft_token_ids)` rows ending at its chunk's last token)."""
    rows: list[int] = []
    offset = 0
    for s in batch.scheduled:
        offset += s.num_new_tokens
        if s.sample:
            rows.extend(range(offset - 1 - len(s.draft_token_ids), offset))
    return rows


class OutputProcessor:
    """Appends each step's tokens to their sequences and builds the outputs.

    Args:
        block_manager: the engine's; computed KV is committed to it, rejected drafts' blocks
            trimmed.
        eos_token_ids: tokens that end a request (unless it ignores EOS).
        max_model_len: context length in tokens: a sequence reaching it ends (`length`).
        release: forgets a finished or failed sequence and frees its blocks (the engine's).

    Attributes:
        step_started_at: when the current step began (`time.monotonic()` seconds), set by the
            engine before each step; stamped on the step's outputs with the time each is built.
    """

    def __init__(
        self,
        block_manager: BlockManager,
        eos_token_ids: tuple[int, ...],
        max_model_len: int,
        release: Callable[[Sequence], None],
    ) -> None:
        self.block_manager = block_manager
        self.eos_token_ids = eos_token_ids
        self.max_model_len = max_model_len
        self.release = release
        self.step_started_at: float | None = None

    def process(
        self, batch: SchedulerOutput, logits: torch.Tensor, speculator: Speculator | None
    ) -> list[RequestOutput]:
        """Commit the step's KV and emit the tokens of every sampling sequence of `batch`.

        Args:
            logits: `[len(sampling_rows(batch)), vocab]` the sampling rows' logits.
            speculator: verifies drafts (None: speculation is off, and no sequence has one).

        Returns:
            One output per sampling sequence, in batch order. A request whose own processing
            fails (its grammar raising in the sampler, say) ends alone, with finish reason
            `error` and `error_kind="request"`.
        """
        for s in batch.scheduled:
            if not s.draft_token_ids:  # a speculating sequence's KV counts once verified
                s.seq.num_computed_tokens += s.num_new_tokens
                self.block_manager.commit(s.seq)
        sampling = [s for s in batch.scheduled if s.sample]
        if not sampling:
            return []
        widths = (1 + len(s.draft_token_ids) for s in sampling[:-1])
        first_row = list(itertools.accumulate(widths, initial=0))
        plain = [j for j, s in enumerate(sampling) if not s.draft_token_ids]
        if len(plain) < len(sampling):
            rows = torch.tensor(
                [first_row[j] for j in plain], dtype=torch.long, device=logits.device
            )
            result = sample(logits[rows], [sampling[j].seq for j in plain])
        else:
            result = sample(logits, [s.seq for s in sampling])
        outs = []
        i = 0
        for s, start in zip(sampling, first_row):
            if s.draft_token_ids:
                assert speculator is not None, "a draft without a speculator"
                draft_logits = logits[start : start + 1 + len(s.draft_token_ids)]
                outs.append(self._verified(s, draft_logits, speculator))
                continue
            if i in result.failed:
                self.release(s.seq)
                outs.append(self.failed(s.seq, result.failed[i], "request"))
            else:
                lp = result.logprobs[i]
                token = [result.token_ids[i]]
                outs.append(self._append(s.seq, token, None if lp is None else [lp]))
            i += 1
        return outs

    def _verified(
        self, s: ScheduledSeq, logits: torch.Tensor, speculator: Speculator
    ) -> RequestOutput:
        """Emit the part of `s`'s draft the target keeps and the target's token after it; the
        KV of the rest is rolled back."""
        try:
            verified = speculator.verify(s, logits)
        except Exception as exc:  # this request's fault: the batch goes on without it
            logger.exception("request %s failed in speculative verification", s.seq.request_id)
            self.release(s.seq)
            return self.failed(s.seq, f"{type(exc).__name__} in the sampler", "request")
        return self._append(s.seq, verified.token_ids, verified.logprobs, speculative=True)

    def _append(
        self,
        seq: Sequence,
        tokens: list[int],
        lps: list[TokenLogprob] | None,
        speculative: bool = False,
    ) -> RequestOutput:
        """Record the step's tokens for `seq` (one sampled token, or a verified draft run and
        the target's token after it) up to the first that ends the request.

        Args:
            speculative: the tokens came from verifying a draft: the KV computed in the step
                is kept for the emitted tokens only (every token but the newest), and blocks
                that held nothing but rejected draft tokens go back to the pool.
        """
        p = seq.params
        reason = None
        kept = 0
        for token in tokens:
            seq.append_output(token)
            kept += 1
            ended = p.constraint is not None and p.constraint.is_terminated()
            if (
                ended
                or (not p.ignore_eos and token in self.eos_token_ids)
                or token in p.stop_token_ids
            ):
                reason = "stop"
            elif len(seq.output_token_ids) >= p.max_tokens or seq.num_tokens >= self.max_model_len:
                reason = "length"
            if reason is not None:
                break
        if speculative:
            seq.num_computed_tokens = seq.num_tokens - 1
            self.block_manager.commit(seq)
        if reason is not None:
            self.release(seq)
        elif speculative:
            self.block_manager.trim(seq)
        lp = tuple(lps[:kept]) if lps is not None else None
        return self._output(seq, tuple(tokens[:kept]), reason, lp)

    def failed(self, seq: Sequence, error: str, kind: ErrorKind) -> RequestOutput:
        """The last output of a request that failed (`finish_reason` `error`); the caller has
        released it."""
        return replace(self._output(seq, (), "error"), error=error, error_kind=kind)

    def _output(
        self,
        seq: Sequence,
        tokens: tuple[int, ...],
        reason: str | None,
        lps: tuple[TokenLogprob, ...] | None = None,
    ) -> RequestOutput:
        return RequestOutput(
            request_id=seq.request_id,
            new_token_ids=tokens,
            finished=reason is not None,
            finish_reason=reason,
            num_prompt_tokens=seq.num_prompt_tokens,
            num_output_tokens=len(seq.output_token_ids),
            logprobs=lps,
            prompt_logprobs=take_prompt_logprobs(seq) if tokens else None,
            scheduled_at=seq.scheduled_at,
            num_cached_tokens=seq.num_cached_tokens,
            step_started_at=self.step_started_at,
            step_ended_at=time.monotonic(),
        )
