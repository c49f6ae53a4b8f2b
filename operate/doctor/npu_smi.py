"""Run `npu-smi info` and parse its table: driver version and per-card health and memory.

The table (Ascend npu-smi command reference, "info" without options; e.g. an Atlas 800T A2):

    | npu-smi 23.0.6                   Version: 23.0.6                                  |
    | NPU   Name                | Health        | Power(W)    Temp(C)   Hugepages-Usage(page)|
    | Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)  |
    | 0     910B3               | OK            | 96.5        36        0    / 0             |
    | 0                         | 0000:C1:00.0  | 0           0    / 0  3393 / 65536         |

Each card has two rows: `NPU id, name | health | power, temp, hugepages` then
`chip id (and device id) | bus id | AICore %, memory used / total, [HBM used / total]`
(310P cards have no HBM column). Health is OK, Warning, Alarm or Critical. The process table
that follows is ignored.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_VERSION = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_PAIR = re.compile(r"(\d+)\s*/\s*(\d+)")
COMMAND_NOT_FOUND = 127


@dataclass(frozen=True)
class CommandResult:
    """Outcome of one external command (127 = not found, as a shell reports it)."""

    returncode: int
    stdout: str
    stderr: str = ""


Runner = Callable[[Sequence[str]], CommandResult]


def run_command(argv: Sequence[str], timeout: float = 30.0) -> CommandResult:
    """Run `argv` and capture its output; a missing program gives returncode 127."""
    try:
        done = subprocess.run(
            list(argv), check=False, capture_output=True, text=True, timeout=timeout
        )
    except FileNotFoundError:
        return CommandResult(COMMAND_NOT_FOUND, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return CommandResult(124, "", f"{argv[0]}: no answer within {timeout:g} s")
    return CommandResult(done.returncode, done.stdout, done.stderr)


@dataclass(frozen=True)
class NpuCard:
    """One NPU chip as `npu-smi info` lists it (memory in MB, None where not shown)."""

    npu_id: int
    chip_id: int
    name: str
    health: str
    bus_id: str
    memory_used_mb: int | None
    memory_total_mb: int | None
    hbm_used_mb: int | None
    hbm_total_mb: int | None

    @property
    def device_memory_mb(self) -> tuple[int, int] | None:
        """(used, total) of the memory models live in: HBM when the card has it."""
        if self.hbm_total_mb:
            return self.hbm_used_mb or 0, self.hbm_total_mb
        if self.memory_total_mb:
            return self.memory_used_mb or 0, self.memory_total_mb
        return None


@dataclass(frozen=True)
class NpuSmiInfo:
    """The parsed table: npu-smi (driver) version and the cards."""

    version: str | None
    cards: tuple[NpuCard, ...]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_npu_smi_info(text: str) -> NpuSmiInfo:
    """Parse the output of `npu-smi info`.

    Raises:
        ValueError: the text is not an npu-smi table (no version line and no card rows).
    """
    version = None
    if m := _VERSION.search(text):
        version = m.group(2)
    cards: list[NpuCard] = []
    pending: tuple[int, str, str] | None = None  # (npu id, name, health) of a first row
    for line in text.splitlines():
        if not line.startswith("|") or "Process id" in line:
            if "Process id" in line:
                break
            continue
        cells = _cells(line)
        if len(cells) != 3:
            continue
        left = cells[0].split()
        if pending is None and left and left[0].isdigit() and not _BUS_ID.match(cells[1]):
            pending = (int(left[0]), " ".join(left[1:]), cells[1])
        elif pending is not None and left and left[0].isdigit():
            pairs = [(int(a), int(b)) for a, b in _PAIR.findall(cells[2])]
            mem = pairs[0] if pairs else (None, None)
            hbm = pairs[1] if len(pairs) > 1 else (None, None)
            npu_id, name, health = pending
            cards.append(NpuCard(npu_id, int(left[0]), name, health, cells[1], *mem, *hbm))
            pending = None
    if version is None and not cards:
        raise ValueError("not npu-smi output: no 'npu-smi … Version:' line and no card rows")
    return NpuSmiInfo(version, tuple(cards))
