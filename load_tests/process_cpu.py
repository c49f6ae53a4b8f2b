"""CPU time of the host's processes, grouped by their role in serving (Linux `/proc`).

`load_tests.token_breakdown` divides each group's CPU time over a level by the level's output
tokens: on a 2-core host the work a streamed token costs outside the engine competes with the
engine's own threads, so it is measured in CPU time as well as in the latencies of the stamps.
Groups: each Ray Serve deployment (`ray::ServeReplica:<app>:<deployment>`, to which Ray appends
`.<method>` while a call runs → `<deployment>`), the
HTTP proxy (`proxy`), the Serve controller (`controller`), Ray's own daemons and idle workers
(`ray`), the benchmark client (`client`, this process) and everything else (`other`).
"""

from __future__ import annotations

import os
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def _group(cmdline: str, pid: int) -> str:
    if pid == os.getpid():
        return "client"
    if cmdline.startswith("ray::ServeReplica:"):  # ...:<app>:<deployment>[.<method>]
        return cmdline.split()[0].split(":")[-1].split(".")[0]
    if cmdline.startswith("ray::ProxyActor"):
        return "proxy"
    if cmdline.startswith("ray::ServeController"):
        return "controller"
    if cmdline.startswith("ray::") or "/ray/" in cmdline or "raylet" in cmdline:
        return "ray"
    return "other"


def cpu_seconds() -> dict[int, tuple[str, float]]:
    """Each live process's group and CPU time so far (user + system, seconds)."""
    out: dict[int, tuple[str, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process ended meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])  # utime, stime (proc(5))
        pid = int(entry.name)
        out[pid] = (_group(cmdline.strip(), pid), ticks / _TICKS)
    return out


def cpu_by_group(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds each group used between two `cpu_seconds` snapshots (processes that started
    in between count from zero; those that ended are not counted)."""
    used: dict[str, float] = {}
    for pid, (group, seconds) in after.items():
        start = before.get(pid, (group, 0.0))[1]
        used[group] = used.get(group, 0.0) + max(0.0, seconds - start)
    return used
