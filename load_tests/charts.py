"""PNG charts of online/compare results: throughput and median latencies vs concurrency."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: never open a window; must precede pyplot

import matplotlib.pyplot as plt


def plot_runs(doc: dict[str, Any], path: Path) -> Path:
    """Draw every run of a result document (one line per run label) and save it as PNG.

    Panels: output tokens/s, requests/s, TTFT p50 (ms), TPOT p50 (ms/token), each against
    concurrency (log2 x axis when there are several levels).

    Returns:
        `path`.
    """
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    panels = [
        (axes[0][0], "output tokens/s", lambda lv: lv["output_throughput"]),
        (axes[0][1], "requests/s", lambda lv: lv["request_throughput"]),
        (axes[1][0], "TTFT p50 (ms)", lambda lv: lv["ttft_ms"]["p50"]),
        (axes[1][1], "TPOT p50 (ms/token)", lambda lv: lv["tpot_ms"]["p50"]),
    ]
    many_levels = any(len(run["levels"]) > 1 for run in doc["runs"])
    for ax, title, value in panels:
        for run in doc["runs"]:
            xs = [lv["concurrency"] for lv in run["levels"]]
            ys = [value(lv) for lv in run["levels"]]
            pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=run["label"])
        ax.set_title(title)
        ax.set_xlabel("concurrency")
        if many_levels:
            ax.set_xscale("log", base=2)
            ticks = sorted({lv["concurrency"] for run in doc["runs"] for lv in run["levels"]})
            ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.grid(True, alpha=0.3)
        ax.legend()
    w = doc["workload"]
    fig.suptitle(
        f"{doc['kind']} ({doc['scenario']}): {w['num_requests']} requests, "
        f"in {w['input_len']} / out {w['output_len']} tokens"
        + (f", shared prefix {w['shared_prefix_tokens']}" if w.get("shared_prefix_tokens") else "")
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
