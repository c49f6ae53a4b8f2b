"""Factories for load-test tests: synthetic records, level results, result documents."""

from __future__ import annotations

from typing import Any

from load_tests.client import RequestRecord
from load_tests.level_result import summarize_level
from load_tests.report import compare_ratios
from load_tests.results import new_document
from load_tests.workload import WorkloadSpec


def make_record(
    start: float,
    gaps: list[float],
    first: float,
    tokens: int | None = None,
    error: str | None = None,
) -> RequestRecord:
    """A request sent at `start` (s), first chunk `first` s later, then chunks `gaps` apart.

    `tokens` given: the server's usage count; else one token per chunk.
    """
    times = [start + first]
    for g in gaps:
        times.append(times[-1] + g)
    n = len(times) if tokens is None else tokens
    return RequestRecord(
        start=start,
        end=times[-1],
        chunk_times=times,
        output_tokens=n,
        usage_reported=tokens is not None,
        error=error,
    )


def make_levels(scale: float) -> list[dict[str, Any]]:
    """Two levels (concurrency 1 and 4) of synthetic results; `scale` stretches every time."""
    levels = []
    for conc in (1, 4):
        recs = [
            RequestRecord(
                start=0.0,
                end=scale * (1 + i),
                chunk_times=[scale * 0.1, scale * 0.5],
                output_tokens=8,
                usage_reported=True,
            )
            for i in range(conc)
        ]
        levels.append(summarize_level(conc, recs).to_dict())
    return levels


def make_compare_doc() -> dict[str, Any]:
    """A valid compare document where A is exactly twice as fast as B."""
    runs = [
        {"label": lab, "base_url": "http://127.0.0.1:1/v1", "model": "m", "levels": make_levels(s)}
        for lab, s in (("a", 1.0), ("b", 2.0))
    ]
    return new_document(
        "compare",
        WorkloadSpec().to_dict(),
        scenario="levels",
        options={"concurrencies": [1, 4]},
        runs=runs,
        ratios=compare_ratios(runs[0]["levels"], runs[1]["levels"]),
    )


class FakeTokenizer:
    """One token per whitespace-separated word `w<id>` (vocabulary of 1000)."""

    def __len__(self) -> int:
        return 1000

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return " ".join(f"w{i}" for i in ids)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [int(w[1:]) if w[1:].isdigit() else 1 for w in text.split()]
