"""The figures `load_tests.v4_long_context` derives from its rows (KV and decode-step growth
between lengths) and the tables it prints."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from load_tests.v4_long_context_engine import BUCKETS


def growth(rows: list[dict[str, Any]], key: Callable[[dict[str, Any]], int]) -> list[dict]:
    """Bytes per token between consecutive lengths."""
    out = []
    for a, b in zip(rows, rows[1:]):
        out.append(
            {
                "from": a["length"],
                "to": b["length"],
                "bytes_per_token": (key(b) - key(a)) / (b["length"] - a["length"]),
            }
        )
    return out


def tpot_growth(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ours: each length's decode-step growth over the first length's, per bucket (medians),
    and the share of it that grows with the compressed entries (indexer, HCA attention, entry
    index) and with the block count (tables)."""
    base = rows[0]["ours"].get("step_split_ms") if rows else None
    out = []
    for row in rows[1:]:
        split = row["ours"].get("step_split_ms")
        if base is None or split is None:
            continue
        delta = {b: round(split[b] - base[b], 3) for b in BUCKETS}
        out.append(
            {
                "from": rows[0]["length"],
                "to": row["length"],
                "tpot_ms": round(row["ours"]["tpot_ms"] - rows[0]["ours"]["tpot_ms"], 3),
                "split_sum_ms": round(sum(delta.values()), 3),
                "buckets_ms": delta,
                "compressed_entries_ms": round(
                    delta["indexer"] + delta["hca_attention"] + delta["entry_index"], 3
                ),
                "tables_ms": delta["tables"],
                "fixed_ms": round(delta["other_attention"] + delta["rest"], 3),
            }
        )
    return out


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.2f} MiB"


def _r(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_report(doc: dict[str, Any]) -> str:
    """The tables printed to stdout."""
    w, specs = doc["workload"], doc["specs"]
    v4 = specs["ours"]
    lines = [
        f"tiny DeepSeek-V4, {w['dtype']}, block {w['block_size']}, prefill chunk {w['chunk']}, "
        f"{w['decode_tokens']} decode tokens per length ({doc['duration_s']} s in all)",
        f"ours KV: {v4['describe']}",
        f"  full pool {v4['bytes_per_token']:g} B/token ({v4['bytes_per_block']} B/block); "
        f"sliding pool {v4['sliding_bytes_per_block']} B/block, at most "
        f"{v4['sliding_blocks_per_sequence']} per sequence; every layer's K=V uncompressed "
        f"would be {v4['uncompressed_bytes_per_token']} B/token",
    ]
    if "dense" in specs:
        d = specs["dense"]
        lines.append(
            f"dense {doc['dense_family']} KV: {d['describe']}, {d['bytes_per_token']} B/token"
        )
    if doc["peer"]:
        lines.append(f"peer: {doc['peer']['command']} (transformers {doc['peer']['transformers']})")
    lines.append("")
    lines.append(
        f"{'L':>6} | {'prefill s':>9} | {'TPOT mean/min ms':>16} | {'KV held':>11} | "
        f"{'= formula':>9} | {'peer prefill':>12} | {'peer TPOT':>9} | {'x peer':>6} | "
        f"{'peer KV':>11} | {'tokens =':>8} | {'dense TPOT':>10} | {'dense KV':>11}"
    )
    for row in doc["rows"]:
        o, p, d = row["ours"], row.get("peer"), row.get("dense")
        dense_kv = d["kv"]["bytes"] if d else row.get("dense_formula_bytes")
        lines.append(
            f"{row['length']:>6} | {o['prefill_s']:>9.1f} | "
            f"{o['tpot_ms']:>8.2f}/{o['tpot_min_ms']:<7.2f} | {_mib(o['kv']['bytes']):>11} | "
            f"{str(o['kv_matches_formula']):>9} | "
            f"{(format(p['prefill_s'], '.1f') if p else '-'):>12} | "
            f"{(format(p['tpot_ms'], '.2f') if p else '-'):>9} | "
            f"{(_r(row['tpot_ratio']) if p else '-'):>6} | "
            f"{(_mib(p['kv_bytes_after_generate']) if p else '-'):>11} | "
            f"{(str(row['greedy_tokens_equal']) if p else '-'):>8} | "
            f"{(format(d['tpot_ms'], '.2f') if d else '-'):>10} | "
            f"{(_mib(dense_kv) if dense_kv is not None else '-'):>11}"
            + ("" if d or dense_kv is None else " (formula)")
        )
    first = doc["rows"][0] if doc["rows"] else None
    if first is not None:
        peer = first.get("peer")
        lines.append(
            f"single stream at {first['length']} tokens: ours "
            f"{1000 / first['ours']['tpot_ms']:.1f} tok/s decode"
            + (f", peer {1000 / peer['tpot_ms']:.1f} tok/s" if peer else "")
        )
    lines.append("")
    for name, rates in doc["kv_growth"].items():
        expected = specs.get(name, {}).get("bytes_per_token")
        for g in rates:
            lines.append(
                f"{name} KV growth {g['from']} -> {g['to']}: {g['bytes_per_token']:g} B/token "
                f"(bytes_per_token() = {expected:g})"
            )
    lines.append("")
    lines.append("ours, median decode step split (ms; change from the first length):")
    base = doc["rows"][0]["ours"].get("step_split_ms") if doc["rows"] else None
    for row in doc["rows"]:
        split = row["ours"].get("step_split_ms")
        if split is None or base is None:
            continue
        cells = ", ".join(f"{b} {split[b]:.2f} ({split[b] - base[b]:+.2f})" for b in BUCKETS)
        lines.append(f"{row['length']:>6}: {cells}")
    for g in doc["tpot_growth"]:
        lines.append(
            f"TPOT {g['from']} -> {g['to']}: {g['tpot_ms']:+.2f} ms mean; median split "
            f"{g['split_sum_ms']:+.2f} ms = compressed entries (indexer, HCA attention, entry "
            f"index) {g['compressed_entries_ms']:+.2f} + block tables {g['tables_ms']:+.2f} + "
            f"the rest {g['fixed_ms']:+.2f}"
        )
    return "\n".join(lines)
