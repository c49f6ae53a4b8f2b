"""The engine: `step()` = schedule -> execute -> sample -> update.

Synchronous and single-threaded; `engine.async_engine` drives it from a background thread.
"""

from __future__ import annotations

import itertools
import logging
import os
from dataclasses import dataclass, replace

import torch

from configs.engine_config import EngineConfig
from engine.decode_graphs import DecodeGraphSpec
from engine.deepseek_v4.cache import HybridKVSpec
from engine.executor import Executor, ExecutorDead, LocalExecutor
from engine.graph_capture import capture_decode_graphs
from engine.kv_budget import num_kv_blocks
from engine.kv_layout import block_manager_for, kv_spec
from engine.lora.manager import LoraManager, LoraStats
from engine.model_loader import (
    CheckpointRef,
    eos_token_ids,
    load_config,
    load_model,
    weight_bytes,
)
from engine.outputs import ErrorKind, RequestOutput, TokenLogprob
from engine.sampler import prompt_logprobs, sample
from engine.sampling_params import SamplingParams
from engine.scheduler import ScheduledSeq, Scheduler, SchedulerOutput
from engine.sequence import Sequence
from engine.spec_decode.build import build_speculator, fit_hybrid_drafter, load_drafter
from engine.spec_decode.rejection import verify
from engine.spec_decode.speculator import SpecDecodeStats, Speculator, StepView
from engine.step_input import StepInput
from npu_ops.platform import DeviceKind, Platform, current_platform

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineStats:
    """A snapshot of the engine's load, for metrics and routing (`lora`: see
    `engine.lora.manager.LoraStats`, None when LoRA is off; `spec`: the speculative decoding
    counters, None when speculation is off)."""

    num_running: int
    num_waiting: int
    kv_usage: float
    num_free_blocks: int
    num_blocks: int
    num_preemptions: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    lora: LoraStats | None = None
    spec: SpecDecodeStats | None = None


def resolve_dtype(name: str, platform: Platform) -> torch.dtype:
    """Map a config dtype name to torch; `auto` is the platform's preferred dtype."""
    if name == "auto":
        return platform.preferred_dtype()
    return getattr(torch, name)


class LLMEngine:
    """Continuous-batching engine for one model replica.

    Args:
        checkpoint: path of a `.gguf` file or a checkpoint directory.
        config: engine settings.
        tensor_parallel_size: ranks the model is split over (1: in this process; more: rank
            actors in one Ray placement group, see `engine.parallel`).
        expert_parallel: split MoE experts across the ranks instead of each expert's width.

    Raises:
        ValueError: the checkpoint cannot be found or loaded, its `model_type` is not one the
            engine serves (`engine.architectures`, refused before any weight loads), the KV
            budget is too small for one sequence of `max_model_len` tokens, a start-up LoRA
            adapter is refused, or the speculative drafting model (`draft`, `mtp`) cannot be
            loaded or is asked for with tensor parallel.
        RuntimeError: the ranks' devices could not be had in time.
    """

    def __init__(
        self,
        checkpoint: str,
        config: EngineConfig,
        tensor_parallel_size: int = 1,
        expert_parallel: bool = False,
    ) -> None:
        platform = current_platform()
        # CPU intra-op threads; Ray sets OMP_NUM_THREADS to a replica's (fractional) CPU
        # reservation, i.e. 1, so the engine sets them itself
        self._num_threads = (
            (config.num_threads or os.cpu_count() or 1) if platform.kind is DeviceKind.CPU else 0
        )
        if self._num_threads:
            torch.set_num_threads(self._num_threads)
        self.config = config
        ref = CheckpointRef.from_path(checkpoint)
        self.hf_config = load_config(ref)
        self.dtype = resolve_dtype(config.dtype, platform)
        self.device = platform.device()
        self.vocab_size = int(self.hf_config.vocab_size)
        self.eos_token_ids = eos_token_ids(ref, self.hf_config)
        self.max_model_len = config.max_model_len or int(
            getattr(self.hf_config, "max_position_embeddings", 2048)
        )
        spec = kv_spec(self.hf_config, self.dtype, tensor_parallel_size, config)
        graphs = None
        if spec.hybrid and not config.enforce_eager:
            logger.info("DeepSeek-V4's hybrid cache runs eager: no decode graphs")
        elif not config.enforce_eager:
            graphs = DecodeGraphSpec(
                tuple(config.graph_batch_sizes),
                -(-self.max_model_len // config.block_size),
                config.compile_cache_dir,
            )
        self.executor: Executor
        spec_method = config.speculative.method if config.speculative is not None else None
        if spec_method in ("draft", "mtp") and tensor_parallel_size != 1:
            raise ValueError(
                f"speculative method {spec_method!r} runs with tensor_parallel_size 1 only "
                "(its drafting model runs in the engine's process); use method: ngram"
            )
        drafter = None
        if tensor_parallel_size == 1:
            model = load_model(
                ref,
                self.dtype,
                self.device,
                config.weight_quantization,
                config.output_quantization,
                config.batch_invariant,
                activation_quantization=config.activation_quantization,
                mtp=spec_method == "mtp",
            )
            if config.speculative is not None:
                drafter = load_drafter(
                    config.speculative, model, self.hf_config, self.dtype, self.device
                )
                if drafter is not None and isinstance(spec, HybridKVSpec):
                    spec, drafter = fit_hybrid_drafter(  # V4's MTP: on the sliding pool too
                        spec,
                        drafter,
                        config.max_num_seqs,
                        config.max_num_batched_tokens,
                        config.block_size,
                    )
            self.executor = LocalExecutor(
                model, spec, config.block_size, self.device, graphs, lora=config.lora is not None
            )
        else:
            if config.weight_quantization != "none" or config.output_quantization != "none":
                raise ValueError(
                    "weight_quantization and output_quantization run with tensor_parallel_size "
                    "1 only"
                )
            from engine.parallel.ray_executor import RayExecutor  # needs Ray only when used

            self.executor = RayExecutor(
                checkpoint,
                tensor_parallel_size,
                expert_parallel,
                spec,
                config.block_size,
                self.dtype,
                config.rank_num_cpus,
                config.placement_timeout_s,
                graphs,
                lora=config.lora is not None,
                strategy=config.tensor_parallel_placement,
            )
        try:
            self.lora = None
            if config.lora is not None:
                self.lora = LoraManager(config.lora, self.executor, self.dtype)
            profile = None
            if platform.kind is not DeviceKind.CPU and config.num_kv_blocks is None:
                profile = self.executor.profile(config.max_num_batched_tokens)
            if profile is not None and drafter is not None:
                extra = weight_bytes(drafter.model) if not drafter.mtp else 0  # MTP: in model
                profile = replace(profile, weights=profile.weights + extra)
            num_blocks = num_kv_blocks(
                config, spec, self.max_model_len, profile, drafter.spec if drafter else None
            )
            self.executor.allocate_kv(num_blocks)
            if graphs is not None:
                capture_decode_graphs(self.executor, graphs, self._set_threads)
        except Exception:
            self.executor.shutdown()
            raise
        self.block_manager = block_manager_for(spec, num_blocks, config)
        self.scheduler = Scheduler(
            self.block_manager,
            config.max_num_seqs,
            config.max_num_batched_tokens,
            config.lora.max_loras if config.lora is not None else None,
        )
        self.speculator: Speculator | None = None
        if config.speculative is not None:
            self.speculator = build_speculator(
                config.speculative, self.max_model_len, self.block_manager, drafter, self.device
            )
        self._seqs: dict[str, Sequence] = {}
        self._arrivals = itertools.count()

    def _set_threads(self, num_tokens: int) -> None:
        """CPU: one intra-op thread for steps of at most `single_thread_max_tokens` tokens."""
        if self._num_threads and self.config.single_thread_max_tokens:
            small = num_tokens <= self.config.single_thread_max_tokens
            torch.set_num_threads(1 if small else self._num_threads)

    # ---- requests -------------------------------------------------------------------------

    def add_request(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams
    ) -> None:
        """Queue a request. The caller has validated it (the model replica answers a bad one
        with a 400), so a prompt that is empty, out of vocabulary or over the context here is
        a bug: `AssertionError`.

        Raises:
            ValueError: `params.lora` names no loaded adapter (or LoRA is off).
        """
        n = len(prompt_token_ids)
        assert 0 < n and n + params.max_tokens <= self.max_model_len, (
            f"unchecked request {request_id}: {n} prompt tokens + max_tokens "
            f"{params.max_tokens} vs context {self.max_model_len}"
        )
        assert all(0 <= t < self.vocab_size for t in prompt_token_ids), (
            f"unchecked request {request_id}: a token id outside [0, {self.vocab_size})"
        )
        assert request_id not in self._seqs, f"duplicate request id {request_id}"
        lora_id = None
        if params.lora is not None:
            lora_id = self._lora_on().ref(params.lora).lora_id
        seq = Sequence(request_id, list(prompt_token_ids), params, next(self._arrivals))
        seq.lora_id = seq.cache_key = lora_id
        if params.seed is not None:
            seq.generator = torch.Generator().manual_seed(params.seed)
        self._seqs[request_id] = seq
        self.scheduler.add(seq)

    def abort(self, request_id: str) -> bool:
        """Drop a request and free its blocks; False if it is unknown or already finished."""
        seq = self._seqs.get(request_id)
        if seq is None:
            return False
        self._release(seq)
        return True

    def _release(self, seq: Sequence) -> None:
        """Forget a finished, failed or aborted sequence and free its KV blocks."""
        del self._seqs[seq.request_id]
        self.scheduler.remove(seq)

    def load_lora(self, name: str, path: str) -> None:
        """Load a PEFT adapter at run time (`LoraManager.load`); requests may name it now.

        Raises:
            ValueError: LoRA is off, or see `LoraManager.load`.
        """
        self._lora_on().load(name, path)

    def unload_lora(self, name: str) -> None:
        """Forget an adapter (`LoraManager.unload`).

        Raises:
            ValueError: LoRA is off, or see `LoraManager.unload` (unknown, or in use).
        """
        self._lora_on().unload(name, [s.lora_id for s in self._seqs.values()])

    def lora_stats(self) -> LoraStats | None:
        """Adapters registered, resident, running and waiting, and the load/evict counters;
        None if LoRA is off."""
        if self.lora is None:
            return None
        sched = self.scheduler
        return self.lora.stats(
            [s.lora_id for s in sched.running], [s.lora_id for s in sched.waiting]
        )

    def _lora_on(self) -> LoraManager:
        if self.lora is None:
            raise ValueError("LoRA is off for this model (no `engine.lora` section)")
        return self.lora

    def shutdown(self) -> None:
        """Release the executor's ranks and devices."""
        self.executor.shutdown()

    def has_unfinished(self) -> bool:
        """Whether any request is queued or running."""
        return bool(self._seqs)

    def stats(self) -> EngineStats:
        """Current load figures."""
        bm = self.block_manager
        return EngineStats(
            len(self.scheduler.running),
            len(self.scheduler.waiting),
            bm.usage(),
            bm.num_free_blocks,
            bm.num_blocks,
            self.scheduler.num_preemptions,
            bm.stats.queries,
            bm.stats.hits,
            self.lora_stats(),
            self.speculator.stats() if self.speculator is not None else None,
        )

    # ---- the step -------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Run one engine iteration; returns the new tokens of every sampled request.

        If the step raises (the forward pass, say), every request in the batch ends with finish
        reason `error` and `error_kind="step"` (blocks freed); if one request's own processing
        fails in the sampler, that request alone ends (`error_kind="request"`). Either way the
        engine keeps serving.

        Raises:
            ExecutorDead: a tensor-parallel rank is gone; the engine cannot serve again.
        """
        batch = self.scheduler.schedule()
        if not batch.scheduled:
            return []
        try:
            return self._run(batch)
        except ExecutorDead:  # no later step can run: the caller stops serving
            raise
        except Exception as exc:  # a failed step must not leak blocks or hang callers
            ids = [s.seq.request_id for s in batch.scheduled]
            logger.exception("engine step failed for requests %s", ", ".join(ids))
            for rid in ids:
                self.abort(rid)
            error = f"{type(exc).__name__} in an engine step"
            return [self._failed(s.seq, error, "step") for s in batch.scheduled]

    def _rows(
        self, batch: SchedulerOutput
    ) -> tuple[list[int], list[tuple[ScheduledSeq, int, int]]]:
        """Flattened-batch rows needing logits: prompt-logprob rows first, then sampling rows
        (k + 1 for a sequence verifying k draft tokens)."""
        rows: list[int] = []
        prompt_spans: list[tuple[ScheduledSeq, int, int]] = []
        offset = 0
        for s in batch.scheduled:
            seq = s.seq
            n_prompt_rows = 0
            if seq.params.prompt_logprobs is not None and not seq.prompt_logprobs_sent:
                # rows at prompt positions p (< num_prompt - 1) predict prompt token p + 1
                stop = min(seq.num_computed_tokens + s.num_new_tokens, seq.num_prompt_tokens - 1)
                n_prompt_rows = max(0, stop - seq.num_computed_tokens)
                prompt_spans.append((s, len(rows), n_prompt_rows))
                rows.extend(range(offset, offset + n_prompt_rows))
            offset += s.num_new_tokens
        for_sampling: list[int] = []
        offset = 0
        for s in batch.scheduled:
            offset += s.num_new_tokens
            if s.sample:  # a speculating sequence: its last token's row and each draft's
                for_sampling.extend(range(offset - 1 - len(s.draft_token_ids), offset))
        return rows + for_sampling, prompt_spans

    @torch.inference_mode()
    def _run(self, batch: SchedulerOutput) -> list[RequestOutput]:
        if self.lora is not None:
            self.lora.prepare_step(batch)
        rows, prompt_spans = self._rows(batch)
        step = StepInput.from_schedule(batch, rows)
        self._set_threads(len(step.token_ids))
        hidden = None
        if self.speculator is not None and self.speculator.needs_hidden:
            assert isinstance(self.executor, LocalExecutor), "checked at start-up"
            logits, hidden = self.executor.execute_hidden(step)
        else:
            logits = self.executor.execute(step)
        n_prompt_rows = sum(n for _, _, n in prompt_spans)
        for s, first, n in prompt_spans:
            seq = s.seq
            start = seq.num_computed_tokens
            nxt = seq.prompt_token_ids[start + 1 : start + 1 + n]
            entries = prompt_logprobs(logits[first : first + n], nxt, seq.params.prompt_logprobs)
            # after a preemption the prompt is recomputed: keep only positions not yet seen
            seq.prompt_logprobs.extend(entries[len(seq.prompt_logprobs) - start :])
        sampling = [s for s in batch.scheduled if s.sample]
        for s in batch.scheduled:
            if not s.draft_token_ids:  # a speculating sequence's KV counts once verified
                s.seq.num_computed_tokens += s.num_new_tokens
                self.block_manager.commit(s.seq)
        if not sampling:
            self._propose(step, batch, hidden)
            return []
        logits = logits[n_prompt_rows:]
        # sampling rows: one per plain sequence, k + 1 per sequence verifying k draft tokens
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
                outs.append(self._verify(s, logits[start : start + 1 + len(s.draft_token_ids)]))
            elif i in result.failed:
                self._release(s.seq)
                outs.append(self._failed(s.seq, result.failed[i], "request"))
                i += 1
            else:
                lp = result.logprobs[i]
                outs.append(
                    self._append(s.seq, [result.token_ids[i]], None if lp is None else [lp])
                )
                i += 1
        self._propose(step, batch, hidden)
        return outs

    def _propose(
        self, step: StepInput, batch: SchedulerOutput, hidden: torch.Tensor | None
    ) -> None:
        """Let the speculator follow the step and draft for the sequences that sampled in it
        and go on."""
        if self.speculator is None:
            return
        going = [
            i for i, s in enumerate(batch.scheduled) if s.sample and s.seq.request_id in self._seqs
        ]
        seqs = [s.seq for s in batch.scheduled]
        self.speculator.after_step(StepView(step, seqs, hidden), going)

    def _verify(self, s: ScheduledSeq, logits: torch.Tensor) -> RequestOutput:
        """Keep the part of `s`'s draft the target agrees with (`engine.spec_decode.rejection`)
        and emit it with the target's next token; the KV of the rest is rolled back."""
        assert self.speculator is not None
        draft = list(s.draft_token_ids)
        try:
            verified = verify(logits, s.seq, draft)
        except Exception as exc:  # this request's fault: the batch goes on without it
            logger.exception("request %s failed in speculative verification", s.seq.request_id)
            self._release(s.seq)
            return self._failed(s.seq, f"{type(exc).__name__} in the sampler", "request")
        self.speculator.record(s.seq, len(draft), verified.num_accepted)
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
            self._release(seq)
        elif speculative:
            self.block_manager.trim(seq)
        lp = tuple(lps[:kept]) if lps is not None else None
        return self._output(seq, tuple(tokens[:kept]), reason is not None, reason, lp)

    def _failed(self, seq: Sequence, error: str, kind: ErrorKind) -> RequestOutput:
        return replace(self._output(seq, (), True, "error"), error=error, error_kind=kind)

    def _output(
        self,
        seq: Sequence,
        tokens: tuple[int, ...],
        finished: bool,
        reason: str | None,
        lps: tuple[TokenLogprob, ...] | None = None,
    ) -> RequestOutput:
        prompt_lps = None
        if seq.params.prompt_logprobs is not None and not seq.prompt_logprobs_sent and tokens:
            first = TokenLogprob(seq.prompt_token_ids[0], None, ())
            prompt_lps = (first, *seq.prompt_logprobs)
            seq.prompt_logprobs_sent = True
        return RequestOutput(
            request_id=seq.request_id,
            new_token_ids=tokens,
            finished=finished,
            finish_reason=reason,
            num_prompt_tokens=seq.num_prompt_tokens,
            num_output_tokens=len(seq.output_token_ids),
            logprobs=lps,
            prompt_logprobs=prompt_lps,
            scheduled_at=seq.scheduled_at,
        )
