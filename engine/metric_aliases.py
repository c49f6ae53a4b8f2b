"""One metric served under a second name, copied at scrape time (nothing extra per observation).

vLLM renamed some metrics and dashboards of either age are in use: the per-token gap
`vllm:time_per_output_token_seconds` became `vllm:inter_token_latency_seconds` (v0.10.2), and
`vllm:gpu_cache_usage_perc` became `vllm:kv_cache_usage_perc`. Recording both names would
double the work on the token path; an `Alias` instead yields the source's samples renamed.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric


class Alias:
    """A collector serving `source` (a labelled metric, not one of its children) as `name`.

    Args:
        source: the metric to copy; its samples keep their labels and values.
        name: the alias, without a type suffix (e.g. no `_total`).
        documentation: the alias's HELP text.
    """

    def __init__(self, source: MetricWrapperBase, name: str, documentation: str) -> None:
        self._source = source
        self._name = name
        self._documentation = documentation

    def describe(self) -> list[Metric]:
        """The alias family, without samples (the registry checks names for clashes)."""
        (family,) = self._source.describe()
        return [Metric(self._name, self._documentation, family.type)]

    def collect(self) -> Iterator[Metric]:
        """The source's current samples under the alias's name."""
        for family in self._source.collect():
            alias = Metric(self._name, self._documentation, family.type)
            old = family.name
            alias.samples = [
                s._replace(name=self._name + s.name[len(old) :]) for s in family.samples
            ]
            yield alias
