"""The engine: `step()` = schedule -> execute -> postprocess (`docs/engine-step.md`).

Synchronous and single-threaded; `engine.async_engine` drives it from a background thread. Its
parts are built by `engine.engine_builder`; LoRA (`engine.lora.manager`), prompt logprobs
(`engine.prompt_logprobs`) and speculative decoding (`engine.spec_decode.speculator`) each own
their part of the step, called at fixed points of `_run`. With `engine.slo`, each step's wall
time and first tokens go to the `SloController` (`engine.slo_controller`), which sets the
scheduler's admission limits for the next step.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import asdict, dataclass

import torch

from configs.engine_config import EngineConfig
from engine.engine_builder import build_engine
from engine.executor import Executor, ExecutorDead
from engine.lora.manager import LoraManager, LoraStats
from engine.multimodal.inputs import MediaItem, config_modalities
from engine.outputs import RequestOutput
from engine.postprocess import OutputProcessor, sampling_rows
from engine.prompt_logprobs import PromptLogprobRows
from engine.sampling_params import SamplingParams
from engine.scheduler import SchedulerOutput
from engine.sequence import Sequence
from engine.slo_controller import BatchLimits, SloController, SloState, StepSample
from engine.spec_decode.speculator import SpecDecodeStats, Speculator
from engine.step_input import StepInput

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineStats:
    """A snapshot of the engine's load, for metrics and routing (`lora`: see
    `engine.lora.manager.LoraStats`, None when LoRA is off; `spec`: the speculative decoding
    counters, None when speculation is off; `decode_graphs_in_use`: the decode graph sizes
    compiled so far, `engine.graph_capture`, 0 in eager mode; `batch_limits`: the scheduler's
    admission limits now, the configured ones without `engine.slo`; `slo`: the latency
    controller's p90s and decision counts, None without `engine.slo`; `kv_cache_dtype` and
    `kv_bytes_per_token`: the cache's element type (`int8`, `fp8_e4m3`, or the model dtype's
    name for `auto`) and a token's bytes on a rank as stored, codes and scales of an 8-bit cache
    included)."""

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
    decode_graphs_in_use: int = 0
    batch_limits: BatchLimits | None = None
    slo: SloState | None = None
    kv_cache_dtype: str = "auto"
    kv_bytes_per_token: float = 0.0

    def batching(self) -> dict[str, object]:
        """The admission limits and, with `engine.slo`, the measured p90s (seconds) and the
        decision counts, as the replica's health reply shows them (JSON-ready)."""
        return {
            "batch_limits": asdict(self.batch_limits) if self.batch_limits else None,
            "slo": asdict(self.slo) if self.slo else None,
        }


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
        parts = build_engine(checkpoint, config, tensor_parallel_size, expert_parallel)
        self.config = config
        self.hf_config = parts.hf_config
        self.dtype = parts.dtype
        self.device = parts.device
        self.vocab_size = int(parts.hf_config.get_text_config().vocab_size)
        self.input_modalities = config_modalities(parts.hf_config)
        """The media the model takes besides text (`engine.multimodal.inputs.Modality`)."""
        self.eos_token_ids = parts.eos_token_ids
        self.max_model_len = parts.max_model_len
        self.threads = parts.threads
        self.executor: Executor = parts.executor
        self.lora: LoraManager | None = parts.lora
        self.block_manager = parts.block_manager
        self.scheduler = parts.scheduler
        self.speculator: Speculator | None = parts.speculator
        self.kv_bytes_per_token = parts.kv_bytes_per_token
        auto = config.kv_cache_dtype == "auto"  # the cache in the model dtype: name that one
        self.kv_cache_dtype = (
            str(self.dtype).removeprefix("torch.") if auto else config.kv_cache_dtype
        )
        self.slo: SloController | None = None
        if config.slo is not None:
            self.slo = SloController(config.slo, self.scheduler.limits)
            self.scheduler.set_limits(self.slo.limits)  # slow start
        self.outputs = OutputProcessor(
            self.block_manager, self.eos_token_ids, self.max_model_len, self._release
        )
        self._seqs: dict[str, Sequence] = {}
        self._arrivals = itertools.count()

    # ---- requests -------------------------------------------------------------------------

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        media: tuple[MediaItem, ...] = (),
    ) -> None:
        """Queue a request. The caller has validated it (the model replica answers a bad one
        with a 400), so a prompt that is empty, out of vocabulary or over the context here is
        a bug: `AssertionError`.

        Args:
            media: the prompt's images and audio clips, each over its placeholder tokens
                (`engine.multimodal.inputs.MediaItem`), in any order.

        Raises:
            ValueError: `params.lora` names no loaded adapter (or LoRA is off); a media item
                of a modality the model does not take, outside the prompt, overlapping another,
                or longer than `max_num_batched_tokens` (an item is prefilled in one step).
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
        items = self._check_media(media, n)
        seq = Sequence(request_id, list(prompt_token_ids), params, next(self._arrivals))
        seq.lora_id = seq.cache_key = lora_id
        seq.media = items
        if params.seed is not None:
            seq.generator = torch.Generator().manual_seed(params.seed)
        self._seqs[request_id] = seq
        self.scheduler.add(seq)
        if self.slo is not None:
            self.slo.queued(request_id, time.monotonic())

    def _check_media(self, media: tuple[MediaItem, ...], prompt_len: int) -> tuple[MediaItem, ...]:
        """`media` sorted by offset, once checked against the model and the prompt (see
        `add_request`'s errors)."""
        items = tuple(sorted(media, key=lambda m: m.offset))
        budget = self.config.max_num_batched_tokens
        previous_end = 0
        for item in items:
            if item.modality not in self.input_modalities:
                takes = ", ".join(sorted(self.input_modalities)) or "text only"
                raise ValueError(
                    f"this model does not take {item.modality} input (it takes: {takes})"
                )
            if item.length <= 0 or item.offset < previous_end or item.end > prompt_len:
                raise ValueError(
                    f"a {item.modality} item at tokens [{item.offset}, {item.end}) is outside "
                    f"the {prompt_len}-token prompt or overlaps another item"
                )
            if item.length > budget:
                raise ValueError(
                    f"a {item.modality} item of {item.length} tokens is over the engine's "
                    f"max_num_batched_tokens {budget} (an item is prefilled in one step): send "
                    "a smaller image or a shorter clip"
                )
            previous_end = item.end
        return items

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
        if self.slo is not None and not seq.output_token_ids:
            self.slo.forget(seq.request_id)  # else its first token was (or is about to be) seen

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
            len(self.executor.decode_graphs_in_use()),
            self.scheduler.limits,
            self.slo.state() if self.slo is not None else None,
            self.kv_cache_dtype,
            self.kv_bytes_per_token,
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
        start = time.monotonic()
        self.outputs.step_started_at = start
        batch = self.scheduler.schedule()
        if not batch.scheduled:
            return []
        try:
            outs = self._run(batch)
        except ExecutorDead:  # no later step can run: the caller stops serving
            raise
        except Exception as exc:  # a failed step must not leak blocks or hang callers
            ids = [s.seq.request_id for s in batch.scheduled]
            logger.exception("engine step failed for requests %s", ", ".join(ids))
            for rid in ids:
                self.abort(rid)
            error = f"{type(exc).__name__} in an engine step"
            return [self.outputs.failed(s.seq, error, "step") for s in batch.scheduled]
        if self.slo is not None:
            self._follow_slo(batch, outs, start)
        return outs

    def _follow_slo(self, batch: SchedulerOutput, outs: list[RequestOutput], start: float) -> None:
        """Report the step that began at `start` to the SLO controller and apply the limits it
        sets: the step's wall time counts as TPOT when a sequence decoded in it."""
        assert self.slo is not None
        now = time.monotonic()
        decoded = False
        for out in outs:
            n = len(out.new_token_ids)
            if n and out.num_output_tokens == n:
                self.slo.first_token(out.request_id, now)
            decoded = decoded or 0 < n < out.num_output_tokens
        waiting = len(self.scheduler.waiting)
        sample = StepSample(now - start, len(batch.scheduled), batch.num_tokens, decoded, waiting)
        self.scheduler.set_limits(self.slo.observe(sample))

    @torch.inference_mode()
    def _run(self, batch: SchedulerOutput) -> list[RequestOutput]:
        """Execute a scheduled batch and postprocess it; the hooks run at their fixed points."""
        spec = self.speculator
        if self.lora is not None:
            self.lora.prepare_step(batch)  # LoRA: the step's adapters onto the device
        prompt_rows = PromptLogprobRows.of(batch)  # their rows go ahead of the sampling rows
        rows = [*prompt_rows.rows, *sampling_rows(batch)]
        step = StepInput.from_schedule(batch, rows, spec is not None and spec.needs_hidden)
        self.threads.for_step(len(step.token_ids))
        result = self.executor.execute(step)
        sampling_logits = prompt_rows.collect(result.logits)
        outs = self.outputs.process(batch, sampling_logits, spec)  # speculation: verify drafts
        if spec is not None:
            spec.follow_step(step, batch, result.hidden)  # speculation: next step's drafts
        return outs
