"""Recorded `npu-smi info` outputs (Atlas 800T A2, 8 × Ascend 910B3, driver 23.0.6)."""

from __future__ import annotations

HEADER = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.6                   Version: 23.0.6                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
"""
CARD = """\
| {npu:<5} 910B3               | {health:<13} | 96.5        36                0    / 0             |
| 0                         | 0000:{bus}:00.0  | 0           0    / 0          {used:<4} / 65536         |
+===========================+===============+====================================================+
"""
PROCESSES = """\
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| No running processes found in NPU 0                                                            |
+===========================+===============+====================================================+
"""
BUS = ["C1", "C2", "81", "82", "01", "02", "41", "42"]


def table(health: dict[int, str] | None = None, used_mb: dict[int, int] | None = None) -> str:
    """An 8-card table; `health`/`used_mb` override cards (default OK, 3393 MB used)."""
    health, used_mb = health or {}, used_mb or {}
    cards = "".join(
        CARD.format(npu=i, health=health.get(i, "OK"), bus=BUS[i], used=used_mb.get(i, 3393))
        for i in range(8)
    )
    return HEADER + cards + PROCESSES


HEALTHY_8X910B = table()
ONE_WARNING_ONE_ALARM = table(health={3: "Warning", 5: "Alarm"})
BUSY_CARD = table(used_mb={2: 60000})

# A 310P3 inference card: no HBM column, Memory-Usage is the device memory.
ATLAS_300I_310P3 = """\
+--------------------------------------------------------------------------------------------------------+
| npu-smi 23.0.0                                   Version: 23.0.0                                       |
+-------------------------------+-----------------+------------------------------------------------------+
| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |
| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |
+===============================+=================+======================================================+
| 0       310P3                 | OK              | 15.8         42                0    / 0              |
| 0       0                     | 0000:82:00.0    | 0            1074 / 21534                            |
+===============================+=================+======================================================+
"""
