"""A step's decoder inputs when its sequences carry media: token embeddings with each item's
encoder output in place of its placeholder rows, and (M-RoPE) 3-section positions.

As `Qwen2_5_VLModel.forward` and `Qwen2AudioModel.forward` do for one request, the encoder's
rows replace the placeholders' embeddings row for row; here the items of every sequence of the
step that fall in its prefill chunk are encoded as one batch (`MultimodalFamily.encode`), those
already in the `EncoderCache` skipped. The scheduler never ends a chunk inside an item
(`engine.sequence.Sequence.prefill_end`); a chunk may start inside one, after a prefix-cache hit
that ends there, and then takes the tail of the item's encoder output.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from engine.multimodal.encoder_cache import EncoderCache
from engine.multimodal.families import MultimodalFamily
from engine.multimodal.inputs import MediaItem
from engine.step_input import StepInput

_POSITION_TABLES = 256
"""M-RoPE position tables kept (one per prompt layout; a miss recomputes one)."""

_Layout = tuple[int, tuple[tuple[int, int, tuple[int, ...]], ...]]
"""A prompt's length and, per item, its offset, length and grid: all its positions depend on."""


@dataclass(frozen=True)
class _Placement:
    """An item of the step, the first row of the flattened batch it fills, and how many of its
    leading rows the step skips (their KV came from the prefix cache: a hit may end inside an
    item, as full blocks are cached whatever they hold)."""

    request_id: str
    item: MediaItem
    row: int
    skip: int = 0


class MediaInputs:
    """Builds `inputs_embeds` and positions for steps whose `StepInput.media` is set.

    Args:
        family: the loaded model's adapter.
        embeddings: the language model's input embedding (`get_input_embeddings()`).
        cache: encoder outputs kept by content hash.
    """

    def __init__(
        self, family: MultimodalFamily, embeddings: torch.nn.Module, cache: EncoderCache
    ) -> None:
        self.family = family
        self.embeddings = embeddings
        self.cache = cache
        self.encoder_calls = 0
        """Encoder batches run so far (one per step that had an item to encode)."""
        self._tables: OrderedDict[_Layout, tuple[torch.Tensor, int]] = OrderedDict()

    def inputs(
        self, step: StepInput, q_pos: torch.Tensor, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The decoder's inputs for the step.

        Args:
            q_pos: `[T]` int64 cache position of every row of the step.

        Returns:
            `inputs_embeds` `[T, hidden]` (model dtype) and `position_ids`: `[3, 1, T]` for an
            M-RoPE family (prompt rows from the prompt's table, generated rows `p + delta`),
            else `[1, T]` = `q_pos`.
        """
        ids = torch.tensor(step.token_ids, device=device)
        embeds = self.embeddings(ids)
        placements = self._placements(step)
        outputs = self._encode(placements)
        for place in placements:
            out = outputs[place.item.content_hash]
            assert out.shape[0] == place.item.length, (
                f"encoder gave {out.shape[0]} rows for a {place.item.modality} item of "
                f"{place.item.length} placeholder tokens"
            )
            rows = place.item.length - place.skip
            embeds[place.row : place.row + rows] = out[place.skip :].to(embeds.dtype)
        for rid, start, q, plen in zip(
            step.request_ids, step.starts, step.q_lens, step.prompt_lens, strict=True
        ):
            if start < plen <= start + q:
                self.cache.finish_prefill(rid)
        if not self.family.mrope:
            return embeds, q_pos.to(device)[None]
        return embeds, self._mrope(step, q_pos).to(device)[:, None]

    def _placements(self, step: StepInput) -> list[_Placement]:
        """The items inside each sequence's prefill rows of the step, with their rows."""
        placed: list[_Placement] = []
        row0 = 0
        for rid, items, start, q, plen in zip(
            step.request_ids, step.media, step.starts, step.q_lens, step.prompt_lens, strict=True
        ):
            end = min(start + q, plen)
            for item in items:
                if item.end <= start or item.offset >= end:
                    continue
                assert item.end <= end, (  # the scheduler ends no chunk inside an item
                    f"request {rid}: chunk [{start}, {end}) splits a {item.modality} item at "
                    f"[{item.offset}, {item.end})"
                )
                skip = max(0, start - item.offset)
                placed.append(_Placement(rid, item, row0 + item.offset + skip - start, skip))
            row0 += q
        return placed

    def _encode(self, placements: list[_Placement]) -> dict[bytes, torch.Tensor]:
        """Encoder output per content hash of the placed items: cached ones looked up, the
        rest encoded in one batch (an item repeated in the step counted once)."""
        found: dict[bytes, torch.Tensor] = {}
        missing: dict[bytes, MediaItem] = {}
        for place in placements:
            key = place.item.content_hash
            if key in found or key in missing:
                continue
            hit = self.cache.get(place.request_id, key)
            if hit is None:
                missing[key] = place.item
            else:
                found[key] = hit
        if missing:
            self.encoder_calls += 1
            encoded = self.family.encode(list(missing.values()))
            found.update(zip(missing, encoded, strict=True))
        for place in placements:  # every request keeps what it uses, wherever it came from
            key = place.item.content_hash
            self.cache.put(place.request_id, key, found[key])
        return found

    def _mrope(self, step: StepInput, q_pos: torch.Tensor) -> torch.Tensor:
        """`[3, T]` positions: `q_pos` in every section, except the rows of sequences with
        media (their prompt's table, and `p + delta` past the prompt)."""
        positions = q_pos.expand(3, -1).clone()
        row0 = 0
        for items, q, plen in zip(step.media, step.q_lens, step.prompt_lens, strict=True):
            if items:
                table, delta = self._table(plen, items)
                rows = slice(row0, row0 + q)
                p = q_pos[rows]
                prompt = p < plen
                positions[:, rows] = torch.where(prompt, table[:, p.clamp(max=plen - 1)], p + delta)
            row0 += q
        return positions

    def _table(self, prompt_len: int, items: tuple[MediaItem, ...]) -> tuple[torch.Tensor, int]:
        """The prompt's `[3, prompt_len]` positions and delta, from the LRU of layouts."""
        layout: _Layout = (
            prompt_len,
            tuple((i.offset, i.length, _grid(i)) for i in items),
        )
        entry = self._tables.get(layout)
        if entry is None:
            entry = self.family.prompt_positions(prompt_len, items)
            self._tables[layout] = entry
            while len(self._tables) > _POSITION_TABLES:
                self._tables.popitem(last=False)
        self._tables.move_to_end(layout)
        return entry


def _grid(item: MediaItem) -> tuple[int, ...]:
    """An image's `(t, h, w)` patch grid; `()` for audio."""
    grid = item.data.get("image_grid_thw")
    return () if grid is None else tuple(grid.flatten().tolist())
