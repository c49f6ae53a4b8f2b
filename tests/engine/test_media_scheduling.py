"""Model-free cases of media items in the scheduler and the prefix cache: a chunk never ends
inside an item's placeholder tokens, and block hashes key on each item's content."""

from __future__ import annotations

import torch

from engine.block_manager import BlockManager
from engine.multimodal.inputs import MediaItem
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler
from engine.sequence import Sequence
from tests.engine.test_scheduler_and_blocks import advance, make_seq


def image(offset: int, length: int, value: float = 1.0) -> MediaItem:
    data = {"pixel_values": torch.full((4, 6), value), "image_grid_thw": torch.tensor([[1, 2, 2]])}
    return MediaItem("image", offset, length, data)


def with_media(n_prompt: int, arrival: int, *items: MediaItem) -> Sequence:
    seq = make_seq(n_prompt, arrival)
    seq.media = items
    return seq


def chunks(sch: Scheduler, steps: int) -> list[dict[str, int]]:
    out = []
    for _ in range(steps):
        batch = sch.schedule()
        out.append({s.seq.request_id: s.num_new_tokens for s in batch.scheduled})
        advance(sch, batch)
    return out


def test_a_chunk_ends_before_an_item_it_would_split() -> None:
    sch = Scheduler(BlockManager(32, 4, enable_prefix_caching=False), 8, 8)
    sch.add(with_media(20, 0, image(5, 6)))  # placeholders [5, 11)
    # [0, 8) would end inside the item: cut at 5; [5, 13) holds it whole; then the rest
    assert chunks(sch, 3) == [{"r0": 5}, {"r0": 8}, {"r0": 7}]


def test_an_item_longer_than_the_left_budget_waits_and_heads_the_next_step() -> None:
    sch = Scheduler(BlockManager(64, 4, enable_prefix_caching=False), 8, 8)
    sch.add(make_seq(3, 0))  # takes 3 of the 8
    sch.add(with_media(12, 1, image(0, 7)))  # its item needs 7: not in the 5 left, so it waits
    first = sch.schedule()
    assert [(s.seq.request_id, s.num_new_tokens) for s in first.scheduled] == [("r0", 3)]
    advance(sch, first)
    # next step: r0 decodes (1 token) and the item fits the 7 left
    second = sch.schedule()
    assert {s.seq.request_id: s.num_new_tokens for s in second.scheduled} == {"r0": 1, "r1": 7}


def test_an_item_at_the_head_of_a_step_may_exceed_a_lowered_budget() -> None:
    sch = Scheduler(BlockManager(64, 4, enable_prefix_caching=False), 8, 16)
    sch.add(with_media(14, 0, image(0, 12)))
    sch.limits = type(sch.limits)(8, 8)  # e.g. lowered by the SLO controller
    assert chunks(sch, 2) == [{"r0": 12}, {"r0": 2}]


def test_block_hashes_key_on_the_item_content() -> None:
    bm = BlockManager(32, 4)
    a = with_media(12, 0, image(4, 4, 1.0))
    b = with_media(12, 1, image(4, 4, 2.0))  # same tokens, another image
    c = with_media(12, 2, image(4, 4, 1.0))  # same image as a
    ha, hb, hc = (bm.chain(s, 3) for s in (a, b, c))
    assert ha[0] == hb[0]  # the block before the image is shared
    assert ha[1] != hb[1] and ha[2] != hb[2]  # from the image's block on, nothing is
    assert ha == hc
    plain = Sequence("p", list(range(12)), SamplingParams(), 3)
    assert bm.chain(plain, 3)[1] != ha[1]
