"""Runs one flattened batch through the HF model over the paged KV cache."""

from __future__ import annotations

import torch

from engine.attention import AttentionMetadata
from engine.forward_context import ForwardContext, forward_context
from engine.step_input import StepInput
from npu_ops.graph_mode import compile_graph
from npu_ops.platform import current_platform


class ModelRunner:
    """Owns the model (or this rank's shard of it) and its KV cache; turns a step into logits.

    Args:
        model: an HF causal LM loaded with `ATTENTION_NAME` attention.
        kv_caches: per-layer caches from `allocate_kv_caches`.
        block_size: tokens per block.
        device: where the model lives.
        enforce_eager: run the decoder op by op; False compiles it (`npu_ops.graph_mode`).

    Raises:
        ValueError: graph mode asked for and the platform's compiler is missing.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        block_size: int,
        device: torch.device,
        enforce_eager: bool = True,
    ) -> None:
        self.model = model
        self.decoder = model.get_decoder()
        if not enforce_eager:
            self.decoder = compile_graph(self.decoder, current_platform().kind)
        self.lm_head = model.get_output_embeddings()
        self.kv_caches = kv_caches
        self.block_size = block_size
        self.device = device

    def _metadata(self, step: StepInput) -> tuple[torch.Tensor, ForwardContext]:
        """Positions `[T]` and the forward context, built with tensor ops (no per-token loops)."""
        starts = torch.tensor(step.starts)
        q_lens = torch.tensor(step.q_lens)
        ctx_lens = starts + q_lens
        max_blocks = max(len(t) for t in step.block_tables)
        tables = torch.tensor([t + [0] * (max_blocks - len(t)) for t in step.block_tables])
        seq_idx = torch.arange(len(step.starts))
        q_seq = torch.repeat_interleave(seq_idx, q_lens)
        q_first = torch.cumsum(q_lens, 0) - q_lens
        q_pos = starts[q_seq] + torch.arange(len(q_seq)) - q_first[q_seq]
        bs = self.block_size

        # decode: one new token per sequence, each over its own whole blocks (padding masked)
        dec = seq_idx[q_lens == 1]
        dec_blocks = int((ctx_lens[dec].max() + bs - 1) // bs) if len(dec) else 0
        dec_tables = tables[dec, :dec_blocks]
        # prefill chunks: a padded batch of chunks, each causal over its own whole blocks
        pre = seq_idx[q_lens > 1]
        pre_rows = torch.nonzero(q_lens[q_seq] > 1).flatten()
        q_max = int(q_lens[pre].max()) if len(pre) else 0
        slot_in_pre = torch.zeros(len(q_lens), dtype=torch.long)
        slot_in_pre[pre] = torch.arange(len(pre))
        row_seq = q_seq[pre_rows]
        pad_index = slot_in_pre[row_seq] * q_max + q_pos[pre_rows] - starts[row_seq]
        pre_blocks = int((ctx_lens[pre].max() + bs - 1) // bs) if len(pre) else 0
        key = torch.arange(pre_blocks * bs)[None, None, :]
        qi = torch.arange(q_max)[None, :, None]
        real = qi < q_lens[pre][:, None, None]
        pre_mask = (real & (key <= starts[pre][:, None, None] + qi)) | (~real & (key == 0))
        dev = self.device
        meta = AttentionMetadata(
            slot_mapping=(tables[q_seq, q_pos // bs] * bs + q_pos % bs).to(dev),
            kv_caches=self.kv_caches,
            block_size=bs,
            decode_rows=q_first[dec].to(dev),
            decode_block_tables=dec_tables.to(device=dev, dtype=torch.int32),
            decode_seq_lens=ctx_lens[dec].tolist(),
            prefill_rows=pre_rows.to(dev),
            prefill_pad_index=pad_index.to(dev),
            prefill_block_tables=tables[pre, :pre_blocks].to(dev),
            prefill_mask=pre_mask[:, None].to(dev),
        )
        generated = q_pos >= torch.tensor(step.prompt_lens)[q_seq]
        ctx = ForwardContext(
            attention=meta,
            prompt_rows=torch.nonzero(~generated).flatten().to(dev),
            generated_rows=torch.nonzero(generated).flatten().to(dev),
        )
        return q_pos, ctx

    @torch.inference_mode()
    def execute(self, step: StepInput) -> torch.Tensor:
        """Prefill/decode every token of the step, write its KV, return logits of `step.rows`.

        Returns:
            `[len(step.rows), vocab_size]` float32 logits on the model's device.
        """
        q_pos, ctx = self._metadata(step)
        input_ids = torch.tensor(step.token_ids, device=self.device)[None]
        with forward_context(ctx):
            hidden = self.decoder(
                input_ids=input_ids, position_ids=q_pos.to(self.device)[None], use_cache=False
            ).last_hidden_state
        rows = torch.tensor(step.rows, dtype=torch.long, device=self.device)
        return self.lm_head(hidden[0, rows]).float()
