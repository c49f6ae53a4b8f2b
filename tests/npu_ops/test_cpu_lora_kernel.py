"""The `cpu` implementation of `grouped_lora` (`npu_ops/cpu_kernels/grouped_lora.cpp`): equal to
the reference within the dtypes' rounding, base rows untouched, and each row's bits independent
of the other rows, the other adapters stacked and the thread count (what `batch_invariant`
relies on)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import torch

from npu_ops.cpu_kernels import GROUPED_LORA, unavailable
from npu_ops.ops import cpu_lora, lora

UNAVAILABLE = unavailable(GROUPED_LORA)
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"kernel: {UNAVAILABLE}")


@dataclass(frozen=True)
class Stack:
    """A step's stacked adapters over a merged projection, as `LoraLinear._stacked` builds it."""

    a: torch.Tensor
    bt: torch.Tensor
    col_ids: torch.Tensor
    spans: torch.Tensor

    def only(self, adapter: int) -> Stack:
        keep = self.col_ids == adapter
        return Stack(self.a[keep], self.bt[keep], self.col_ids[keep], self.spans[keep])

    def to(self, dtype: torch.dtype) -> Stack:
        return Stack(self.a.to(dtype), self.bt.to(dtype), self.col_ids, self.spans)


def _stack(k: int, slices: list[tuple[int, int]], ranks: dict[int, int], seed: int = 0) -> Stack:
    """Adapters `ranks` (id -> rank) over every slice `(start, stop)` of the output columns."""
    g = torch.Generator().manual_seed(seed)
    n = slices[-1][1]
    a, bt, cols, spans = [], [], [], []
    for adapter, rank in ranks.items():
        for start, stop in slices:
            a.append(torch.randn(rank, k, generator=g) * k**-0.5)
            b = torch.zeros(rank, n)
            b[:, start:stop] = torch.randn(rank, stop - start, generator=g) * rank**-0.5
            bt.append(b)
            cols.append(torch.full((rank,), adapter, dtype=torch.int64))
            spans.append(torch.tensor([[start, stop]] * rank))
    return Stack(torch.cat(a), torch.cat(bt), torch.cat(cols), torch.cat(spans))


def _run(y: torch.Tensor, x: torch.Tensor, stack: Stack, row_ids: torch.Tensor) -> torch.Tensor:
    return cpu_lora.grouped_lora(
        y.clone(), x, stack.a, stack.bt, row_ids, stack.col_ids, stack.spans
    )


def _float64_reference(
    y: torch.Tensor, x: torch.Tensor, stack: Stack, row_ids: torch.Tensor
) -> torch.Tensor:
    a, bt = stack.a.double(), stack.bt.double()
    return lora.grouped_lora(y.double(), x.double(), a, bt, row_ids, stack.col_ids, stack.spans)


@pytest.fixture
def threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


# q/k/v of unequal widths; widths and inputs that are not multiples of 16 (the vector tails),
# an input narrower than one vector, a slice of no columns
SHAPES = [
    (64, [(0, 64), (64, 80), (80, 96)]),
    (40, [(0, 37), (37, 70)]),
    (7, [(0, 5), (5, 5), (5, 131)]),
]
RANKS = {3: 8, 5: 3, 9: 16}  # ranks of 1 to 4 columns past a multiple of 4


@pytest.mark.parametrize(("k", "slices"), SHAPES)
@pytest.mark.parametrize("act", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("weights", [torch.float32, torch.bfloat16])
def test_kernel_equals_the_reference(
    k: int, slices: list[tuple[int, int]], act: torch.dtype, weights: torch.dtype
) -> None:
    stack = _stack(k, slices, RANKS).to(weights)
    n = slices[-1][1]
    row_ids = torch.tensor([3, 0, 5, 5, 9, 3, 0, 9, 3, 7])  # 0 and 7: no columns, base rows
    x, y = torch.randn(10, k).to(act), torch.randn(10, n).to(act)
    got = _run(y, x, stack, row_ids)
    want = _float64_reference(y, x, stack, row_ids)
    assert got.dtype == act
    tol = 1e-5 if act == torch.float32 else 2e-2  # float16: computed in float32, cast once
    torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)
    base = (row_ids == 0) | (row_ids == 7)
    assert torch.equal(got[base], y[base]), "a base row is left as it was, bit for bit"


@pytest.mark.parametrize("act", [torch.float32, torch.bfloat16])
def test_a_rows_bits_do_not_depend_on_its_step(act: torch.dtype, threads: None) -> None:
    k, slices = SHAPES[0]
    stack = _stack(k, slices, RANKS).to(torch.bfloat16 if act == torch.bfloat16 else act)
    g = torch.Generator().manual_seed(1)
    rows = 40
    row_ids = torch.tensor([(3, 5, 9, 0)[i % 4] for i in range(rows)])
    x = torch.randn(rows, k, generator=g).to(act)
    y = torch.randn(rows, slices[-1][1], generator=g).to(act)
    torch.set_num_threads(2)
    full = _run(y, x, stack, row_ids)
    for row in (0, 1, 2, 37):
        adapter = int(row_ids[row])
        one = slice(row, row + 1)
        assert torch.equal(_run(y[one], x[one], stack, row_ids[one])[0], full[row])
        assert torch.equal(_run(y[one], x[one], stack.only(adapter), row_ids[one])[0], full[row]), (
            "without the step's other adapters stacked"
        )
    torch.set_num_threads(1)
    assert torch.equal(_run(y, x, stack, row_ids), full), "on one thread"
    reordered = torch.arange(rows).flip(0)
    assert torch.equal(
        _run(y[reordered], x[reordered], stack, row_ids[reordered]), full[reordered]
    ), "rows in another order"


def test_a_prefill_step_and_strided_inputs(threads: None) -> None:
    k, slices = SHAPES[0]
    stack = _stack(k, slices, RANKS).to(torch.bfloat16)
    row_ids = torch.tensor([3] * 200 + [0] * 56 + [9] * 200 + [5] * 56)  # four sequences
    x = torch.randn(512, 2 * k).bfloat16()[:, ::2]  # not contiguous
    y = torch.randn(slices[-1][1], 512).bfloat16().t()
    torch.set_num_threads(2)
    got = cpu_lora.grouped_lora(y, x, stack.a, stack.bt, row_ids, stack.col_ids, stack.spans)
    torch.set_num_threads(1)
    assert torch.equal(_run(y.contiguous(), x.contiguous(), stack, row_ids), got)
    want = _float64_reference(y, x, stack, row_ids)
    torch.testing.assert_close(got.double(), want, atol=2e-2, rtol=2e-2)
    empty = _run(y[:0], x[:0], stack, row_ids[:0])
    assert empty.shape == (0, slices[-1][1])


def test_an_adapters_columns_need_not_be_consecutive_in_the_stack() -> None:
    k, slices = SHAPES[0]
    stack = _stack(k, slices, {3: 8, 5: 4})
    order = torch.cat([torch.arange(0, 12), torch.arange(24, 36), torch.arange(12, 24)])
    order = torch.cat([order, torch.arange(36, len(stack.col_ids))])
    mixed = Stack(stack.a[order], stack.bt[order], stack.col_ids[order], stack.spans[order])
    row_ids = torch.tensor([3, 5, 0, 5, 3])
    x, y = torch.randn(5, k), torch.randn(5, slices[-1][1])
    torch.testing.assert_close(
        _run(y, x, mixed, row_ids),
        lora.grouped_lora(y, x, stack.a, stack.bt, row_ids, stack.col_ids, stack.spans),
    )


def test_the_kernel_writes_y_and_other_dtypes_run_the_reference() -> None:
    k, slices = SHAPES[0]
    stack = _stack(k, slices, RANKS)
    row_ids = torch.tensor([3, 5])
    x, y = torch.randn(2, k), torch.randn(2, slices[-1][1])
    target = y.clone()
    out = cpu_lora.grouped_lora(target, x, stack.a, stack.bt, row_ids, stack.col_ids, stack.spans)
    assert out.data_ptr() == target.data_ptr()
    wide = cpu_lora.grouped_lora(
        y.double(), x.double(), stack.a, stack.bt, row_ids, stack.col_ids, stack.spans
    )
    assert wide.dtype == torch.float64  # the reference
    torch.testing.assert_close(wide.float(), out)


def test_bad_shapes_are_refused() -> None:
    k, slices = SHAPES[0]
    stack = _stack(k, slices, {3: 4})
    x, y = torch.randn(2, k), torch.randn(2, slices[-1][1])
    with pytest.raises(RuntimeError, match="col_spans"):
        cpu_lora.grouped_lora(
            y, x, stack.a, stack.bt, torch.tensor([3, 3]), stack.col_ids, stack.spans + 200
        )
    with pytest.raises(RuntimeError, match="lora_a"):
        cpu_lora.grouped_lora(
            y, x[:, :-1], stack.a, stack.bt, torch.tensor([3, 3]), stack.col_ids, stack.spans
        )
