"""Plain-text tables of level results and A/B ratios (for the CLIs' stdout)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, None when either is missing or b is zero."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def compare_ratios(
    a_levels: Sequence[dict[str, Any]], b_levels: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """A/B ratios per concurrency level (levels matched by position).

    Returns:
        One dict per level: concurrency, output_throughput (A/B, >1 means A is faster),
        ttft_p50, ttft_p99, tpot_p50 (A/B, <1 means A is faster).
    """
    out = []
    for a, b in zip(a_levels, b_levels):
        assert a["concurrency"] == b["concurrency"], "A and B levels must be interleaved pairs"
        out.append(
            {
                "concurrency": a["concurrency"],
                "output_throughput": ratio(a["output_throughput"], b["output_throughput"]),
                "ttft_p50": ratio(a["ttft_ms"]["p50"], b["ttft_ms"]["p50"]),
                "ttft_p99": ratio(a["ttft_ms"]["p99"], b["ttft_ms"]["p99"]),
                "tpot_p50": ratio(a["tpot_ms"]["p50"], b["tpot_ms"]["p50"]),
            }
        )
    return out


def levels_table(label: str, levels: Sequence[dict[str, Any]]) -> str:
    """One row per level: ok/errors, throughput, TTFT/TPOT/ITL percentiles (ms)."""
    head = (
        f"{'conc':>5} {'ok':>5} {'err':>4} {'req/s':>7} {'tok/s':>8} {'TTFT p50':>9} "
        f"{'p90':>8} {'p99':>8} {'TPOT p50':>9} {'p90':>7} {'p99':>7} {'ITL p50':>8} "
        f"{'p99':>7}"
    )
    rows = [f"== {label}", head]
    for lv in levels:
        t, p, i = lv["ttft_ms"], lv["tpot_ms"], lv["itl_ms"]
        rows.append(
            f"{lv['concurrency']:>5} {lv['completed']:>5} {lv['errors']:>4} "
            f"{lv['request_throughput']:>7.2f} {lv['output_throughput']:>8.1f} "
            f"{_fmt(t['p50']):>9} {_fmt(t['p90']):>8} {_fmt(t['p99']):>8} "
            f"{_fmt(p['p50']):>9} {_fmt(p['p90']):>7} {_fmt(p['p99']):>7} "
            f"{_fmt(i['p50']):>8} {_fmt(i['p99']):>7}"
        )
        if lv.get("first_ttft_ms") is not None or lv.get("rest_ttft_p50_ms") is not None:
            rows.append(
                f"      shared prefix: first TTFT {_fmt(lv['first_ttft_ms'])} ms, "
                f"later TTFT p50 {_fmt(lv['rest_ttft_p50_ms'])} ms"
            )
        if lv.get("server_after"):
            after = ", ".join(f"{k} {v:g}" for k, v in sorted(lv["server_after"].items()))
            rows.append(f"      server after the level: {after}")
        spec = lv.get("spec_decode")
        if spec:
            rate, length = spec["acceptance_rate"], spec["mean_acceptance_length"]
            rows.append(
                f"      speculation: acceptance {_fmt(rate, 3)} ({spec['accepted_tokens']:g}/"
                f"{spec['draft_tokens']:g} draft tokens), mean acceptance length "
                f"{_fmt(length, 2)}"
            )
        if lv["error_samples"]:
            rows.append(f"      errors: {lv['error_samples']}")
    return "\n".join(rows)


def ratios_table(a_label: str, b_label: str, ratios: Sequence[dict[str, Any]]) -> str:
    """A/B ratio rows (tok/s > 1 and latencies < 1 favour A)."""
    rows = [
        f"== ratio {a_label} / {b_label}",
        f"{'conc':>5} {'tok/s':>7} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9}",
    ]
    for r in ratios:
        rows.append(
            f"{r['concurrency']:>5} {_fmt(r['output_throughput'], 2):>7} "
            f"{_fmt(r['ttft_p50'], 2):>9} {_fmt(r['ttft_p99'], 2):>9} "
            f"{_fmt(r['tpot_p50'], 2):>9}"
        )
    return "\n".join(rows)
