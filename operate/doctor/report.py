"""Doctor check results."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class Status(str, enum.Enum):
    """Outcome of one check. Only FAIL makes `doctor` exit non-zero."""

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"  # not applicable here (no NPU, no Ray cluster, no config)


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report.

    Attributes:
        name: what was checked, e.g. `npu-smi` or `card 3`.
        status: PASS / WARN / FAIL / SKIP.
        detail: what was found.
        fix: the suggested fix; empty when nothing needs doing.
    """

    name: str
    status: Status
    detail: str
    fix: str = ""


def exit_status(checks: Iterable[Check]) -> int:
    """1 when any check failed, else 0."""
    return 1 if any(c.status is Status.FAIL for c in checks) else 0
