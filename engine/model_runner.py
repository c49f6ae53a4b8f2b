"""Runs one flattened batch through the HF model over the paged KV cache."""

from __future__ import annotations

import torch

from engine.attention import AttentionMetadata, attention_context
from engine.scheduler import SchedulerOutput


class ModelRunner:
    """Owns the model and its KV cache; turns a scheduled batch into logits.

    Args:
        model: an HF causal LM loaded with `ATTENTION_NAME` attention.
        kv_caches: per-layer caches from `allocate_kv_caches`.
        block_size: tokens per block.
        device: where the model lives.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        block_size: int,
        device: torch.device,
    ) -> None:
        self.model = model
        self.decoder = model.get_decoder()
        self.lm_head = model.get_output_embeddings()
        self.kv_caches = kv_caches
        self.block_size = block_size
        self.device = device

    def _metadata(
        self, batch: SchedulerOutput
    ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
        seqs = batch.scheduled
        starts = torch.tensor([s.seq.num_computed_tokens for s in seqs])
        q_lens = torch.tensor([s.num_new_tokens for s in seqs])
        ctx_lens = starts + q_lens
        max_blocks = max(len(s.seq.block_table) for s in seqs)
        tables = torch.tensor(
            [s.seq.block_table + [0] * (max_blocks - len(s.seq.block_table)) for s in seqs]
        )
        seq_idx = torch.arange(len(seqs))
        q_seq = torch.repeat_interleave(seq_idx, q_lens)
        q_first = torch.cumsum(q_lens, 0) - q_lens
        q_pos = starts[q_seq] + torch.arange(len(q_seq)) - q_first[q_seq]
        c_seq = torch.repeat_interleave(seq_idx, ctx_lens)
        c_first = torch.cumsum(ctx_lens, 0) - ctx_lens
        c_pos = torch.arange(len(c_seq)) - c_first[c_seq]
        bs = self.block_size

        def slots(seq: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
            return tables[seq, pos // bs] * bs + pos % bs

        mask = (q_seq[:, None] == c_seq[None, :]) & (c_pos[None, :] <= q_pos[:, None])
        meta = AttentionMetadata(
            slot_mapping=slots(q_seq, q_pos).to(self.device),
            context_slots=slots(c_seq, c_pos).to(self.device),
            mask=mask[None, None].to(self.device),
            kv_caches=self.kv_caches,
        )
        return q_pos, q_seq, meta

    @torch.inference_mode()
    def execute(self, batch: SchedulerOutput, rows: torch.Tensor) -> torch.Tensor:
        """Prefill/decode every scheduled token, write its KV, and return logits of `rows`.

        Args:
            batch: the scheduled sequences; token `i` of the flattened batch is token
                `seq.num_computed_tokens + j` of its sequence.
            rows: `[R]` int64 indices into the flattened batch whose logits are needed (the
                last token of each sequence that samples, plus prompt rows for prompt logprobs).

        Returns:
            `[R, vocab_size]` float32 logits.
        """
        ids: list[int] = []
        for s in batch.scheduled:
            start = s.seq.num_computed_tokens
            ids.extend(s.seq.token_ids()[start : start + s.num_new_tokens])
        q_pos, _, meta = self._metadata(batch)
        input_ids = torch.tensor(ids, device=self.device)[None]
        with attention_context(meta):
            hidden = self.decoder(
                input_ids=input_ids, position_ids=q_pos.to(self.device)[None], use_cache=False
            ).last_hidden_state
        return self.lm_head(hidden[0, rows.to(self.device)]).float()
