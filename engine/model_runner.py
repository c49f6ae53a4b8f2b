"""Runs one flattened batch through the HF model over the paged KV cache.

A step whose sequences carry images or audio (`StepInput.media`) enters the decoder as
embeddings with the encoder's rows in place of the placeholders, and, for an M-RoPE model, with
3-section positions (`engine.multimodal.prefill_inputs`); every other step enters as token ids.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.attention_metadata import AttentionMetadata
from engine.decode_graphs import DecodeGraphSpec, pad_decode_step
from engine.deepseek_v4.step_indices import HybridStep
from engine.forward_context import ForwardContext, forward_context
from engine.lora.batch import LoraBatch
from engine.multimodal.encoder_cache import EncoderCache
from engine.multimodal.families import family_of
from engine.multimodal.prefill_inputs import MediaInputs
from engine.step_input import StepInput
from npu_ops.graph_mode import compile_graph
from npu_ops.ops import active_ops
from npu_ops.platform import current_platform


class ModelRunner:
    """Owns the model (or this rank's shard of it) and its KV cache; turns a step into logits.

    Args:
        model: an HF causal LM loaded with `ATTENTION_NAME` attention.
        kv_caches: per-layer caches from `allocate_kv_caches`.
        block_size: tokens per block.
        device: where the model lives.
        graphs: decode steps to run as captured graphs (`engine.decode_graphs`); None runs
            every step eager. With graphs, the caches' last block is the padding block, which
            the engine's block manager does not own.
        encoder_cache: where a multimodal model keeps encoder outputs (None: only within a
            step); ignored for a text model.

    Raises:
        ValueError: graph mode asked for and the platform's compiler is missing.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        block_size: int,
        device: torch.device,
        graphs: DecodeGraphSpec | None = None,
        encoder_cache: EncoderCache | None = None,
    ) -> None:
        self.model = model
        self.media: MediaInputs | None = None
        """Builds the decoder inputs of steps with media; None for a text model."""
        family = family_of(model)
        if family is not None:
            if encoder_cache is None:
                encoder_cache = EncoderCache(shared_items=0, max_requests=1)
            self.media = MediaInputs(family, model.get_input_embeddings(), encoder_cache)
        self.decoder = model.get_decoder()
        self.graphs = graphs
        self.graph_decoder = (
            None
            if graphs is None
            else compile_graph(self.decoder, current_platform().kind, graphs.cache_dir)
        )
        self.lm_head = model.get_output_embeddings()
        self.ops = active_ops()
        self.kv_caches = kv_caches
        self.block_size = block_size
        self.device = device
        self.pad_block = kv_caches[0][0].shape[0] // block_size - 1 if kv_caches else 0
        self.graphs_in_use: frozenset[int] = frozenset()
        """Sizes whose graph is compiled (`capture`); replaced whole, so the engine thread reads
        either the old or the new set while a capture thread adds to it."""

    def _metadata(
        self, step: StepInput, table_width: int | None = None
    ) -> tuple[torch.Tensor, ForwardContext]:
        """Positions `[T]` and the forward context, built with tensor ops (no per-token loops).

        Args:
            table_width: pad every block table to this many blocks (graph steps); None pads
                to the longest table of the step.
        """
        starts = torch.tensor(step.starts)
        q_lens = torch.tensor(step.q_lens)
        prompt_lens = torch.tensor(step.prompt_lens)
        longest = max(len(t) for t in step.block_tables)
        tables = torch.tensor([t + [0] * (longest - len(t)) for t in step.block_tables])
        if table_width is not None:  # a graph step: its fixed width, padded as a tensor
            tables = F.pad(tables, (0, table_width - longest))
        seq_idx = torch.arange(len(step.starts))
        q_seq = torch.repeat_interleave(seq_idx, q_lens)
        q_first = torch.cumsum(q_lens, 0) - q_lens
        q_pos = starts[q_seq] + torch.arange(len(q_seq)) - q_first[q_seq]
        bs = self.block_size

        generated = q_pos >= prompt_lens[q_seq]

        # decode rows: the token of a one-token step and every generated token (several of one
        # sequence when it verifies speculative draft tokens), each over its own context
        # (positions up to its own, whole blocks, padding masked): a generated token's
        # attention runs on the decode kernel however its step was formed
        as_decode = generated | (q_lens[q_seq] == 1)
        dec_rows = torch.nonzero(as_decode).flatten()
        dec_lens = q_pos[dec_rows] + 1
        if table_width is not None:
            dec_blocks = table_width
        else:
            dec_blocks = int((dec_lens.max() + bs - 1) // bs) if len(dec_rows) else 0
        dec_tables = tables[q_seq[dec_rows], :dec_blocks]
        # prefill chunks: the leading prompt tokens of each longer chunk, as a padded batch of
        # chunks, each causal over its own whole blocks
        pre_q = (prompt_lens - starts).clamp(min=0).minimum(q_lens)
        pre_q[q_lens == 1] = 0
        pre = seq_idx[pre_q > 0]
        pre_rows = torch.nonzero(~as_decode).flatten()
        q_max = int(pre_q[pre].max()) if len(pre) else 0
        slot_in_pre = torch.zeros(len(q_lens), dtype=torch.long)
        slot_in_pre[pre] = torch.arange(len(pre))
        row_seq = q_seq[pre_rows]
        pad_index = slot_in_pre[row_seq] * q_max + q_pos[pre_rows] - starts[row_seq]
        pre_ctx = starts[pre] + pre_q[pre]
        pre_blocks = int((pre_ctx.max() + bs - 1) // bs) if len(pre) else 0
        key = torch.arange(pre_blocks * bs)[None, None, :]
        qi = torch.arange(q_max)[None, :, None]
        real = qi < pre_q[pre][:, None, None]
        pre_mask = (real & (key <= starts[pre][:, None, None] + qi)) | (~real & (key == 0))
        dev = self.device
        meta = AttentionMetadata(
            slot_mapping=(tables[q_seq, q_pos // bs] * bs + q_pos % bs).to(dev),
            kv_caches=self.kv_caches,
            block_size=bs,
            decode_rows=dec_rows.to(dev),
            decode_block_tables=dec_tables.to(device=dev, dtype=torch.int32),
            decode_seq_lens=dec_lens.to(torch.int32),
            prefill_rows=pre_rows.to(dev),
            prefill_pad_index=pad_index.to(dev),
            prefill_block_tables=tables[pre, :pre_blocks].to(dev),
            prefill_mask=pre_mask[:, None].to(dev),
            ops=self.ops,
        )
        ctx = ForwardContext(
            attention=meta,
            prompt_rows=torch.nonzero(~generated).flatten().to(dev),
            generated_rows=torch.nonzero(generated).flatten().to(dev),
            lora=LoraBatch.from_step(step.lora_ids, step.q_lens, dev) if step.lora_ids else None,
            hybrid=None
            if not step.sliding_tables
            else HybridStep.build(q_pos, q_seq, step.block_tables, step.sliding_tables, bs, dev),
        )
        return q_pos, ctx

    def execute(self, step: StepInput) -> torch.Tensor:
        """Prefill/decode every token of the step, write its KV, return logits of `step.rows`.

        A decode step that fits a graph size replays that size's graph, padded, once it is
        compiled (`capture`); any other step runs eager.

        Returns:
            `[len(step.rows), vocab_size]` float32 logits on the model's device.
        """
        return self.execute_hidden(step)[0]

    def execute_hidden(
        self, step: StepInput, previous_hidden_states: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`execute`, also returning the final hidden state of every token of the step.

        Args:
            previous_hidden_states: `[T, hidden]` per token, passed to the decoder as
                `previous_hidden_states` (the MTP draft layer's input,
                `engine.spec_decode.mtp_model`); such steps run eager.

        Returns:
            `[len(step.rows), vocab_size]` float32 logits and `[T, hidden]` hidden states
            (after the final norm, the model's dtype), T = `len(step.token_ids)`.
        """
        size = None
        if self.graphs is not None and previous_hidden_states is None:
            size = self.graphs.bucket(step)
        if size is None or size not in self.graphs_in_use:  # not yet compiled: eager
            return self._forward(step, graph=False, previous=previous_hidden_states)
        logits, hidden = self._forward(
            pad_decode_step(step, size, self.pad_block), graph=True, previous=None
        )
        return logits, hidden[: len(step.token_ids)]

    def capture(self, size: int) -> None:
        """Compile (or load from the compile cache) the decode graph of `size` rows, then put it
        in use: decode steps of that size replay it from the next step on.

        One step of padding rows runs eager first (it checks the inputs and loads the kernels
        the graph calls), then the same step through the graph, which compiles it. Both write
        the padding block only, so a capture may run on another thread while steps execute
        (`engine.graph_capture`).

        Raises:
            ValueError: the runner has no graphs, or `size` is not one of their sizes.
        """
        if self.graphs is None or size not in self.graphs.batch_sizes:
            raise ValueError(f"no decode graph of size {size} is configured")
        empty = StepInput([], [], [], [], [], [])
        padding = pad_decode_step(empty, size, self.pad_block)
        self._forward(padding, graph=False, previous=None)
        self._forward(padding, graph=True, previous=None)
        self.graphs_in_use = self.graphs_in_use | {size}

    @torch.inference_mode()
    def execute_stage(
        self, step: StepInput, inputs_embeds: torch.Tensor | None, last: bool
    ) -> torch.Tensor:
        """Run a pipeline stage's layers on the step (eager; `engine.parallel.stage_layers`).

        Args:
            inputs_embeds: `[T, hidden]` the previous stage's hidden states; None on the
                first stage, which embeds `step.token_ids`.
            last: the last stage, which applies the final norm and the output projection.

        Returns:
            `[len(step.rows), vocab_size]` float32 logits on the last stage, else the `[T,
            hidden]` hidden states (the model's dtype) for the next stage.
        """
        hidden = self._hidden(step, self.decoder, None, None, inputs_embeds)
        return self._logits(step, hidden) if last else hidden

    @torch.inference_mode()
    def _forward(
        self, step: StepInput, graph: bool, previous: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if graph:
            assert self.graphs is not None and self.graph_decoder is not None
            decoder, width = self.graph_decoder, self.graphs.max_blocks_per_seq
        else:
            decoder, width = self.decoder, None
        hidden = self._hidden(step, decoder, width, previous, None)
        return self._logits(step, hidden), hidden

    def _hidden(
        self,
        step: StepInput,
        decoder: torch.nn.Module,
        width: int | None,
        previous: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
    ) -> torch.Tensor:
        """The decoder's `[T, hidden]` output: from the step's tokens, or from `inputs_embeds`
        (a later pipeline stage)."""
        q_pos, ctx = self._metadata(step, width)
        extra: dict[str, torch.Tensor] = {}
        positions = q_pos.to(self.device)[None]
        if step.media and inputs_embeds is None:
            assert self.media is not None, "media in a step of a text model"
            embeds, positions = self.media.inputs(step, q_pos, self.device)
            extra["inputs_embeds"] = embeds[None]
        elif inputs_embeds is None:
            extra["input_ids"] = torch.tensor(step.token_ids, device=self.device)[None]
        else:
            extra["inputs_embeds"] = inputs_embeds[None]
        if previous is not None:
            extra["previous_hidden_states"] = previous
        with forward_context(ctx):
            hidden: torch.Tensor = decoder(
                position_ids=positions, use_cache=False, **extra
            ).last_hidden_state[0]
        return hidden

    def _logits(self, step: StepInput, hidden: torch.Tensor) -> torch.Tensor:
        """float32 logits of `step.rows` from the final hidden states `[T, hidden]`."""
        rows = torch.tensor(step.rows, dtype=torch.long, device=self.device)
        return self.lm_head(hidden[rows]).float()
