"""What a Grafana dashboard asks Prometheus for: the series each PromQL expression selects, with
the labels it filters or groups them by (parsed with `promql-parser`), and what a `/metrics`
exposition serves (`scrape_until` waits for it)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import promql_parser as promql
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
VLLM_DASHBOARDS = sorted((REPO / "tests" / "data" / "vllm_dashboards").glob("*.json"))
"""vLLM's own dashboards, pinned (see the README beside them)."""
OUR_DASHBOARD = REPO / "configs" / "monitoring" / "grafana-dashboard.json"

_GRAFANA_RANGES = re.compile(
    r"\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}"
)
_LABEL_VALUES = re.compile(r"label_values\((?:(?P<metric>[^,()]+),\s*)?(?P<label>\w+)\)")


@dataclass(frozen=True)
class Selection:
    """One series selector of a dashboard query.

    Attributes:
        metric: the series name, e.g. `vllm:e2e_request_latency_seconds_bucket`.
        labels: the labels the query needs on it: matched in the selector or grouped by
            (`sum by (...)`) around it (`le` aside: every bucket has it).
        expr: the expression it came from.
    """

    metric: str
    labels: frozenset[str]
    expr: str


def queries(dashboard: Path) -> list[str]:
    """Every PromQL expression of a dashboard: panel targets and template-variable queries."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            expr = node.get("expr")
            if isinstance(expr, str) and expr.strip():
                found.append(expr)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    data = json.loads(dashboard.read_text())
    walk(data["panels"])
    for variable in data.get("templating", {}).get("list", []):
        query = variable.get("query")
        text = query.get("query") if isinstance(query, dict) else None
        match = _LABEL_VALUES.fullmatch(text.strip()) if text else None
        if match and match["metric"]:  # label_values(metric, label): a series query
            found.append(f'{match["metric"].strip()}{{{match["label"]}!=""}}')
    return found


def selections(expr: str) -> Iterator[Selection]:
    """The series selectors of one expression (Grafana's range variables read as `5m`)."""
    tree = promql.parse(_GRAFANA_RANGES.sub("5m", expr))
    grouping: list[frozenset[str]] = []
    out: list[Selection] = []

    def enter(node: Any) -> None:
        if isinstance(node, promql.AggregateExpr):
            modifier = node.modifier
            by = modifier is not None and modifier.type == promql.AggModifierType.By
            grouping.append(frozenset(modifier.labels) if by else frozenset())
        elif isinstance(node, promql.VectorSelector):
            matched = {m.name for m in node.matchers.matchers if m.name != "__name__"}
            needed = frozenset(matched.union(*grouping) - {"le"})
            out.append(Selection(node.name, needed, expr))

    def leave(node: Any) -> None:
        if isinstance(node, promql.AggregateExpr):
            grouping.pop()

    promql.walk(tree, enter, leave)
    yield from out


def dashboard_selections(dashboard: Path) -> list[Selection]:
    """Every series selector of a dashboard."""
    return [s for expr in queries(dashboard) for s in selections(expr)]


@dataclass(frozen=True)
class Exposition:
    """A `/metrics` body as a scraper reads it.

    Attributes:
        samples: sample name -> the label sets of its samples, with their values.
        declared: sample names of families declared (HELP/TYPE) even without a sample yet (a
            labelled counter before its first event).
    """

    samples: dict[str, list[tuple[dict[str, str], float]]]
    declared: frozenset[str]

    @classmethod
    def parse(cls, text: str) -> Exposition:
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        declared: set[str] = set()
        for family in text_string_to_metric_families(text):
            declared.add(family.name + ("_total" if family.type == "counter" else ""))
            for s in family.samples:
                samples.setdefault(s.name, []).append((s.labels, s.value))
        return cls(samples, frozenset(declared))

    def total(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels` (0 if none)."""
        return sum(v for have, v in self.samples.get(name, []) if labels.items() <= have.items())


WAIT_S = 90.0
"""Longer than the metrics board's TTL plus a replica's start, with room for a busy 2-core host."""


def scrape_until(
    http: httpx.Client, path: str, done: Callable[[Exposition], bool], what: str
) -> Exposition:
    """Scrape `path` until `done` holds (the replicas push every couple of seconds); fails
    naming `what` after `WAIT_S`."""
    deadline = time.monotonic() + WAIT_S
    while True:
        resp = http.get(path)
        assert resp.status_code == 200, resp.text
        exposition = Exposition.parse(resp.text)
        if done(exposition):
            return exposition
        assert time.monotonic() < deadline, f"{path}: {what} not seen in {WAIT_S} s"
        time.sleep(0.5)
